"""ATen lowerings: activation."""
