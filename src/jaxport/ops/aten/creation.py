"""ATen lowerings: creation."""
