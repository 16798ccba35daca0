"""ATen lowerings: cumulative ops (cumsum, cumprod, cummax, cummin, logcumsumexp) and diff.

As the reductions: integers and bool accumulate into int64, float16/bfloat16 in float32
(`opmath_type`), indices are int64; cummax and cummin take NaN, and of ties the later
element, as PyTorch's kernels do.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax import lax

from ..registry import aten
from ._promotion import canonical_dim, float_type, is_floating, opmath_type
from .arithmetic import _complex_log_add_exp
from .reduction import _accumulate_dtype, _index_dtype, _on_axis


def _cum_extreme(self, dim, better_or_equal):
    # PyTorch takes the new element where it is NaN, or where the running value is not NaN and
    # the new one compares `better_or_equal` (ties go to the later element, and so does each later
    # NaN); once NaN, the value stays NaN. That is a max over a total order, so an associative scan
    # computes it.
    def combine(a, b):
        (va, ia), (vb, ib) = a, b
        take_b = better_or_equal(vb, va)
        if is_floating(self):
            take_b = jnp.isnan(vb) | (~jnp.isnan(va) & take_b)
        return jnp.where(take_b, vb, va), jnp.where(take_b, ib, ia)

    def scan(x, axis):
        if x.shape[axis] == 0:
            return x, jnp.zeros(x.shape, _index_dtype())
        iota = lax.broadcasted_iota(_index_dtype(), x.shape, axis)
        _, indices = lax.associative_scan(combine, (x, iota), axis=axis)
        # The scan interleaves its partial results by padding with zeros and adding, which makes
        # -0.0 +0.0; the values are read back at the indices, with their signs.
        return jnp.take_along_axis(x, indices, axis=axis), indices

    return _on_axis(scan, self, dim)


@aten("cummax.default")
def aten_cummax(self, dim):
    """cummax(Tensor self, int dim) -> (Tensor values, Tensor indices)"""
    return _cum_extreme(self, dim, jnp.greater_equal)


@aten("cummin.default")
def aten_cummin(self, dim):
    """cummin(Tensor self, int dim) -> (Tensor values, Tensor indices)"""
    return _cum_extreme(self, dim, jnp.less_equal)


@aten("cumprod.default")
def aten_cumprod(self, dim, *, dtype=None):
    """cumprod(Tensor self, int dim, *, ScalarType? dtype=None) -> Tensor"""
    out_dtype = _accumulate_dtype(self, dtype)
    x = self.astype(opmath_type(out_dtype))
    return _on_axis(lambda v, axis: jnp.cumprod(v, axis=axis), x, dim).astype(out_dtype)


@aten("cumsum.default")
def aten_cumsum(self, dim, *, dtype=None):
    """cumsum(Tensor self, int dim, *, ScalarType? dtype=None) -> Tensor"""
    out_dtype = _accumulate_dtype(self, dtype)
    x = self.astype(opmath_type(out_dtype))
    return _on_axis(lambda v, axis: jnp.cumsum(v, axis=axis), x, dim).astype(out_dtype)


@aten("diff.default")
def aten_diff(self, n=1, dim=-1, prepend=None, append=None):
    """diff(Tensor self, int n=1, int dim=-1, Tensor? prepend=None, Tensor? append=None) -> Tensor"""
    # Lowered whole: PyTorch's decomposition of diff costs ~0.5 s of run_decompositions per model.
    if n == 0:  # PyTorch returns the input as it is, without prepend or append
        return self
    parts = [t for t in (prepend, self, append) if t is not None]
    dtype = parts[0].dtype
    x = jnp.concatenate([t.astype(dtype) for t in parts], axis=dim) if len(parts) > 1 else self
    axis = dim % x.ndim
    for _ in range(min(n, max(x.shape[axis], 1))):  # n past the length leaves a size-0 dim
        length = x.shape[axis]
        head = lax.slice_in_dim(x, min(1, length), length, axis=axis)
        tail = lax.slice_in_dim(x, 0, max(length - 1, 0), axis=axis)
        x = jnp.logical_xor(head, tail) if dtype == jnp.bool_ else head - tail
    return x


@aten("logcumsumexp.default")
def aten_logcumsumexp(self, dim):
    """logcumsumexp(Tensor self, int dim) -> Tensor"""
    out_dtype = float_type(self.dtype)
    if self.ndim == 0:
        return self.astype(out_dtype)
    x = self.astype(opmath_type(out_dtype))
    axis = canonical_dim(dim, self.ndim)
    if x.shape[axis] == 0:
        return x.astype(out_dtype)
    return _cumlogsumexp(x, axis).astype(out_dtype)


@functools.partial(jax.custom_jvp, nondiff_argnums=(1,))
def _cumlogsumexp(x, axis):
    if jnp.issubdtype(x.dtype, jnp.complexfloating):
        return lax.associative_scan(_complex_log_add_exp, x, axis=axis)
    return lax.cumlogsumexp(x, axis=axis)


@_cumlogsumexp.defjvp
def _cumlogsumexp_jvp(axis, primals, tangents):
    # PyTorch's formula, cumsum(t * e) / cumsum(e) with e = exp(x - max Re x) (holomorphic, so
    # complex inputs take it too): differentiating the scans loses accuracy (3e-4 in float32,
    # 1000x PyTorch's error from float64).
    (x,), (t,) = primals, tangents
    peak = jnp.max(jnp.real(x), axis=axis, keepdims=True)
    weights = jnp.exp(x - jnp.where(jnp.isfinite(peak), peak, jnp.zeros_like(peak)).astype(x.dtype))
    return _cumlogsumexp(x, axis), jnp.cumsum(weights * t, axis=axis) / jnp.cumsum(weights, axis=axis)
