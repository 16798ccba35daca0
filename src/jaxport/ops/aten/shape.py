"""ATen lowerings: shape."""
