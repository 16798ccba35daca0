"""ATen lowerings: attention."""
