"""ATen lowerings: bitwise ops (and, or, xor, shifts) and logical ops (and, or, xor).

Shift counts that are negative or reach the bit width give PyTorch's results, not C's
undefined behaviour: a left shift gives 0, a right shift moves out every bit but the sign.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from ..registry import aten
from ._promotion import promote


@aten(
    "bitwise_and.Tensor", "bitwise_and.Scalar", "bitwise_and.Scalar_Tensor",
    "__and__.Tensor", "__and__.Scalar",
)
def aten_bitwise_and(self, other):
    """bitwise_and.Tensor(Tensor self, Tensor other) -> Tensor"""
    self, other = promote(self, other)
    return jnp.bitwise_and(self, other)


@aten(
    "bitwise_left_shift.Tensor", "bitwise_left_shift.Tensor_Scalar", "bitwise_left_shift.Scalar_Tensor",
    "__lshift__.Tensor", "__lshift__.Scalar",
)
def aten_bitwise_left_shift(self, other):
    """bitwise_left_shift.Tensor(Tensor self, Tensor other) -> Tensor"""
    self, other = promote(self, other)
    bits = np.dtype(self.dtype).itemsize * 8
    # PyTorch: shifting by a negative count or by the bit width or more gives 0.
    out_of_range = (other < 0) | (other >= bits) if jnp.issubdtype(other.dtype, jnp.signedinteger) else other >= bits
    safe = jnp.where(out_of_range, jnp.zeros_like(other), other)
    return jnp.where(out_of_range, jnp.zeros_like(self), jnp.left_shift(self, safe))


@aten(
    "bitwise_or.Tensor", "bitwise_or.Scalar", "bitwise_or.Scalar_Tensor",
    "__or__.Tensor", "__or__.Scalar",
)
def aten_bitwise_or(self, other):
    """bitwise_or.Tensor(Tensor self, Tensor other) -> Tensor"""
    self, other = promote(self, other)
    return jnp.bitwise_or(self, other)


@aten(
    "bitwise_right_shift.Tensor", "bitwise_right_shift.Tensor_Scalar", "bitwise_right_shift.Scalar_Tensor",
    "__rshift__.Tensor", "__rshift__.Scalar",
)
def aten_bitwise_right_shift(self, other):
    """bitwise_right_shift.Tensor(Tensor self, Tensor other) -> Tensor"""
    self, other = promote(self, other)
    signed = jnp.issubdtype(self.dtype, jnp.signedinteger)
    # PyTorch: a negative or too large count shifts by the bit width (less the sign bit).
    max_shift = np.dtype(self.dtype).itemsize * 8 - int(signed)
    out_of_range = (other < 0) | (other >= max_shift) if signed else other >= max_shift
    safe = jnp.where(out_of_range, jnp.full_like(other, max_shift), other)
    return jnp.right_shift(self, safe)


@aten(
    "bitwise_xor.Tensor", "bitwise_xor.Scalar", "bitwise_xor.Scalar_Tensor",
    "__xor__.Tensor", "__xor__.Scalar",
)
def aten_bitwise_xor(self, other):
    """bitwise_xor.Tensor(Tensor self, Tensor other) -> Tensor"""
    self, other = promote(self, other)
    return jnp.bitwise_xor(self, other)


@aten("logical_and.default")
def aten_logical_and(self, other):
    """logical_and(Tensor self, Tensor other) -> Tensor"""
    return jnp.logical_and(self.astype(jnp.bool_), other.astype(jnp.bool_))


@aten("logical_or.default")
def aten_logical_or(self, other):
    """logical_or(Tensor self, Tensor other) -> Tensor"""
    return jnp.logical_or(self.astype(jnp.bool_), other.astype(jnp.bool_))


@aten("logical_xor.default")
def aten_logical_xor(self, other):
    """logical_xor(Tensor self, Tensor other) -> Tensor"""
    return jnp.logical_xor(self.astype(jnp.bool_), other.astype(jnp.bool_))
