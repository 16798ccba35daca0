"""ONNX elementwise ops: arithmetic, comparison, logic, math functions, casts."""

from __future__ import annotations

import jax.numpy as jnp

from ..registry import onnx
from ._helpers import legacy_broadcast


@onnx("Add", since=1)
def add_1(A, B, *, broadcast=0, axis=None, consumed_inputs=None):
    """Add-1/6(T A, T B) -> T; B aligned to A by `broadcast`/`axis`."""
    return A + legacy_broadcast(B, jnp.ndim(A), broadcast, axis)


@onnx("Add", since=7)
def add(A, B):
    """Add(T A, T B) -> T C, with NumPy broadcasting."""
    return jnp.add(A, B)
