"""Backends read a `Program`: `program.interpret` runs it (under `jax.jit` or op by op);
`codegen` writes it out as a standalone JAX module."""
