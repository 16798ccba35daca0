"""ATen lowerings: unary."""
