"""ONNX reductions: Reduce*, ArgMax/ArgMin, CumSum/CumProd, TopK, Unique.

Reduce* take their axes as an attribute up to opset 13 (ReduceSum) or 18 (the others) and
as an input afterwards. Empty `axes` reduces everything unless `noop_with_empty_axes`, in
which case nothing is reduced but the elementwise part still applies (ReduceSumSquare
squares). Results keep the input dtype, as ONNX's type constraints demand.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ..registry import onnx
from ._helpers import index_dtype, normalize_axis, static_ints


def _axes(data, axes, noop_with_empty_axes=0) -> tuple[int, ...]:
    """The dims a Reduce* op folds, ascending and non-negative."""
    ndim = jnp.ndim(data)
    if not axes:
        return () if noop_with_empty_axes else tuple(range(ndim))
    return tuple(sorted({normalize_axis(a, ndim) for a in axes}))


def _as_float(data):
    """Integer data in the widest float (sqrt/log of ints is cast back afterwards)."""
    data = jnp.asarray(data)
    if jnp.issubdtype(data.dtype, jnp.inexact):
        return data
    return data.astype(jax.dtypes.canonicalize_dtype(np.float64))


def _arg_extreme(fn, data, axis, keepdims, select_last_index):
    data = jnp.asarray(data)
    axis = normalize_axis(axis, data.ndim)
    if select_last_index:
        n = data.shape[axis]
        index = n - 1 - fn(jnp.flip(data, axis), axis=axis, keepdims=bool(keepdims))
    else:
        index = fn(data, axis=axis, keepdims=bool(keepdims))
    return index.astype(index_dtype())


# onnxruntime's sums start from their first element, so a sum of only -0.0 is -0.0, while
# jnp.sum and jnp.cumsum start from +0.0 (and JAX turns an add-reduction from -0.0 into one from
# +0.0, since -0.0 == 0). -0.0 is addition's true identity, so these two start from it through a
# computation JAX does not pattern-match, which XLA compiles to the same kernel.
def _sum_from_negative_zero(x, axes):
    wide = x.astype(jnp.float32) if x.dtype.itemsize < 4 else x  # as jnp.sum: halves add in float32
    return lax.reduce(wide, np.array(-0.0, wide.dtype), lambda a, b: a + b, axes).astype(x.dtype)


def _cumsum_from_negative_zero(x, axis):
    n = x.shape[axis]
    window, padding = [1] * x.ndim, [(0, 0)] * x.ndim
    window[axis], padding[axis] = n, (n - 1, 0)

    def windowed_sum(x):
        return lax.reduce_window(x, np.array(-0.0, x.dtype), lambda a, b: a + b, window, [1] * x.ndim, padding)

    # A generic reduce_window has no reverse-mode rule; its derivative is the plain cumsum's.
    summed = jax.custom_jvp(windowed_sum)
    summed.defjvp(lambda primals, tangents: (windowed_sum(*primals), jnp.cumsum(tangents[0], axis=axis)))
    return summed(x)


def _cumsum(x, axis, dtype):
    if jnp.issubdtype(x.dtype, jnp.floating):
        return _cumsum_from_negative_zero(x, axis)
    return jnp.cumsum(x, axis=axis, dtype=dtype)


def _cumulative(fn, x, axis, exclusive, reverse, identity):
    x = jnp.asarray(x)
    (axis,) = static_ints(axis, "axis")
    axis = normalize_axis(axis, x.ndim)
    if reverse:
        x = jnp.flip(x, axis)
    if exclusive:
        # Shift by one along `axis`, so element i accumulates elements 0..i-1.
        pads = [(0, 0)] * x.ndim
        pads[axis] = (1, 0)
        x = jnp.pad(x, pads, constant_values=identity)
        x = lax.slice_in_dim(x, 0, x.shape[axis] - 1, axis=axis)
    out = fn(x, axis=axis, dtype=x.dtype)
    return jnp.flip(out, axis) if reverse else out


def _extreme(fn, data, axes, keepdims, empty):
    """Max/min with ONNX's value for an empty set: `empty(dtype)`."""
    data = jnp.asarray(data)
    if data.size == 0:
        return fn(data, axis=axes, keepdims=bool(keepdims), initial=empty(data.dtype))
    return fn(data, axis=axes, keepdims=bool(keepdims))


def _lowest(dtype):
    if dtype == np.bool_:
        return False
    return -np.inf if jnp.issubdtype(dtype, jnp.inexact) else jnp.iinfo(dtype).min


def _highest(dtype):
    if dtype == np.bool_:
        return True
    return np.inf if jnp.issubdtype(dtype, jnp.inexact) else jnp.iinfo(dtype).max


def _l1(data, axes, keepdims):
    data = jnp.asarray(data)
    return jnp.sum(jnp.abs(data), axis=axes, keepdims=bool(keepdims), dtype=data.dtype)


def _l2(data, axes, keepdims):
    data = jnp.asarray(data)
    x = _as_float(data)
    return jnp.sqrt(jnp.sum(x * x, axis=axes, keepdims=bool(keepdims))).astype(data.dtype)


def _log_sum(data, axes, keepdims):
    data = jnp.asarray(data)
    total = jnp.sum(_as_float(data), axis=axes, keepdims=bool(keepdims))
    return jnp.log(total).astype(data.dtype)


def _log_sum_exp(data, axes, keepdims):
    data = jnp.asarray(data)
    x = _as_float(data)
    if x.size == 0:
        return jnp.full(jnp.sum(x, axis=axes, keepdims=bool(keepdims)).shape, -np.inf, data.dtype)
    # Shift by the max for stability; infinite maxima would give inf - inf, so they shift by 0.
    peak = jnp.max(x, axis=axes, keepdims=True)
    peak = lax.stop_gradient(jnp.where(jnp.isfinite(peak), peak, jnp.zeros_like(peak)))
    total = jnp.sum(jnp.exp(x - peak), axis=axes, keepdims=True)
    out = jnp.log(total) + peak
    if not keepdims:
        out = jnp.squeeze(out, axis=axes)
    return out.astype(data.dtype)


def _max(data, axes, keepdims):
    return _extreme(jnp.max, data, axes, keepdims, _lowest)


def _mean(data, axes, keepdims):
    data = jnp.asarray(data)
    if jnp.issubdtype(data.dtype, jnp.floating):
        wide = data.astype(jnp.float32) if data.dtype.itemsize < 4 else data  # as jnp.mean
        count = int(np.prod([data.shape[a] for a in axes], dtype=np.int64))
        return (_sum(wide, axes, keepdims) / np.array(count, wide.dtype)).astype(data.dtype)
    if jnp.issubdtype(data.dtype, jnp.inexact):
        return jnp.mean(data, axis=axes, keepdims=bool(keepdims), dtype=data.dtype)
    # Integer mean: the exact sum, divided truncating toward zero like a cast of the float mean.
    count = int(np.prod([data.shape[a] for a in axes], dtype=np.int64))
    total = jnp.sum(data, axis=axes, keepdims=bool(keepdims), dtype=data.dtype)
    return lax.div(total, jnp.asarray(count, data.dtype))


def _min(data, axes, keepdims):
    return _extreme(jnp.min, data, axes, keepdims, _highest)


def _prod(data, axes, keepdims):
    data = jnp.asarray(data)
    return jnp.prod(data, axis=axes, keepdims=bool(keepdims), dtype=data.dtype)


def _sum(data, axes, keepdims):
    data = jnp.asarray(data)
    if not jnp.issubdtype(data.dtype, jnp.floating):
        return jnp.sum(data, axis=axes, keepdims=bool(keepdims), dtype=data.dtype)
    out = _sum_from_negative_zero(data, tuple(axes))
    return lax.expand_dims(out, axes) if keepdims else out


def _sum_square(data, axes, keepdims):
    data = jnp.asarray(data)
    return jnp.sum(data * data, axis=axes, keepdims=bool(keepdims), dtype=data.dtype)


def _top_k(X, k, axis, largest):
    X = jnp.asarray(X)
    axis = normalize_axis(axis, X.ndim)
    moved = jnp.moveaxis(X, axis, -1)
    keys = moved
    if not largest:
        # An order-reversing map keeps ties tied, so lax.top_k still puts the lower index
        # first; bitwise not reverses integers without overflow (unlike negation).
        if X.dtype == np.bool_:
            keys = jnp.logical_not(moved)
        elif jnp.issubdtype(X.dtype, jnp.integer):
            keys = jnp.invert(moved)
        else:
            keys = -moved
    if jnp.issubdtype(X.dtype, jnp.floating):
        keys = jnp.where(keys == 0, jnp.zeros_like(keys), keys)  # -0.0 == 0.0: tied, lower index first
    _, index = lax.top_k(keys, k)
    values = jnp.take_along_axis(moved, index, axis=-1)
    return jnp.moveaxis(values, -1, axis), jnp.moveaxis(index.astype(index_dtype()), -1, axis)


@onnx("ArgMax", since=1)
def arg_max(data, *, axis=0, keepdims=1, select_last_index=0):
    """ArgMax(T data) -> int64 reduced; axis, keepdims, select_last_index (from 12)."""
    return _arg_extreme(jnp.argmax, data, axis, keepdims, select_last_index)


@onnx("ArgMin", since=1)
def arg_min(data, *, axis=0, keepdims=1, select_last_index=0):
    """ArgMin(T data) -> int64 reduced; axis, keepdims, select_last_index (from 12)."""
    return _arg_extreme(jnp.argmin, data, axis, keepdims, select_last_index)


@onnx("CumProd", since=26, static=(1,))
def cum_prod(x, axis, *, exclusive=0, reverse=0):
    """CumProd(T x, T2 axis) -> T y; exclusive, reverse."""
    return _cumulative(jnp.cumprod, x, axis, exclusive, reverse, 1)


@onnx("CumSum", since=11, static=(1,))
def cum_sum(x, axis, *, exclusive=0, reverse=0):
    """CumSum(T x, T2 axis) -> T y; exclusive, reverse."""
    return _cumulative(_cumsum, x, axis, exclusive, reverse, 0)


@onnx("ReduceL1", since=1)
def reduce_l1_1(data, *, axes=None, keepdims=1):
    """ReduceL1-1/11/13(T data) -> T reduced; axes attribute, keepdims."""
    return _l1(data, _axes(data, axes), keepdims)


@onnx("ReduceL1", since=18, static=(1,))
def reduce_l1(data, axes=None, *, keepdims=1, noop_with_empty_axes=0):
    """ReduceL1(T data, int64 axes?) -> T reduced; keepdims, noop_with_empty_axes."""
    return _l1(data, _axes(data, static_ints(axes, "axes"), noop_with_empty_axes), keepdims)


@onnx("ReduceL2", since=1)
def reduce_l2_1(data, *, axes=None, keepdims=1):
    """ReduceL2-1/11/13(T data) -> T reduced; axes attribute, keepdims."""
    return _l2(data, _axes(data, axes), keepdims)


@onnx("ReduceL2", since=18, static=(1,))
def reduce_l2(data, axes=None, *, keepdims=1, noop_with_empty_axes=0):
    """ReduceL2(T data, int64 axes?) -> T reduced; keepdims, noop_with_empty_axes."""
    return _l2(data, _axes(data, static_ints(axes, "axes"), noop_with_empty_axes), keepdims)


@onnx("ReduceLogSum", since=1)
def reduce_log_sum_1(data, *, axes=None, keepdims=1):
    """ReduceLogSum-1/11/13(T data) -> T reduced; axes attribute, keepdims."""
    return _log_sum(data, _axes(data, axes), keepdims)


@onnx("ReduceLogSum", since=18, static=(1,))
def reduce_log_sum(data, axes=None, *, keepdims=1, noop_with_empty_axes=0):
    """ReduceLogSum(T data, int64 axes?) -> T reduced; keepdims, noop_with_empty_axes."""
    return _log_sum(data, _axes(data, static_ints(axes, "axes"), noop_with_empty_axes), keepdims)


@onnx("ReduceLogSumExp", since=1)
def reduce_log_sum_exp_1(data, *, axes=None, keepdims=1):
    """ReduceLogSumExp-1/11/13(T data) -> T reduced; axes attribute, keepdims."""
    return _log_sum_exp(data, _axes(data, axes), keepdims)


@onnx("ReduceLogSumExp", since=18, static=(1,))
def reduce_log_sum_exp(data, axes=None, *, keepdims=1, noop_with_empty_axes=0):
    """ReduceLogSumExp(T data, int64 axes?) -> T reduced; keepdims, noop_with_empty_axes."""
    axes = _axes(data, static_ints(axes, "axes"), noop_with_empty_axes)
    return _log_sum_exp(data, axes, keepdims)


@onnx("ReduceMax", since=1)
def reduce_max_1(data, *, axes=None, keepdims=1):
    """ReduceMax-1/11/12/13(T data) -> T reduced; axes attribute, keepdims."""
    return _max(data, _axes(data, axes), keepdims)


@onnx("ReduceMax", since=18, static=(1,))
def reduce_max(data, axes=None, *, keepdims=1, noop_with_empty_axes=0):
    """ReduceMax(T data, int64 axes?) -> T reduced; keepdims, noop_with_empty_axes; bool from 20."""
    return _max(data, _axes(data, static_ints(axes, "axes"), noop_with_empty_axes), keepdims)


@onnx("ReduceMean", since=1)
def reduce_mean_1(data, *, axes=None, keepdims=1):
    """ReduceMean-1/11/13(T data) -> T reduced; axes attribute, keepdims."""
    return _mean(data, _axes(data, axes), keepdims)


@onnx("ReduceMean", since=18, static=(1,))
def reduce_mean(data, axes=None, *, keepdims=1, noop_with_empty_axes=0):
    """ReduceMean(T data, int64 axes?) -> T reduced; keepdims, noop_with_empty_axes."""
    return _mean(data, _axes(data, static_ints(axes, "axes"), noop_with_empty_axes), keepdims)


@onnx("ReduceMin", since=1)
def reduce_min_1(data, *, axes=None, keepdims=1):
    """ReduceMin-1/11/12/13(T data) -> T reduced; axes attribute, keepdims."""
    return _min(data, _axes(data, axes), keepdims)


@onnx("ReduceMin", since=18, static=(1,))
def reduce_min(data, axes=None, *, keepdims=1, noop_with_empty_axes=0):
    """ReduceMin(T data, int64 axes?) -> T reduced; keepdims, noop_with_empty_axes; bool from 20."""
    return _min(data, _axes(data, static_ints(axes, "axes"), noop_with_empty_axes), keepdims)


@onnx("ReduceProd", since=1)
def reduce_prod_1(data, *, axes=None, keepdims=1):
    """ReduceProd-1/11/13(T data) -> T reduced; axes attribute, keepdims."""
    return _prod(data, _axes(data, axes), keepdims)


@onnx("ReduceProd", since=18, static=(1,))
def reduce_prod(data, axes=None, *, keepdims=1, noop_with_empty_axes=0):
    """ReduceProd(T data, int64 axes?) -> T reduced; keepdims, noop_with_empty_axes."""
    return _prod(data, _axes(data, static_ints(axes, "axes"), noop_with_empty_axes), keepdims)


@onnx("ReduceSum", since=1)
def reduce_sum_1(data, *, axes=None, keepdims=1):
    """ReduceSum-1/11(T data) -> T reduced; axes attribute, keepdims."""
    return _sum(data, _axes(data, axes), keepdims)


@onnx("ReduceSum", since=13, static=(1,))
def reduce_sum(data, axes=None, *, keepdims=1, noop_with_empty_axes=0):
    """ReduceSum(T data, int64 axes?) -> T reduced; keepdims, noop_with_empty_axes."""
    return _sum(data, _axes(data, static_ints(axes, "axes"), noop_with_empty_axes), keepdims)


@onnx("ReduceSumSquare", since=1)
def reduce_sum_square_1(data, *, axes=None, keepdims=1):
    """ReduceSumSquare-1/11/13(T data) -> T reduced; axes attribute, keepdims."""
    return _sum_square(data, _axes(data, axes), keepdims)


@onnx("ReduceSumSquare", since=18, static=(1,))
def reduce_sum_square(data, axes=None, *, keepdims=1, noop_with_empty_axes=0):
    """ReduceSumSquare(T data, int64 axes?) -> T reduced; keepdims, noop_with_empty_axes."""
    axes = _axes(data, static_ints(axes, "axes"), noop_with_empty_axes)
    return _sum_square(data, axes, keepdims)


@onnx("TopK", since=1)
def top_k_1(X, *, axis=-1, k=None):
    """TopK-1(T X) -> (T Values, int64 Indices); axis, k attribute; largest first."""
    return _top_k(X, k, axis, True)


@onnx("TopK", since=10, static=(1,))
def top_k(X, K, *, axis=-1, largest=1, sorted=1):
    """TopK(T X, int64 K) -> (T Values, int64 Indices); axis, largest, sorted (from 11).

    Ties go to the lower index; results always come out sorted, which `sorted=0` allows."""
    (k,) = static_ints(K, "K")
    return _top_k(X, k, axis, largest)


@onnx("Unique", since=11, value_dependent=True)
def unique(X, *, axis=None, sorted=1):
    """Unique(T X) -> (T Y, int64 indices, int64 inverse_indices, int64 counts); axis, sorted."""
    X = jnp.asarray(X)
    if axis is None:
        X, axis = X.reshape(-1), 0
    axis = normalize_axis(axis, X.ndim)
    Y, first, inverse, counts = jnp.unique(
        X, return_index=True, return_inverse=True, return_counts=True, axis=axis
    )
    inverse = inverse.reshape(-1)
    if not sorted:
        # Order of first occurrence: reorder the sorted results and renumber `inverse`.
        order = jnp.argsort(first)
        Y, first, counts = jnp.take(Y, order, axis=axis), first[order], counts[order]
        inverse = jnp.argsort(order)[inverse]
    i64 = index_dtype()
    return Y, first.astype(i64), inverse.astype(i64), counts.astype(i64)
