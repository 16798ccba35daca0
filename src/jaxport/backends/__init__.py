"""Backends read a `Program`.

    model           `JaxModel`: params plus a pure `apply` that interprets the program, jitted
                    `__call__`, and `frozen()` with the params as compile-time constants
    inputs          values coming in (inputs, weights) as JAX arrays, checked once
    serialization   `export`: a `jax.export` (StableHLO) artifact plus weights; `load_exported`
    codegen         `emit`: the program written out as a standalone JAX module plus weights
"""
