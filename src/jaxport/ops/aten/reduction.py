"""ATen lowerings: reductions, scans, sorting, softmax and norms.

PyTorch conventions kept here: integer and bool sums/products accumulate into
int64, indices are int64, NaN is the largest value (sorting, max, argmax) and
propagates through max/min/median, and float16/bfloat16 reductions accumulate
in float32 (`opmath_type`) and round once at the end.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ..registry import aten
from ._promotion import (
    canonical,
    canonical_dim,
    cast,
    float_type,
    is_floating,
    is_integral,
    norm_dtypes,
    opmath_type,
)


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


def _sort(x, axis: int, descending: bool):
    """Stable sort along `axis`: (values, int64 indices); NaN sorts as the largest value."""
    n = x.shape[axis]
    iota = lax.broadcasted_iota(_index_dtype(), x.shape, axis)
    keys = x.astype(jnp.uint8) if x.dtype == jnp.bool_ else x
    if descending:
        # A stable ascending sort of the reversed input, reversed, keeps equal elements in order.
        keys, iota = lax.rev(keys, (axis,)), lax.rev(iota, (axis,))
    if n == 0:
        values, indices = keys, iota
    else:
        values, indices = lax.sort((keys, iota), dimension=axis, is_stable=True, num_keys=1)
    if descending:
        values, indices = lax.rev(values, (axis,)), lax.rev(indices, (axis,))
    return values.astype(x.dtype), indices


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


def p_norm(x, p, axes, keepdims):
    """PyTorch's vector p-norm of `x` (already in its computation dtype) over `axes` (None: all),
    p=0 counting nonzeros, an empty max-norm 0.

    Differentiated as PyTorch's norm backward: where the norm is 0 its gradient is 0 (a
    subgradient, not 0/0), and so is a zero element's for 0 < p < 1 (not 0 * inf) and a complex
    zero's (whose modulus has no derivative).
    """
    zero = x == 0
    a = jnp.where(zero, 0, jnp.abs(jnp.where(zero, 1, x))) if jnp.iscomplexobj(x) else jnp.abs(x)
    p = 2.0 if p is None else float(p)
    if p == math.inf:
        return jnp.max(a, axis=axes, keepdims=keepdims, initial=0)  # moduli are >= 0
    if p == -math.inf:
        return jnp.min(a, axis=axes, keepdims=keepdims)
    if p == 0:
        return jnp.sum((a != 0).astype(a.dtype), axis=axes, keepdims=keepdims)
    if p == 1:
        return jnp.sum(a, axis=axes, keepdims=keepdims)
    powers = a * a if p == 2 else jnp.where(zero, 0, jnp.where(zero, 1, a) ** p) if 0 < p < 1 else a**p
    total = jnp.sum(powers, axis=axes, keepdims=keepdims)
    if p < 0:  # a zero sum is an infinite norm here (every element infinite), nothing to guard
        return total ** (1.0 / p)
    vanishes = total == 0
    safe = jnp.where(vanishes, 1, total)
    return jnp.where(vanishes, 0, jnp.sqrt(safe) if p == 2 else safe ** (1.0 / p))


def _vector_norm(self, ord, dim, keepdim, dtype):
    compute, out_dtype = norm_dtypes(self.dtype, dtype)
    axes = _axes(dim, self.ndim)
    return p_norm(self.astype(compute), ord, axes, keepdim).astype(out_dtype)


def _softmax(fn, self, dim, out_dtype):
    x = self.astype(opmath_type(out_dtype))
    return _on_axis(lambda v, axis: fn(v, axis=axis), x, dim).astype(out_dtype)


def _softmax_grad_dtype(grad, input_dtype):
    """The grad's dtype, except that a float32 grad of a float16 input gives float16 (PyTorch's meta)."""
    if grad.dtype == np.float32 and np.dtype(input_dtype) == np.float16:
        return np.dtype(np.float16)
    return np.dtype(grad.dtype)


def _softmax_grad_axis(x, dim):
    return dim % x.ndim if x.ndim else None


def _any_dtype(self):
    return np.dtype(np.uint8) if self.dtype == np.uint8 else np.dtype(np.bool_)


def _at_index(x, index, axis):
    """(the element of `x` at `index` along `axis`, the index as PyTorch's): min.dim and max.dim
    return the first extreme element itself, so of tied zeros the first one's sign (jnp.min
    would give -0.0 for [0.0, -0.0], and op by op and jitted XLA differ)."""
    index = index.astype(_index_dtype())
    return jnp.take_along_axis(x, jnp.expand_dims(index, axis), axis=axis).squeeze(axis), index


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


def _median(x, axis, ignore_nan):
    """The lower median along `axis` and its index; NaN wins unless `ignore_nan`."""
    n = x.shape[axis]
    values, indices = _sort(x, axis, descending=False)
    if is_floating(x):
        nans = jnp.sum(jnp.isnan(x), axis=axis, keepdims=True, dtype=_index_dtype())
        if ignore_nan:  # NaNs sort last: the median of the n - nans numbers before them
            pos = jnp.maximum((n - nans - 1) // 2, 0)
        else:  # the first NaN, which a stable sort puts at n - nans
            pos = jnp.where(nans > 0, n - nans, (n - 1) // 2)
    else:
        pos = jnp.full([1 if a == axis else s for a, s in enumerate(x.shape)], (n - 1) // 2, _index_dtype())
    values = jnp.take_along_axis(values, pos, axis=axis)
    indices = jnp.take_along_axis(indices, pos, axis=axis)
    if ignore_nan and is_floating(x):
        # An all-NaN row: every element ties under PyTorch's comparator, so its index is
        # whichever one std::nth_element leaves in front.
        indices = jnp.where(nans == n, jnp.asarray(_nth_element_front_of_ties(n), indices.dtype), indices)
    return jnp.squeeze(values, axis), jnp.squeeze(indices, axis)


def _nth_element_front_of_ties(n: int) -> int:
    """The index libstdc++'s std::nth_element(first, first, last) leaves at `first` when all `n`
    elements tie (nanmedian of an all-NaN row asks for position (0 - 1) / 2 == 0 in C++).

    With every comparison false, each introselect round swaps the front with the middle
    (__move_median_to_first), then __unguarded_partition swaps pairs inwards from both ends,
    reversing [1, last), and cuts at 1 + (last - 1) // 2; the front stays in the left part,
    which halves until 3 or fewer are left for an insertion sort that moves nothing.
    """
    rounds, last = [], n
    while last > 3:
        rounds.append(last)
        last = 1 + (last - 1) // 2
    pos = 0  # follow the slot that ends at the front back to the element that started there
    for last in reversed(rounds):
        if 1 <= pos < last:  # undo the reversal of [1, last)
            pos = last - pos
        mid = last // 2
        pos = mid if pos == 0 else 0 if pos == mid else pos  # undo the swap of the front and the middle
    return pos


def _insertion_sorted(values, indices):
    """(values, indices) along the last axis in the order libstdc++'s std::sort leaves them for
    16 elements or fewer, where it runs an insertion sort alone, comparing with `<`.

    A NaN compares false both ways, so it stays where it is and stops numbers moving back past
    it, except that a number smaller than the first element moves straight to the front.
    """
    n = values.shape[-1]
    pos = lax.broadcasted_iota(jnp.int32, values.shape, values.ndim - 1)
    for i in range(1, n):
        v, ix = values[..., i:i + 1], indices[..., i:i + 1]
        # __unguarded_linear_insert walks back while v < values[k]: it stops after the last k
        # before i where that is false (NaN comparisons among them)
        stop = jnp.max(jnp.where((pos < i) & ~(v < values), pos, -1), axis=-1, keepdims=True)
        dest = jnp.where(v < values[..., :1], 0, stop + 1)
        moved = (pos > dest) & (pos <= i)
        shift = lambda a: jnp.concatenate([a[..., :1], a[..., :-1]], axis=-1)  # noqa: E731
        values = jnp.where(pos == dest, v, jnp.where(moved, shift(values), values))
        indices = jnp.where(pos == dest, ix, jnp.where(moved, shift(indices), indices))
    return values, indices


# -- ops ------------------------------------------------------------------------------------------


@aten("_is_all_true.default")
def aten__is_all_true(self):
    """_is_all_true(Tensor self) -> Tensor"""
    return jnp.all(self)


@aten("_is_any_true.default")
def aten__is_any_true(self):
    """_is_any_true(Tensor self) -> Tensor"""
    return jnp.any(self)


@aten("_log_softmax.default")
def aten__log_softmax(self, dim, half_to_float):
    """_log_softmax(Tensor self, int dim, bool half_to_float) -> Tensor"""
    out_dtype = np.dtype(np.float32) if half_to_float else np.dtype(self.dtype)
    return _softmax(jax.nn.log_softmax, self, dim, out_dtype)


@aten("_log_softmax_backward_data.default")
def aten__log_softmax_backward_data(grad_output, output, dim, input_dtype):
    """_log_softmax_backward_data(Tensor grad_output, Tensor output, int dim, ScalarType input_dtype) -> Tensor"""
    out_dtype, axis = _softmax_grad_dtype(grad_output, input_dtype), _softmax_grad_axis(output, dim)
    grad, output = (t.astype(opmath_type(out_dtype)) for t in (grad_output, output))
    return (grad - jnp.exp(output) * jnp.sum(grad, axis=axis, keepdims=True)).astype(out_dtype)


@aten("_softmax.default")
def aten__softmax(self, dim, half_to_float):
    """_softmax(Tensor self, int dim, bool half_to_float) -> Tensor"""
    out_dtype = np.dtype(np.float32) if half_to_float else np.dtype(self.dtype)
    return _softmax(jax.nn.softmax, self, dim, out_dtype)


@aten("_safe_softmax.default")
def aten__safe_softmax(self, dim, dtype=None):
    """_safe_softmax(Tensor self, int dim, ScalarType? dtype=None) -> Tensor"""
    out_dtype = np.dtype(dtype) if dtype is not None else np.dtype(self.dtype)
    x = self.astype(opmath_type(out_dtype))
    # A row of -inf only softmaxes to zeros, not NaN; its scores are neutralised first so that
    # its gradient is zero too (PyTorch's backward runs on the zero output), not 0 * NaN.
    axis = dim % x.ndim if x.ndim else None
    return safe_softmax(x, axis)[0].astype(out_dtype)


def safe_softmax(x, axis):
    """(softmax of x over `axis`, dead rows): a row whose every entry is -inf (or that is empty)
    is dead and softmaxes to zeros, as PyTorch's `_safe_softmax` and attention kernels give,
    not NaN, with zero gradient. One pass for the row maxima, one for the sums: the rows
    found dead by their maximum, not by a pass of their own (attention's scores are the
    largest arrays of a long sequence: Whisper's encoder, 8 x 1500 x 1500 per layer)."""
    top = jnp.max(x, axis=axis, keepdims=True, initial=-jnp.inf)
    dead = top == -jnp.inf
    # A dead row shifted by 0: exp(-inf) = 0 everywhere, summed to 0 and divided by 1.
    shifted = jnp.exp(x - lax.stop_gradient(jnp.where(dead, jnp.zeros((), x.dtype), top)))
    total = jnp.sum(shifted, axis=axis, keepdims=True)
    return shifted / jnp.where(dead, jnp.ones((), x.dtype), total), dead


@aten("_softmax_backward_data.default")
def aten__softmax_backward_data(grad_output, output, dim, input_dtype):
    """_softmax_backward_data(Tensor grad_output, Tensor output, int dim, ScalarType input_dtype) -> Tensor"""
    out_dtype, axis = _softmax_grad_dtype(grad_output, input_dtype), _softmax_grad_axis(output, dim)
    grad, output = (t.astype(opmath_type(out_dtype)) for t in (grad_output, output))
    return (output * (grad - jnp.sum(grad * output, axis=axis, keepdims=True))).astype(out_dtype)


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


@aten("argsort.default", "argsort.stable")
def aten_argsort(self, dim=-1, descending=False, *, stable=False):
    """argsort.stable(Tensor self, *, bool stable, int dim=-1, bool descending=False) -> Tensor"""
    return aten_sort(self, dim=dim, descending=descending)[1]


@aten("count_nonzero.default", "count_nonzero.dim_IntList")
def aten_count_nonzero(self, dim=None):
    """count_nonzero.dim_IntList(Tensor self, int[] dim) -> Tensor"""
    return jnp.sum(self.astype(jnp.bool_), axis=_axes(dim, self.ndim), dtype=_index_dtype())


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


@aten("kthvalue.default")
def aten_kthvalue(self, k, dim=-1, keepdim=False):
    """kthvalue(Tensor self, SymInt k, int dim=-1, bool keepdim=False) -> (Tensor values, Tensor indices)"""

    def kth(x, axis):
        values, indices = _sort(x, axis, descending=False)
        return (lax.index_in_dim(values, k - 1, axis, keepdims=False),
                lax.index_in_dim(indices, k - 1, axis, keepdims=False))

    return _on_axis(kth, self, dim, keepdim)


@aten("linalg_vector_norm.default")
def aten_linalg_vector_norm(self, ord=2, dim=None, keepdim=False, *, dtype=None):
    """linalg_vector_norm(Tensor self, Scalar ord=2, int[1]? dim=None, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor"""
    return _vector_norm(self, ord, dim, keepdim, dtype)


@aten("log_softmax.int")
def aten_log_softmax(self, dim, dtype=None):
    """log_softmax.int(Tensor self, int dim, ScalarType? dtype=None) -> Tensor"""
    out_dtype = np.dtype(dtype) if dtype is not None else np.dtype(self.dtype)
    return _softmax(jax.nn.log_softmax, cast(self, out_dtype), dim, out_dtype)


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


@aten("median.default")
def aten_median(self):
    """median(Tensor self) -> Tensor"""
    if self.size == 0:
        return jnp.full((), jnp.nan, self.dtype)
    return _median(self.reshape(-1), 0, ignore_nan=False)[0]


@aten("median.dim")
def aten_median_dim(self, dim, keepdim=False):
    """median.dim(Tensor self, int dim, bool keepdim=False) -> (Tensor values, Tensor indices)"""
    return _on_axis(lambda x, axis: _median(x, axis, ignore_nan=False), self, dim, keepdim)


@aten("min.default")
def aten_min(self):
    """min(Tensor self) -> Tensor"""
    _refuse_empty("min", self)
    return jnp.min(self)


@aten("min.dim")
def aten_min_dim(self, dim, keepdim=False):
    """min.dim(Tensor self, int dim, bool keepdim=False) -> (Tensor values, Tensor indices)"""
    return _on_axis(lambda x, axis: _at_index(x, jnp.argmin(x, axis=axis), axis), self, dim, keepdim)


@aten("mode.default")
def aten_mode(self, dim=-1, keepdim=False):
    """mode(Tensor self, int dim=-1, bool keepdim=False) -> (Tensor values, Tensor indices)"""

    def mode(x, axis):
        # PyTorch sorts, then keeps the first longest run (so the smallest of the most frequent
        # values) and the original index of that run's last element. NaNs are runs of one
        # (NaN != NaN), and where they sit depends on std::sort, whose `<` does not order them:
        # for 16 elements or fewer that is an insertion sort, followed exactly; past that,
        # libstdc++'s introsort, not followed (a stable sort with NaN last; ties keep the
        # largest index there).
        n = x.shape[axis]
        if n == 0:
            shape = x.shape[:axis] + x.shape[axis + 1:]
            return jnp.zeros(shape, x.dtype), jnp.zeros(shape, _index_dtype())
        if is_floating(x) and n <= 16:
            x = jnp.moveaxis(x, axis, -1)
            axis = x.ndim - 1
            values, indices = _insertion_sorted(x, lax.broadcasted_iota(_index_dtype(), x.shape, axis))
        else:
            values, indices = _sort(x, axis, descending=False)
        pos = lax.broadcasted_iota(_index_dtype(), x.shape, axis)
        prev = jnp.concatenate([lax.slice_in_dim(values, 0, 1, axis=axis), lax.slice_in_dim(values, 0, n - 1, axis=axis)], axis)
        nxt = jnp.concatenate([lax.slice_in_dim(values, 1, n, axis=axis), lax.slice_in_dim(values, n - 1, n, axis=axis)], axis)
        starts = (pos == 0) | (values != prev)
        ends = (pos == n - 1) | (values != nxt)
        run_start = lax.cummax(jnp.where(starts, pos, 0), axis=axis)
        freq = jnp.where(ends, pos - run_start + 1, 0)
        best = jnp.argmax(freq, axis=axis, keepdims=True)
        return (jnp.squeeze(jnp.take_along_axis(values, best, axis=axis), axis),
                jnp.squeeze(jnp.take_along_axis(indices, best, axis=axis), axis))

    return _on_axis(mode, self, dim, keepdim)


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


@aten("nanmedian.default")
def aten_nanmedian(self):
    """nanmedian(Tensor self) -> Tensor"""
    if self.size == 0:
        return jnp.full((), jnp.nan, self.dtype)
    return _median(self.reshape(-1), 0, ignore_nan=True)[0]


@aten("nanmedian.dim")
def aten_nanmedian_dim(self, dim, keepdim=False):
    """nanmedian.dim(Tensor self, int dim, bool keepdim=False) -> (Tensor values, Tensor indices)"""
    return _on_axis(lambda x, axis: _median(x, axis, ignore_nan=True), self, dim, keepdim)


@aten("nansum.default")
def aten_nansum(self, dim=None, keepdim=False, *, dtype=None):
    """nansum(Tensor self, int[1]? dim=None, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor"""
    if is_floating(self):
        self = jnp.where(jnp.isnan(self), jnp.zeros((), self.dtype), self)
    return aten_sum(self, dim, keepdim, dtype=dtype)


@aten("norm.Scalar", "norm.ScalarOpt_dim", "norm.ScalarOpt_dim_dtype", "norm.ScalarOpt_dtype")
def aten_norm(self, p=2, dim=None, keepdim=False, *, dtype=None):
    """norm.ScalarOpt_dim_dtype(Tensor self, Scalar? p, int[1] dim, bool keepdim, *, ScalarType dtype) -> Tensor"""
    return _vector_norm(self, p, dim, keepdim, dtype)


@aten("prod.default", "prod.dim_int")
def aten_prod(self, dim=None, keepdim=False, *, dtype=None):
    """prod.dim_int(Tensor self, int dim, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor"""
    out_dtype = _accumulate_dtype(self, dtype)
    x = self.astype(opmath_type(out_dtype))
    return jnp.prod(x, axis=_axes(dim, self.ndim), keepdims=keepdim).astype(out_dtype)


@aten("softmax.int")
def aten_softmax(self, dim, dtype=None):
    """softmax.int(Tensor self, int dim, ScalarType? dtype=None) -> Tensor"""
    out_dtype = np.dtype(dtype) if dtype is not None else np.dtype(self.dtype)
    return _softmax(jax.nn.softmax, cast(self, out_dtype), dim, out_dtype)


@aten("sort.default", "sort.stable")
def aten_sort(self, dim=-1, descending=False, *, stable=False):
    """sort.stable(Tensor self, *, bool? stable, int dim=-1, bool descending=False) -> (Tensor values, Tensor indices)"""
    return _on_axis(lambda x, axis: _sort(x, axis, descending), self, dim)


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


@aten("topk.default")
def aten_topk(self, k, dim=-1, largest=True, sorted=True):
    """topk(Tensor self, SymInt k, int dim=-1, bool largest=True, bool sorted=True) -> (Tensor values, Tensor indices)"""

    def top(x, axis):
        values, indices = _sort(x, axis, descending=largest)
        return lax.slice_in_dim(values, 0, k, axis=axis), lax.slice_in_dim(indices, 0, k, axis=axis)

    return _on_axis(top, self, dim)


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
