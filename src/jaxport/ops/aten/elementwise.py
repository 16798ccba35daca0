"""ATen lowerings: elementwise arithmetic, math functions, comparisons, logic and bitwise ops.

Type promotion follows PyTorch (`_promotion.result_type`); float16/bfloat16 math
runs in float32 and rounds once at the end, as PyTorch's CPU kernels do.
"""

from __future__ import annotations

import jax.numpy as jnp

from ..registry import aten
from ._promotion import float_type, opmath_type, promote, result_type


def _float_unary(fn, self):
    """An int-to-float unary op computed in opmath precision."""
    out_dtype = float_type(self.dtype)
    return fn(self.astype(opmath_type(out_dtype))).astype(out_dtype)


@aten("add.Tensor", "add.Scalar")
def aten_add(self, other, alpha=1):
    """add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor"""
    self, other = promote(self, other)
    if alpha != 1:
        other = other * jnp.asarray(alpha, other.dtype)
    return self + other


@aten("div.Tensor", "div.Scalar")
def aten_div(self, other):
    """div.Tensor(Tensor self, Tensor other) -> Tensor"""
    dtype = float_type(result_type(self, other))
    self, other = promote(self, other)
    compute = opmath_type(dtype)
    return (self.astype(compute) / other.astype(compute)).astype(dtype)


@aten("exp.default")
def aten_exp(self):
    """exp(Tensor self) -> Tensor"""
    return _float_unary(jnp.exp, self)


@aten("mul.Tensor", "mul.Scalar")
def aten_mul(self, other):
    """mul.Tensor(Tensor self, Tensor other) -> Tensor"""
    self, other = promote(self, other)
    if self.dtype == jnp.bool_:
        return self & other
    return self * other


@aten("neg.default")
def aten_neg(self):
    """neg(Tensor self) -> Tensor"""
    return -self


@aten("sub.Tensor", "sub.Scalar")
def aten_sub(self, other, alpha=1):
    """sub.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor"""
    self, other = promote(self, other)
    if alpha != 1:
        other = other * jnp.asarray(alpha, other.dtype)
    return self - other
