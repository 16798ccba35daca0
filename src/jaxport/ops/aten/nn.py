"""ATen lowerings: nn."""
