"""ATen lowerings: comparisons (eq, ne, lt, le, gt, ge, isclose), elementwise extremes (maximum,
minimum, fmax, fmin) and whole-tensor tests (allclose, equal).

The comparisons and extremes promote their operands as PyTorch does (`_promotion.promote`)
and compare them in that dtype; `isclose` forms its tolerance in PyTorch's dtypes.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from ..registry import aten
from ._promotion import promote, result_type
from .arithmetic import _is_int


@aten("allclose.default")
def aten_allclose(self, other, rtol=1e-05, atol=1e-08, equal_nan=False):
    """allclose(Tensor self, Tensor other, float rtol=1.0000000000000001e-05, float atol=1e-08, bool equal_nan=False) -> bool"""
    return jnp.all(aten_isclose(self, other, rtol, atol, equal_nan))


@aten("eq.Tensor", "eq.Scalar")
def aten_eq(self, other):
    """eq.Tensor(Tensor self, Tensor other) -> Tensor"""
    self, other = promote(self, other)
    return self == other


@aten("equal.default")
def aten_equal(self, other):
    """equal(Tensor self, Tensor other) -> bool"""
    if self.shape != other.shape:
        return jnp.asarray(False)
    return jnp.all(self == other)


@aten("fmax.default")
def aten_fmax(self, other):
    """fmax(Tensor self, Tensor other) -> Tensor"""
    self, other = promote(self, other)
    # PyTorch's kernel (std::fmax per element, on every CPU) returns `self` where the two tie,
    # so fmax(-0.0, 0.0) is -0.0 (jnp.fmax gives 0.0); NaN only where both are.
    keep = self >= other
    if jnp.issubdtype(self.dtype, jnp.inexact):
        keep = keep | jnp.isnan(other)
    return jnp.where(keep, self, other)


@aten("fmin.default")
def aten_fmin(self, other):
    """fmin(Tensor self, Tensor other) -> Tensor"""
    self, other = promote(self, other)
    # As fmax: `self` where the two tie (fmin(0.0, -0.0) is 0.0), NaN only where both are.
    keep = self <= other
    if jnp.issubdtype(self.dtype, jnp.inexact):
        keep = keep | jnp.isnan(other)
    return jnp.where(keep, self, other)


@aten("ge.Tensor", "ge.Scalar")
def aten_ge(self, other):
    """ge.Tensor(Tensor self, Tensor other) -> Tensor"""
    self, other = promote(self, other)
    return self >= other


@aten("gt.Tensor", "gt.Scalar")
def aten_gt(self, other):
    """gt.Tensor(Tensor self, Tensor other) -> Tensor"""
    self, other = promote(self, other)
    return self > other


@aten("isclose.default")
def aten_isclose(self, other, rtol=1e-05, atol=1e-08, equal_nan=False):
    """isclose(Tensor self, Tensor other, float rtol=1.0000000000000001e-05, float atol=1e-08, bool equal_nan=False) -> Tensor"""
    close = self == other
    if equal_nan and not _is_int(self.dtype):
        close = close | (jnp.isnan(self) & jnp.isnan(other))
    if rtol == 0 and atol == 0:
        return close
    # As PyTorch: bool operands count as float32; rtol * other and the error compare in PyTorch's dtypes.
    if self.dtype == jnp.bool_:
        self, other = self.astype(np.float32), other.astype(np.float32)
    scaled_dtype = result_type(other, rtol)
    allowed = jnp.abs(other.astype(scaled_dtype) * jnp.asarray(rtol, scaled_dtype))
    allowed = allowed + jnp.asarray(atol, allowed.dtype)  # |rtol * other| is real for complex operands
    actual = jnp.abs(self - other)
    compare_dtype = result_type(actual, allowed)
    actual, allowed = actual.astype(compare_dtype), allowed.astype(compare_dtype)
    finite = jnp.isfinite(actual) if not _is_int(compare_dtype) else jnp.ones(actual.shape, jnp.bool_)
    return close | (finite & (actual <= allowed))


@aten("le.Tensor", "le.Scalar")
def aten_le(self, other):
    """le.Tensor(Tensor self, Tensor other) -> Tensor"""
    self, other = promote(self, other)
    return self <= other


@aten("lt.Tensor", "lt.Scalar")
def aten_lt(self, other):
    """lt.Tensor(Tensor self, Tensor other) -> Tensor"""
    self, other = promote(self, other)
    return self < other


@aten("maximum.default", "max.other")
def aten_maximum(self, other):
    """maximum(Tensor self, Tensor other) -> Tensor"""
    self, other = promote(self, other)
    return jnp.maximum(self, other)


@aten("minimum.default", "min.other")
def aten_minimum(self, other):
    """minimum(Tensor self, Tensor other) -> Tensor"""
    self, other = promote(self, other)
    return jnp.minimum(self, other)


@aten("ne.Tensor", "ne.Scalar")
def aten_ne(self, other):
    """ne.Tensor(Tensor self, Tensor other) -> Tensor"""
    self, other = promote(self, other)
    return self != other
