"""Scripts the sharding and multi-process tests run in subprocesses (they need JAX started with
several CPU devices, which the pytest process may already have started with one)."""
