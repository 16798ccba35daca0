"""ATen lowerings: max, average and adaptive pooling, with indices and backward.

Window geometry (output sizes, ceil_mode, clipped windows) is static and is
worked out with NumPy; values go through `lax.reduce_window` or a gather of
the windows. Indices are flat positions in each input plane, as PyTorch's.
float16/bfloat16 averages accumulate in float32.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from .._pooling import taps_within_reach
from ..registry import aten
from ._promotion import canonical, opmath_type


def _expand(value, nd):
    if isinstance(value, int):
        return [value] * nd
    value = list(value)
    return value * nd if len(value) == 1 else value


def _pool_geometry(size, k, s, p, d, ceil_mode):
    """PyTorch's pooling output size along one dim (`pooling_output_shape`)."""
    numerator = size + 2 * p - d * (k - 1) - 1 + (s - 1 if ceil_mode else 0)
    out = numerator // s + 1
    if ceil_mode and (out - 1) * s >= size + p:
        out -= 1
    return max(out, 0)


def _fractional_starts(sample, in_size: int, out_size: int, pool: int):
    """PyTorch's `generate_intervals`: window starts along one dim, one row per plane."""
    index = canonical(np.int64)
    last = jnp.full(sample.shape + (1,), in_size - pool, index)
    if out_size == 1:
        return last
    alpha = jnp.asarray(in_size - pool, sample.dtype) / (out_size - 1)
    i = jnp.arange(out_size - 1, dtype=sample.dtype)
    u = sample[..., None]
    # C++ static_cast<int> truncates; the products are non-negative, so astype matches.
    starts = ((i + u) * alpha).astype(index) - (u * alpha).astype(index)
    return jnp.concatenate([starts, last], axis=-1)


def _fractional_max_pool(self, kernel_size, output_size, samples, sample_order):
    """Max over pseudo-random windows; `samples[..., sample_order[d]]` places spatial dim d.

    PyTorch keeps the first maximum, or the last NaN if the window has one.
    """
    nd = len(kernel_size)
    lead, sizes = self.shape[:-nd], self.shape[-nd:]
    samples = samples.reshape(lead + (nd,))
    index, flat = [], 0
    for d in range(nd):
        starts = _fractional_starts(samples[..., sample_order[d]], sizes[d], output_size[d], kernel_size[d])
        index.append(starts[..., None] + jnp.arange(kernel_size[d]))  # lead + (out_d, k_d)
    windows = self
    for d, ix in enumerate(index):
        shape = lead + (1,) * d + (ix.shape[-2] * ix.shape[-1],) + (1,) * (nd - d - 1)
        windows = jnp.take_along_axis(windows, ix.reshape(shape), axis=len(lead) + d)
    # lead + (o0, k0, o1, k1, ...) -> lead + (o0, o1, ...) + (k0 * k1 * ...)
    split = windows.reshape(lead + tuple(n for ix in index for n in ix.shape[-2:]))
    order = [len(lead) + 2 * d for d in range(nd)] + [len(lead) + 2 * d + 1 for d in range(nd)]
    window = int(np.prod(kernel_size))
    vals = split.transpose(tuple(range(len(lead))) + tuple(order)).reshape(lead + tuple(output_size) + (window,))
    for d, ix in enumerate(index):
        shape = lead + tuple(output_size[e] if e == d else 1 for e in range(nd))
        shape += tuple(kernel_size[e] if e == d else 1 for e in range(nd))
        flat = flat * sizes[d] + ix.reshape(shape)
    flat = jnp.broadcast_to(flat, lead + tuple(output_size) + tuple(kernel_size)).reshape(vals.shape)
    nan = jnp.isnan(vals)
    first_max = jnp.argmax(jnp.where(nan, -jnp.inf, vals), axis=-1)
    last_nan = window - 1 - jnp.argmax(nan[..., ::-1], axis=-1)
    pos = jnp.where(nan.any(axis=-1), last_nan, first_max)[..., None]
    best = jnp.take_along_axis(vals, pos, axis=-1)[..., 0]
    return best, jnp.take_along_axis(flat, pos, axis=-1)[..., 0]


def _lowest(dtype):
    # A NumPy (concrete) init value lets lax.reduce_window pick its max monoid, which has a VJP.
    if jnp.issubdtype(dtype, jnp.floating):
        return np.array(-np.inf, dtype)
    if dtype == jnp.bool_:
        return np.array(False)
    return np.array(jnp.iinfo(dtype).min, dtype)


def _windows(x, index_lists):
    """Gather windows: `index_lists[i]` is (idx[out_i, k_i], valid[out_i, k_i]) for spatial dim i.

    Returns (values[..., *out, K], valid[*out, K], flat input index[*out, K]).
    """
    nd = len(index_lists)
    sizes = x.shape[-nd:]
    idx, valid, flat = [], None, 0
    for i, (ix, ok) in enumerate(index_lists):
        shape = [1] * (2 * nd)
        shape[i], shape[nd + i] = ix.shape
        ix, ok = ix.reshape(shape), ok.reshape(shape)
        idx.append(ix)
        valid = ok if valid is None else valid & ok
        flat = flat * sizes[i] + ix
    outs = tuple(ix.shape[0] for ix, _ in index_lists)
    window = int(np.prod([ix.shape[1] for ix, _ in index_lists]))
    full = outs + tuple(ix.shape[1] for ix, _ in index_lists)
    valid = np.broadcast_to(valid, full).reshape(outs + (window,))
    flat = np.broadcast_to(flat, full).reshape(outs + (window,))
    vals = x[(Ellipsis,) + tuple(idx)]
    vals = vals.reshape(x.shape[:-nd] + outs + (window,))
    return vals, valid, flat


def _max_with_indices(x, index_lists):
    vals, valid, flat = _windows(x, index_lists)
    lowest = _lowest(x.dtype)
    masked = jnp.where(valid, vals, lowest)
    best = jnp.max(masked, axis=-1, keepdims=True)
    # PyTorch keeps the first maximum, the first NaN, or (all -inf) the first valid element.
    hit = valid & (
        (masked == best) | (jnp.isnan(masked) if jnp.issubdtype(x.dtype, jnp.floating) else False)
    )
    pos = jnp.argmax(hit, axis=-1)
    index = jnp.take_along_axis(jnp.broadcast_to(flat, vals.shape), pos[..., None], axis=-1)[..., 0]
    return best[..., 0], index.astype(np.int64)


def _pool_indices(size, k, s, p, d, ceil_mode):
    out = _pool_geometry(size, k, s, p, d, ceil_mode)
    pos = np.arange(out)[:, None] * s - p + np.arange(k)[None, :] * d
    valid = (pos >= 0) & (pos < size)
    return np.clip(pos, 0, max(size - 1, 0)), valid


def _max_pool_with_indices(self, nd, kernel_size, stride, padding, dilation, ceil_mode):
    kernel = _expand(kernel_size, nd)
    stride = _expand(stride, nd) if stride else kernel
    padding, dilation = _expand(padding, nd), _expand(dilation, nd)
    lists = [
        _pool_indices(n, k, s, p, d, ceil_mode)
        for n, k, s, p, d in zip(self.shape[-nd:], kernel, stride, padding, dilation)
    ]
    return _max_with_indices(self, lists)


def _max_pool(self, nd, kernel_size, stride, padding, dilation, ceil_mode):
    kernel = _expand(kernel_size, nd)
    stride = _expand(stride, nd) if stride else kernel
    padding, dilation = _expand(padding, nd), _expand(dilation, nd)
    pads = []
    for n, k, s, p, d in zip(self.shape[-nd:], kernel, stride, padding, dilation):
        out = _pool_geometry(n, k, s, p, d, ceil_mode)
        pads.append((p, max((out - 1) * s + d * (k - 1) + 1 - n - p, 0)))
    lead = self.ndim - nd
    if self.size == 0 or any(
        _pool_geometry(n, k, s, p, d, ceil_mode) == 0
        for n, k, s, p, d in zip(self.shape[-nd:], kernel, stride, padding, dilation)
    ):
        return _max_pool_with_indices(self, nd, kernel_size, stride, padding, dilation, ceil_mode)[
            0
        ]
    x = self
    if jnp.issubdtype(x.dtype, jnp.floating):
        # reduce_window's max drops NaN on some backends; PyTorch propagates it.
        nan = jnp.isnan(x)
    out = lax.reduce_window(
        x,
        _lowest(x.dtype),
        lax.max,
        (1,) * lead + tuple(kernel),
        (1,) * lead + tuple(stride),
        [(0, 0)] * lead + pads,
        window_dilation=(1,) * lead + tuple(dilation),
    )
    if jnp.issubdtype(x.dtype, jnp.floating):
        any_nan = lax.reduce_window(
            nan,
            False,
            lax.bitwise_or,
            (1,) * lead + tuple(kernel),
            (1,) * lead + tuple(stride),
            [(0, 0)] * lead + pads,
            window_dilation=(1,) * lead + tuple(dilation),
        )
        out = jnp.where(any_nan, jnp.array(jnp.nan, out.dtype), out)
    return out


def _avg_pool(
    self, nd, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override
):
    kernel = _expand(kernel_size, nd)
    stride = _expand(stride, nd) if stride else kernel
    padding = _expand(padding, nd)
    lead = self.ndim - nd
    compute = opmath_type(self.dtype)
    pads, windows, divisors = [], [], []
    for n, k, s, p in zip(self.shape[-nd:], kernel, stride, padding):
        out = _pool_geometry(n, k, s, p, 1, ceil_mode)
        start = np.arange(out) * s - p
        end = np.minimum(start + k, n + p)
        pool = end - start
        valid = np.minimum(end, n) - np.maximum(start, 0)
        divisors.append(pool if count_include_pad else valid)
        window = taps_within_reach(n, p, k)
        windows.append(window)
        pads.append((p, max((out - 1) * s + window - n - p, 0)))
    # A NumPy (concrete) init value lets reduce_window pick its sum monoid, which has a VJP under jit.
    total = lax.reduce_window(
        self.astype(compute),
        np.array(0, compute),
        lax.add,
        (1,) * lead + tuple(windows),
        (1,) * lead + tuple(stride),
        [(0, 0)] * lead + pads,
    )
    if divisor_override:
        divisor = np.asarray(divisor_override)
    else:
        divisor = divisors[0]
        for d in divisors[1:]:
            divisor = np.multiply.outer(divisor, d)
    if jnp.issubdtype(self.dtype, jnp.integer):
        # PyTorch's integer average pooling truncates the quotient.
        return lax.div(total, jnp.broadcast_to(jnp.asarray(divisor, compute), total.shape)).astype(
            self.dtype
        )
    return (total / jnp.asarray(divisor, compute)).astype(self.dtype)


def _adaptive_lists(sizes, output_size):
    lists = []
    for n, o in zip(sizes, output_size):
        start = (np.arange(o) * n) // o
        end = -((-(np.arange(o) + 1) * n) // o)
        k = int((end - start).max()) if o else 0
        pos = start[:, None] + np.arange(k)[None, :]
        valid = pos < end[:, None]
        lists.append((np.clip(pos, 0, max(n - 1, 0)), valid))
    return lists


def _adaptive_avg(self, output_size):
    """Each output the mean of its window, summed in one reduction over every pooled axis. An
    axis whose windows tile it (a global pool, or 224 -> 7) is reshaped into (windows, length);
    another (7 -> 3: uneven, overlapping windows) gathers each window's positions, padding the
    shorter windows with zeros. Both sum only a window's own elements, so an inf or NaN stays in
    the windows that hold it (a 0/1 matrix product would give inf * 0 = NaN in every other)."""
    nd = len(output_size)
    lead = self.ndim - nd
    output_size = [n if o is None else o for n, o in zip(self.shape[lead:], output_size)]
    compute = opmath_type(self.dtype)
    x = self.astype(compute)
    lengths = np.ones((), np.int64)
    for i, (n, o) in enumerate(zip(self.shape[lead:], output_size)):
        axis = lead + 2 * i  # each pooled axis before it became (windows, length)
        if o and n % o == 0:
            x = x.reshape(x.shape[:axis] + (o, n // o) + x.shape[axis + 1:])
            length = np.full(o, n // o)
        else:
            (pos, valid), = _adaptive_lists([n], [o])
            windows = jnp.take(x, pos.reshape(-1), axis=axis).reshape(x.shape[:axis] + pos.shape + x.shape[axis + 1:])
            x = jnp.where(valid.reshape(valid.shape + (1,) * (x.ndim - axis - 1)), windows, 0)
            length = valid.sum(axis=1)
        lengths = np.multiply.outer(lengths, length)
    total = jnp.sum(x, axis=tuple(range(lead + 1, x.ndim, 2)))
    return (total / jnp.asarray(np.maximum(lengths, 1), compute)).astype(self.dtype)


def _max_unpool(self, indices, output_size):
    nd = len(output_size)
    lead = self.shape[: self.ndim - nd]
    rows = math.prod(lead)
    out = _scatter_rows(self.reshape(rows, -1), indices.reshape(rows, -1), math.prod(output_size))
    return out.reshape(lead + tuple(output_size))


@functools.partial(jax.custom_jvp, nondiff_argnums=(2,))
def _scatter_rows(vals, idx, width):
    """Row i of `vals` written at positions `idx[i]` of a zero row of `width`."""
    return jnp.zeros((vals.shape[0], width), vals.dtype).at[jnp.arange(vals.shape[0])[:, None], idx].set(vals)


@_scatter_rows.defjvp
def _scatter_rows_jvp(width, primals, tangents):
    # PyTorch's max_unpool backward gathers the gradient at every index, so an input whose index
    # another input shares gets it too (where the written value is only one of them): the tangent
    # scattered by addition is the map whose transpose is that gather. (PyTorch's forward mode
    # writes the tangents as the values, so at repeated indices its two modes disagree.)
    vals, idx = primals
    rows = jnp.arange(vals.shape[0])[:, None]
    return (_scatter_rows(vals, idx, width),
            jnp.zeros((vals.shape[0], width), vals.dtype).at[rows, idx].add(tangents[0]))


def _max_pool_backward(grad_output, self, indices, nd):
    lead = self.shape[:-nd]
    plane = math.prod(self.shape[-nd:])
    rows = math.prod(lead)
    compute = opmath_type(self.dtype)
    g = grad_output.astype(compute).reshape(rows, -1)
    idx = indices.reshape(rows, -1)
    out = jnp.zeros((rows, plane), compute).at[jnp.arange(rows)[:, None], idx].add(g)
    return out.reshape(self.shape).astype(self.dtype)


@aten("_adaptive_avg_pool2d.default", "adaptive_avg_pool2d.default")
def aten__adaptive_avg_pool2d(self, output_size):
    """_adaptive_avg_pool2d(Tensor self, SymInt[2] output_size) -> Tensor"""
    return _adaptive_avg(self, _expand(output_size, 2))


@aten("_adaptive_avg_pool2d_backward.default")
def aten__adaptive_avg_pool2d_backward(grad_output, self):
    """_adaptive_avg_pool2d_backward(Tensor grad_output, Tensor self) -> Tensor"""
    _, vjp = jax.vjp(lambda x: _adaptive_avg(x, grad_output.shape[-2:]), self)
    return vjp(grad_output)[0]


@aten("_adaptive_avg_pool3d.default", "adaptive_avg_pool3d.default")
def aten__adaptive_avg_pool3d(self, output_size):
    """_adaptive_avg_pool3d(Tensor self, SymInt[3] output_size) -> Tensor"""
    return _adaptive_avg(self, _expand(output_size, 3))


@aten("adaptive_avg_pool1d.default")
def aten_adaptive_avg_pool1d(self, output_size):
    """adaptive_avg_pool1d(Tensor self, int[1] output_size) -> Tensor"""
    return _adaptive_avg(self, _expand(output_size, 1))


@aten("adaptive_max_pool1d.default", "adaptive_max_pool2d.default", "adaptive_max_pool3d.default")
def aten_adaptive_max_pool2d(self, output_size):
    """adaptive_max_pool2d(Tensor self, int[2] output_size) -> (Tensor, Tensor)"""
    output_size = list(output_size)
    nd = len(output_size)
    return _max_with_indices(self, _adaptive_lists(self.shape[-nd:], output_size))


@aten("avg_pool1d.default")
def aten_avg_pool1d(
    self, kernel_size, stride=(), padding=0, ceil_mode=False, count_include_pad=True
):
    """avg_pool1d(Tensor self, int[1] kernel_size, int[1] stride=[], int[1] padding=[0], bool ceil_mode=False, bool count_include_pad=True) -> Tensor"""
    return _avg_pool(self, 1, kernel_size, stride, padding, ceil_mode, count_include_pad, None)


@aten("avg_pool2d.default")
def aten_avg_pool2d(
    self,
    kernel_size,
    stride=(),
    padding=0,
    ceil_mode=False,
    count_include_pad=True,
    divisor_override=None,
):
    """avg_pool2d(Tensor self, int[2] kernel_size, int[2] stride=[], int[2] padding=0, bool ceil_mode=False, bool count_include_pad=True, int? divisor_override=None) -> Tensor"""
    return _avg_pool(
        self, 2, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override
    )


@aten("avg_pool2d_backward.default")
def aten_avg_pool2d_backward(
    grad_output, self, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override
):
    """avg_pool2d_backward(Tensor grad_output, Tensor self, int[2] kernel_size, int[2] stride, int[2] padding, bool ceil_mode, bool count_include_pad, int? divisor_override) -> Tensor"""
    compute = opmath_type(self.dtype)

    def forward(x):
        return _avg_pool(
            x, 2, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override
        )

    _, vjp = jax.vjp(forward, self.astype(compute))
    return vjp(grad_output.astype(compute))[0].astype(self.dtype)


@aten("avg_pool3d.default")
def aten_avg_pool3d(
    self,
    kernel_size,
    stride=(),
    padding=0,
    ceil_mode=False,
    count_include_pad=True,
    divisor_override=None,
):
    """avg_pool3d(Tensor self, int[3] kernel_size, int[3] stride=[], int[3] padding=0, bool ceil_mode=False, bool count_include_pad=True, int? divisor_override=None) -> Tensor"""
    return _avg_pool(
        self, 3, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override
    )


@aten("fractional_max_pool2d.default")
def aten_fractional_max_pool2d(self, kernel_size, output_size, random_samples):
    """fractional_max_pool2d(Tensor self, int[2] kernel_size, int[2] output_size, Tensor random_samples) -> (Tensor, Tensor)"""
    # Each plane's samples are (u_w, u_h).
    return _fractional_max_pool(self, list(kernel_size), list(output_size), random_samples, (1, 0))


@aten("fractional_max_pool3d.default")
def aten_fractional_max_pool3d(self, kernel_size, output_size, random_samples):
    """fractional_max_pool3d(Tensor self, int[3] kernel_size, int[3] output_size, Tensor random_samples) -> (Tensor, Tensor)"""
    # Each plane's samples are (u_t, u_h, u_w).
    return _fractional_max_pool(self, list(kernel_size), list(output_size), random_samples, (0, 1, 2))


@aten("max_pool1d.default")
def aten_max_pool1d(self, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    """max_pool1d(Tensor self, int[1] kernel_size, int[1] stride=[], int[1] padding=[0], int[1] dilation=[1], bool ceil_mode=False) -> Tensor"""
    return _max_pool(self, 1, kernel_size, stride, padding, dilation, ceil_mode)


@aten("max_pool1d_with_indices.default")
def aten_max_pool1d_with_indices(
    self, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False
):
    """max_pool1d_with_indices(Tensor self, int[1] kernel_size, int[1] stride=[], int[1] padding=[0], int[1] dilation=[1], bool ceil_mode=False) -> (Tensor, Tensor)"""
    return _max_pool_with_indices(self, 1, kernel_size, stride, padding, dilation, ceil_mode)


@aten("max_pool2d.default")
def aten_max_pool2d(self, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    """max_pool2d(Tensor self, int[2] kernel_size, int[2] stride=[], int[2] padding=0, int[2] dilation=1, bool ceil_mode=False) -> Tensor"""
    return _max_pool(self, 2, kernel_size, stride, padding, dilation, ceil_mode)


@aten("max_pool2d_with_indices.default")
def aten_max_pool2d_with_indices(
    self, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False
):
    """max_pool2d_with_indices(Tensor self, int[2] kernel_size, int[2] stride=[], int[2] padding=0, int[2] dilation=1, bool ceil_mode=False) -> (Tensor, Tensor)"""
    return _max_pool_with_indices(self, 2, kernel_size, stride, padding, dilation, ceil_mode)


@aten("max_pool2d_with_indices_backward.default")
def aten_max_pool2d_with_indices_backward(
    grad_output, self, kernel_size, stride, padding, dilation, ceil_mode, indices
):
    """max_pool2d_with_indices_backward(Tensor grad_output, Tensor self, int[2] kernel_size, int[2] stride, int[2] padding, int[2] dilation, bool ceil_mode, Tensor indices) -> Tensor"""
    return _max_pool_backward(grad_output, self, indices, 2)


@aten("max_pool3d.default")
def aten_max_pool3d(self, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    """max_pool3d(Tensor self, int[3] kernel_size, int[3] stride=[], int[3] padding=0, int[3] dilation=1, bool ceil_mode=False) -> Tensor"""
    return _max_pool(self, 3, kernel_size, stride, padding, dilation, ceil_mode)


@aten("max_pool3d_with_indices.default")
def aten_max_pool3d_with_indices(
    self, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False
):
    """max_pool3d_with_indices(Tensor self, int[3] kernel_size, int[3] stride=[], int[3] padding=0, int[3] dilation=1, bool ceil_mode=False) -> (Tensor, Tensor)"""
    return _max_pool_with_indices(self, 3, kernel_size, stride, padding, dilation, ceil_mode)


@aten("max_pool3d_with_indices_backward.default")
def aten_max_pool3d_with_indices_backward(
    grad_output, self, kernel_size, stride, padding, dilation, ceil_mode, indices
):
    """max_pool3d_with_indices_backward(Tensor grad_output, Tensor self, int[3] kernel_size, int[3] stride, int[3] padding, int[3] dilation, bool ceil_mode, Tensor indices) -> Tensor"""
    return _max_pool_backward(grad_output, self, indices, 3)


@aten("max_unpool2d.default")
def aten_max_unpool2d(self, indices, output_size):
    """max_unpool2d(Tensor self, Tensor indices, SymInt[2] output_size) -> Tensor"""
    return _max_unpool(self, indices, list(output_size))


@aten("max_unpool3d.default")
def aten_max_unpool3d(self, indices, output_size, stride, padding):
    """max_unpool3d(Tensor self, Tensor indices, SymInt[3] output_size, int[3] stride, int[3] padding) -> Tensor"""
    return _max_unpool(self, indices, list(output_size))
