"""Frontends turn a model format into a `jaxport.program.Program`."""
