"""ATen lowerings: indexing."""
