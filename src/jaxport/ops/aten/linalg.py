"""ATen lowerings: linalg."""
