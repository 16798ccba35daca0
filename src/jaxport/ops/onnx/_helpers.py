"""Helpers the ONNX lowerings share. Pure JAX/NumPy, like the lowerings themselves, so code
generation can copy them beside the ops that call them."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np


def static_array(value, what: str) -> np.ndarray:
    """`value` as a concrete NumPy array: an operand that decides a shape (Reshape's shape,
    Slice's starts) must be known when `jax.jit` traces the model."""
    if isinstance(value, jax.core.Tracer):
        raise jax.errors.TracerArrayConversionError(value) from None
    return np.asarray(value)


def static_ints(value, what: str) -> tuple[int, ...]:
    """An integer operand (a shape, axes, pads) as a tuple of Python ints; None stays None."""
    if value is None:
        return None
    return tuple(int(v) for v in static_array(value, what).reshape(-1))


def legacy_broadcast(b, a_ndim: int, broadcast: int, axis: int | None):
    """Opset < 7 binary ops: with `broadcast=1`, `b` (rank <= a's) is aligned with `a`'s
    dims from `axis` on (default: the trailing dims), instead of NumPy's rule."""
    b = jnp.asarray(b)
    if not broadcast or b.ndim == a_ndim:
        return b
    start = a_ndim - b.ndim if axis is None else axis % a_ndim if a_ndim else 0
    return b.reshape(b.shape + (1,) * (a_ndim - start - b.ndim))


def normalize_axis(axis: int, ndim: int) -> int:
    return axis + ndim if axis < 0 else axis


def index_dtype() -> np.dtype:
    """ONNX's int64 as JAX holds it: int32 unless x64 mode is on."""
    return np.dtype(jax.dtypes.canonicalize_dtype(np.int64))
