"""ATen lowerings: reduction."""
