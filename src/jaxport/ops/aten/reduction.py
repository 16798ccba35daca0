"""ATen lowerings: reductions (sum, prod, mean, var, std, max, min, argmax, all, any, logsumexp, ...).

PyTorch conventions kept here: integer and bool sums/products accumulate into
int64, indices are int64, NaN is the largest value (max, argmax) and
propagates through max/min, and float16/bfloat16 reductions accumulate
in float32 (`opmath_type`) and round once at the end. The axis helpers (`_axes`,
`_on_axis`, `_index_dtype`, `_accumulate_dtype`) serve the families that reduce along
axes too: `cumulative`, `sorting`, `softmax`, `norms`.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ..registry import aten
from ._promotion import canonical, canonical_dim, float_type, is_floating, is_integral, opmath_type


def _index_dtype():
    return canonical(np.int64)


def _axes(dim, ndim: int) -> tuple[int, ...]:
    """Reduction axes: None or [] mean every axis; 0-d tensors accept 0 and -1 and reduce nothing."""
    if dim is None:
        return tuple(range(ndim))
    if isinstance(dim, int):
        dim = [dim]
    if len(dim) == 0 or ndim == 0:
        return tuple(range(ndim))
    return tuple(sorted({canonical_dim(d, ndim) for d in dim}))


def _accumulate_dtype(self, dtype):
    """The output dtype of sum/prod/cumsum: `dtype`, else integers and bool widen to int64."""
    if dtype is not None:
        return np.dtype(dtype)
    return canonical(np.int64) if is_integral(self) else np.dtype(self.dtype)


def _on_axis(fn, self, dim, keepdim=False):
    """Apply `fn(x, axis)` along one dim; a 0-d tensor is treated as a 1-element vector."""
    if self.ndim == 0:
        out = fn(self.reshape(1), 0)
        if isinstance(out, tuple):
            return tuple(o.reshape(()) for o in out)
        return out.reshape(())
    axis = canonical_dim(dim, self.ndim)
    out = fn(self, axis)
    if keepdim:
        if isinstance(out, tuple):
            return tuple(jnp.expand_dims(o, axis) for o in out)
        return jnp.expand_dims(out, axis)
    return out


def _var(self, dim, correction, keepdim, *, take_sqrt=False, welford_mean=False):
    """Variance (or with `take_sqrt` the standard deviation) with PyTorch's divisor
    max(0, N - correction): (var or std, mean) in opmath, and the variance's output dtype (the
    mean's too, except that a complex input's mean is complex).

    PyTorch's Welford pass accumulates in double, and its running mean does not overflow where
    the values do not. Where the plain two passes give a mean or sum of squares that is not
    finite (float-max values, NaN or inf), `_scaled_moments` takes over.
    """
    if jnp.iscomplexobj(self):
        # |x - mean|^2 summed is the real parts' squares plus the imaginary parts': the variance
        # is real, the mean complex
        (real_var, real_mean, out_dtype), (imag_var, imag_mean, _) = (
            _var(part, dim, correction, keepdim, welford_mean=welford_mean) for part in (jnp.real(self), jnp.imag(self)))
        var = real_var + imag_var
        return (jnp.sqrt(var) if take_sqrt else var), lax.complex(real_mean, imag_mean), out_dtype
    axes = _axes(dim, self.ndim)
    out_dtype = float_type(self.dtype)
    x = self.astype(opmath_type(out_dtype))
    n = math.prod(self.shape[a] for a in axes)
    correction = 1 if correction is None else correction
    divisor = max(0, n - correction)
    if not n:
        mean = jnp.sum(x, axis=axes, keepdims=keepdim) * jnp.nan
        var = jnp.sum(x * x, axis=axes, keepdims=keepdim) / jnp.asarray(divisor, x.dtype)
        return (jnp.sqrt(var) if take_sqrt else var), mean, out_dtype
    return (*_moments(x, axes, float(divisor), keepdim, take_sqrt, welford_mean), out_dtype)


@functools.partial(jax.jit, static_argnums=(1, 2, 3, 4, 5))  # op by op: one kernel, its cond included
def _moments(x, axes, divisor, keepdim, take_sqrt, welford_mean):
    divisor = jnp.asarray(divisor, x.dtype)
    mean = jnp.mean(x, axis=axes, keepdims=True)
    centered = x - mean
    sq = jnp.sum(centered * centered, axis=axes, keepdims=keepdim)
    var = sq / divisor
    plain = (jnp.sqrt(var) if take_sqrt else var), (mean if keepdim else jnp.squeeze(mean, axis=axes))
    unsure = jnp.any(~jnp.isfinite(mean)) | jnp.any(~jnp.isfinite(sq))
    return lax.cond(
        unsure,
        lambda: _scaled_moments(x, axes, divisor, keepdim, take_sqrt, welford_mean),
        lambda: plain,
    )


def _scaled_moments(x, axes, divisor, keepdim, take_sqrt, welford_mean):
    """(var or std, mean) as PyTorch's Welford pass in double gives them: the mean taken on
    values scaled by a power of two, and float32 squares too, so a float32 std of float-max
    values stays finite as PyTorch's does, while float64's sum of squares overflows as
    PyTorch's does. With `welford_mean`, the mean's infinities as Welford's running mean leaves
    them (`_welford_mean`)."""
    finite_max = jnp.max(jnp.where(jnp.isfinite(x), jnp.abs(x), 0), axis=axes, keepdims=True)
    scale, inverse = _power_of_two_near(finite_max)
    mean = jnp.mean(x * inverse, axis=axes, keepdims=True) * scale
    centered = x - mean
    if x.dtype == np.float64:
        var = jnp.sum(centered * centered, axis=axes, keepdims=keepdim) / divisor
        out = jnp.sqrt(var) if take_sqrt else var
    else:
        scale, inverse = _power_of_two_near(jnp.max(jnp.abs(centered), axis=axes, keepdims=True))
        centered = centered * inverse
        var = jnp.sum(centered * centered, axis=axes, keepdims=keepdim) / divisor
        scale = scale if keepdim else jnp.squeeze(scale, axis=axes)
        out = jnp.sqrt(var) * scale if take_sqrt else var * scale * scale
    if welford_mean:
        mean = _welford_mean(x, axes, mean)
    return out, (mean if keepdim else jnp.squeeze(mean, axis=axes))


def _power_of_two_near(m):
    """(2**e, 2**-e) for e the exponent of `m` clamped to [-100, 100], so both are normal floats
    and m * 2**-e is in [1, 2) unless m is extreme (zero, subnormal, infinite or NaN m give a
    harmless bound). Multiplying by them is exact, so scaled sums round as unscaled ones."""
    m = lax.stop_gradient(m)  # the scaling is exact: no derivative flows through it
    info = jnp.finfo(m.dtype)
    bits = jnp.dtype(f"int{info.bits}")
    bias = info.maxexp - 1
    exponent = (lax.bitcast_convert_type(m, bits) >> info.nmant) - bias
    exponent = jnp.clip(exponent, -100, 100)
    power = lambda e: lax.bitcast_convert_type((e + bias) << info.nmant, m.dtype)  # noqa: E731
    return power(exponent), power(-exponent)


def _welford_mean(x, axes, mean):
    """`mean` (reduced dims kept) as PyTorch's Welford pass leaves it: once its running mean is
    infinite, the next value makes it NaN (inf - inf), so an infinity anywhere but last gives NaN."""
    n = math.prod(x.shape[a] for a in axes)
    rest = [a for a in range(x.ndim) if a not in axes]
    flat = jnp.transpose(x, rest + list(axes)).reshape([x.shape[a] for a in rest] + [n])
    early = jnp.any(jnp.isinf(flat[..., :-1]), axis=-1)
    return jnp.where(early.reshape(mean.shape), jnp.asarray(jnp.nan, mean.dtype), mean)


def _any_dtype(self):
    return np.dtype(np.uint8) if self.dtype == np.uint8 else np.dtype(np.bool_)


def _at_index(x, index, axis):
    """(the element of `x` at `index` along `axis`, the index as PyTorch's): min.dim and max.dim
    return the first extreme element itself, so of tied zeros the first one's sign (jnp.min
    would give -0.0 for [0.0, -0.0], and op by op and jitted XLA differ)."""
    index = index.astype(_index_dtype())
    return jnp.take_along_axis(x, jnp.expand_dims(index, axis), axis=axis).squeeze(axis), index


# -- ops ------------------------------------------------------------------------------------------


@aten("_is_all_true.default")
def aten__is_all_true(self):
    """_is_all_true(Tensor self) -> Tensor"""
    return jnp.all(self)


@aten("_is_any_true.default")
def aten__is_any_true(self):
    """_is_any_true(Tensor self) -> Tensor"""
    return jnp.any(self)


@aten("all.default", "all.dim", "all.dims")
def aten_all(self, dim=None, keepdim=False):
    """all.dims(Tensor self, int[]? dim=None, bool keepdim=False) -> Tensor"""
    return jnp.all(self.astype(jnp.bool_), axis=_axes(dim, self.ndim), keepdims=keepdim).astype(_any_dtype(self))


@aten("amax.default")
def aten_amax(self, dim=(), keepdim=False):
    """amax(Tensor self, int[1] dim=[], bool keepdim=False) -> Tensor"""
    return jnp.max(self, axis=_axes(dim, self.ndim), keepdims=keepdim)


@aten("amin.default")
def aten_amin(self, dim=(), keepdim=False):
    """amin(Tensor self, int[1] dim=[], bool keepdim=False) -> Tensor"""
    return jnp.min(self, axis=_axes(dim, self.ndim), keepdims=keepdim)


@aten("any.default", "any.dim", "any.dims")
def aten_any(self, dim=None, keepdim=False):
    """any.dims(Tensor self, int[]? dim=None, bool keepdim=False) -> Tensor"""
    return jnp.any(self.astype(jnp.bool_), axis=_axes(dim, self.ndim), keepdims=keepdim).astype(_any_dtype(self))


@aten("argmax.default")
def aten_argmax(self, dim=None, keepdim=False):
    """argmax(Tensor self, int? dim=None, bool keepdim=False) -> Tensor"""
    if dim is None:
        out = jnp.argmax(self.reshape(-1), axis=0)
        return out.reshape((1,) * self.ndim if keepdim else ()).astype(_index_dtype())
    return _on_axis(lambda x, axis: jnp.argmax(x, axis=axis), self, dim, keepdim).astype(_index_dtype())


@aten("argmin.default")
def aten_argmin(self, dim=None, keepdim=False):
    """argmin(Tensor self, int? dim=None, bool keepdim=False) -> Tensor"""
    if dim is None:
        out = jnp.argmin(self.reshape(-1), axis=0)
        return out.reshape((1,) * self.ndim if keepdim else ()).astype(_index_dtype())
    return _on_axis(lambda x, axis: jnp.argmin(x, axis=axis), self, dim, keepdim).astype(_index_dtype())


@aten("count_nonzero.default", "count_nonzero.dim_IntList")
def aten_count_nonzero(self, dim=None):
    """count_nonzero.dim_IntList(Tensor self, int[] dim) -> Tensor"""
    return jnp.sum(self.astype(jnp.bool_), axis=_axes(dim, self.ndim), dtype=_index_dtype())


@aten("hash_tensor.default")
def aten_hash_tensor(self, dim=(), *, keepdim=False, mode=0):
    """hash_tensor(Tensor self, int[1] dim=[], *, bool keepdim=False, int mode=0) -> Tensor"""
    if mode != 0:
        raise NotImplementedError(f"hash_tensor mode={mode} (PyTorch defines only mode 0, xor)")
    if canonical(np.uint64) != np.uint64:
        raise NotImplementedError("hash_tensor xors 64-bit patterns: enable jax_enable_x64")
    # Elements widen to their 64-bit float or integer type and xor as raw bits.
    wide = np.float64 if is_floating(self) else np.int64
    bits = lax.bitcast_convert_type(self.astype(wide), jnp.uint64)
    return jnp.bitwise_xor.reduce(bits, axis=_axes(dim, self.ndim), keepdims=keepdim)


@aten("logsumexp.default")
def aten_logsumexp(self, dim, keepdim=False):
    """logsumexp(Tensor self, int[1] dim, bool keepdim=False) -> Tensor"""
    out_dtype = float_type(self.dtype)
    x = self.astype(opmath_type(out_dtype))
    axes = _axes(dim, self.ndim)
    if math.prod(self.shape[a] for a in axes) == 0:
        return jnp.full(jnp.sum(x, axis=axes, keepdims=keepdim).shape, -jnp.inf, out_dtype)
    return jax.nn.logsumexp(x, axis=axes, keepdims=keepdim).astype(out_dtype)


def _refuse_empty(name: str, x) -> None:
    """A full max or min of no elements has no value: PyTorch's error, not JAX's."""
    if x.size == 0:
        raise RuntimeError(f"{name}(): Expected reduction dim to be specified for input.numel() == 0. "
                           "Specify the reduction dim with the 'dim' argument.")


@aten("max.default")
def aten_max(self):
    """max(Tensor self) -> Tensor"""
    _refuse_empty("max", self)
    return jnp.max(self)


@aten("max.dim")
def aten_max_dim(self, dim, keepdim=False):
    """max.dim(Tensor self, int dim, bool keepdim=False) -> (Tensor values, Tensor indices)"""
    return _on_axis(lambda x, axis: _at_index(x, jnp.argmax(x, axis=axis), axis), self, dim, keepdim)


@aten("mean.default", "mean.dim")
def aten_mean(self, dim=None, keepdim=False, *, dtype=None):
    """mean.dim(Tensor self, int[1]? dim, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor"""
    out_dtype = np.dtype(dtype) if dtype is not None else np.dtype(self.dtype)
    x = self.astype(opmath_type(out_dtype))
    axes = _axes(dim, self.ndim)
    if math.prod(self.shape[a] for a in axes) == 0:
        return jnp.full(jnp.sum(x, axis=axes, keepdims=keepdim).shape, jnp.nan, out_dtype)
    return jnp.mean(x, axis=axes, keepdims=keepdim).astype(out_dtype)


@aten("min.default")
def aten_min(self):
    """min(Tensor self) -> Tensor"""
    _refuse_empty("min", self)
    return jnp.min(self)


@aten("min.dim")
def aten_min_dim(self, dim, keepdim=False):
    """min.dim(Tensor self, int dim, bool keepdim=False) -> (Tensor values, Tensor indices)"""
    return _on_axis(lambda x, axis: _at_index(x, jnp.argmin(x, axis=axis), axis), self, dim, keepdim)


@aten("nanmean.default")
def aten_nanmean(self, dim=None, keepdim=False, *, dtype=None):
    """nanmean(Tensor self, int[1]? dim=None, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor"""
    out_dtype = np.dtype(dtype) if dtype is not None else np.dtype(self.dtype)
    x = self.astype(opmath_type(out_dtype))
    axes = _axes(dim, self.ndim)
    valid = ~jnp.isnan(x)
    total = jnp.sum(jnp.where(valid, x, jnp.zeros((), x.dtype)), axis=axes, keepdims=keepdim)
    count = jnp.sum(valid, axis=axes, keepdims=keepdim, dtype=x.dtype)
    return (total / count).astype(out_dtype)


@aten("nansum.default")
def aten_nansum(self, dim=None, keepdim=False, *, dtype=None):
    """nansum(Tensor self, int[1]? dim=None, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor"""
    if is_floating(self):
        self = jnp.where(jnp.isnan(self), jnp.zeros((), self.dtype), self)
    return aten_sum(self, dim, keepdim, dtype=dtype)


@aten("prod.default", "prod.dim_int")
def aten_prod(self, dim=None, keepdim=False, *, dtype=None):
    """prod.dim_int(Tensor self, int dim, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor"""
    out_dtype = _accumulate_dtype(self, dtype)
    x = self.astype(opmath_type(out_dtype))
    return jnp.prod(x, axis=_axes(dim, self.ndim), keepdims=keepdim).astype(out_dtype)


@aten("std.correction", "std.default", "std.dim")
def aten_std(self, dim=None, unbiased=True, keepdim=False, *, correction=None):
    """std.correction(Tensor self, int[1]? dim=None, *, Scalar? correction=None, bool keepdim=False) -> Tensor"""
    if isinstance(dim, bool):  # std.default(self, unbiased)
        dim, unbiased = None, dim
    if correction is None:
        correction = 1 if unbiased else 0
    std, _, out_dtype = _var(self, dim, correction, keepdim, take_sqrt=True)
    return std.astype(out_dtype)


@aten("std_mean.correction", "std_mean.default", "std_mean.dim")
def aten_std_mean(self, dim=None, unbiased=True, keepdim=False, *, correction=None):
    """std_mean.correction(Tensor self, int[1]? dim=None, *, Scalar? correction=None, bool keepdim=False) -> (Tensor, Tensor)"""
    if isinstance(dim, bool):
        dim, unbiased = None, dim
    if correction is None:
        correction = 1 if unbiased else 0
    std, mean, out_dtype = _var(self, dim, correction, keepdim, take_sqrt=True, welford_mean=True)
    return std.astype(out_dtype), mean.astype(self.dtype if jnp.iscomplexobj(self) else out_dtype)


@aten("sum.default", "sum.dim_IntList")
def aten_sum(self, dim=None, keepdim=False, *, dtype=None):
    """sum.dim_IntList(Tensor self, int[1]? dim, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor"""
    out_dtype = _accumulate_dtype(self, dtype)
    x = self.astype(opmath_type(out_dtype))
    return jnp.sum(x, axis=_axes(dim, self.ndim), keepdims=keepdim).astype(out_dtype)


@aten("var.correction", "var.default", "var.dim")
def aten_var(self, dim=None, unbiased=True, keepdim=False, *, correction=None):
    """var.correction(Tensor self, int[1]? dim=None, *, Scalar? correction=None, bool keepdim=False) -> Tensor"""
    if isinstance(dim, bool):  # var.default(self, unbiased)
        dim, unbiased = None, dim
    if correction is None:
        correction = 1 if unbiased else 0
    var, _, out_dtype = _var(self, dim, correction, keepdim)
    return var.astype(out_dtype)


@aten("var_mean.correction", "var_mean.default", "var_mean.dim")
def aten_var_mean(self, dim=None, unbiased=True, keepdim=False, *, correction=None):
    """var_mean.correction(Tensor self, int[1]? dim=None, *, Scalar? correction=None, bool keepdim=False) -> (Tensor, Tensor)"""
    if isinstance(dim, bool):
        dim, unbiased = None, dim
    if correction is None:
        correction = 1 if unbiased else 0
    var, mean, out_dtype = _var(self, dim, correction, keepdim, welford_mean=True)
    return var.astype(out_dtype), mean.astype(self.dtype if jnp.iscomplexobj(self) else out_dtype)
