"""ONNX pooling: AveragePool, MaxPool, LpPool, Global*, MaxUnpool, MaxRoiPool, RoiAlign.

Window geometry (output sizes, auto_pad, ceil_mode) is static and worked out with NumPy;
values go through `lax.reduce_window`, or a gather of the windows where MaxPool's Indices
output is asked for. float16/bfloat16 sums accumulate in float32.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from .._pooling import taps_within_reach
from ..registry import onnx
from ._helpers import index_dtype, static_ints


def _compute_dtype(dtype):
    dtype = np.dtype(dtype)
    half = dtype.itemsize < 4 and jnp.issubdtype(dtype, jnp.floating)
    return np.dtype(np.float32) if half else dtype


def _lowest(dtype):
    # A concrete init value lets reduce_window recognise its max monoid.
    dtype = np.dtype(dtype)
    if jnp.issubdtype(dtype, jnp.floating):
        return np.array(-np.inf, dtype)
    if dtype == np.bool_:
        return np.array(False)
    return np.array(np.iinfo(dtype).min, dtype)


def _pool_geometry(spatial, kernel, strides, dilations, pads, auto_pad, ceil_mode):
    """Per spatial dim: (out, low pad, declared high pad, extra high pad that ceil_mode's
    last window reaches beyond the declared one)."""
    nd = len(spatial)
    strides = tuple(strides) if strides else (1,) * nd
    dilations = tuple(dilations) if dilations else (1,) * nd
    pads = tuple(pads) if pads else (0,) * (2 * nd)
    dims = []
    for i, (n, k, s, d) in enumerate(zip(spatial, kernel, strides, dilations)):
        span = (k - 1) * d + 1
        if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            out = -(-n // s)
            total = max((out - 1) * s + span - n, 0)
            half = total // 2
            lo, hi = (total - half, half) if auto_pad == "SAME_LOWER" else (half, total - half)
        elif auto_pad == "VALID":
            lo = hi = 0
            out = (n - span) // s + 1
        else:
            lo, hi = pads[i], pads[nd + i]
            room = n + lo + hi - span
            out = (-(-room // s) if ceil_mode else room // s) + 1
            # ceil_mode never starts a window in the high padding.
            if ceil_mode and (out - 1) * s >= n + lo:
                out -= 1
        extra = max((out - 1) * s + span - (n + lo + hi), 0)
        dims.append((max(out, 0), lo, hi, extra, s, d, k))
    return dims


def _reduce(x, init, op, dims):
    lead = x.ndim - len(dims)
    kernel, high = [], []
    for n, (_, lo, hi, extra, _, d, k) in zip(x.shape[lead:], dims):
        # The high padding shrinks by as much as the kernel, which keeps every window where it was.
        taps = taps_within_reach(n, lo, k, d)
        kernel.append(taps)
        high.append(hi + extra - (k - taps) * d)
    return lax.reduce_window(
        x,
        init,
        op,
        (1,) * lead + tuple(kernel),
        (1,) * lead + tuple(s for *_, s, _, _ in dims),
        [(0, 0)] * lead + [(lo, h) for (_, lo, *_), h in zip(dims, high)],
        window_dilation=(1,) * lead + tuple(d for *_, d, _ in dims),
    )


def _window_positions(out, lo, s, d, k):
    """[out, k] input positions of each window along one dim."""
    return np.arange(out)[:, None] * s - lo + np.arange(k)[None, :] * d


@onnx("AveragePool", since=1)
def average_pool(X, *, auto_pad="NOTSET", ceil_mode=0, count_include_pad=0, dilations=None,
                 kernel_shape=(), pads=None, strides=None):
    """AveragePool(T X) -> T Y; auto_pad, ceil_mode, count_include_pad, dilations,
    kernel_shape, pads, strides."""
    nd = len(kernel_shape)
    dims = _pool_geometry(X.shape[-nd:], kernel_shape, strides, dilations, pads, auto_pad,
                          ceil_mode)
    compute = _compute_dtype(X.dtype)
    total = _reduce(X.astype(compute), np.array(0, compute), lax.add, dims)
    divisor = np.ones((), np.int64)
    for n, (out, lo, hi, _, s, d, k) in zip(X.shape[-nd:], dims):
        pos = _window_positions(out, lo, s, d, k)
        low, high = (-lo, n + hi) if count_include_pad else (0, n)
        count = ((pos >= low) & (pos < high)).sum(axis=1)
        divisor = np.multiply.outer(divisor, count)
    return (total / np.maximum(divisor, 1).astype(compute)).astype(X.dtype)


@onnx("GlobalAveragePool", since=1)
def global_average_pool(X):
    """GlobalAveragePool(T X) -> T Y; the mean over every spatial dim, kept as size 1."""
    compute = _compute_dtype(X.dtype)
    axes = tuple(range(2, X.ndim))
    return jnp.mean(X.astype(compute), axis=axes, keepdims=True).astype(X.dtype)


@onnx("GlobalLpPool", since=1)
def global_lp_pool(X, *, p=2):
    """GlobalLpPool(T X) -> T Y; p: the p-norm over every spatial dim, kept as size 1."""
    compute = _compute_dtype(X.dtype)
    axes = tuple(range(2, X.ndim))
    total = jnp.sum(jnp.abs(X.astype(compute)) ** p, axis=axes, keepdims=True)
    return (total ** (1.0 / p)).astype(X.dtype)


@onnx("GlobalMaxPool", since=1)
def global_max_pool(X):
    """GlobalMaxPool(T X) -> T Y; the max over every spatial dim, kept as size 1."""
    return jnp.max(X, axis=tuple(range(2, X.ndim)), keepdims=True)


@onnx("LpPool", since=1)
def lp_pool(X, *, auto_pad="NOTSET", ceil_mode=0, dilations=None, kernel_shape=(), p=2,
            pads=None, strides=None):
    """LpPool(T X) -> T Y; auto_pad, ceil_mode, dilations, kernel_shape, p, pads, strides."""
    nd = len(kernel_shape)
    dims = _pool_geometry(X.shape[-nd:], kernel_shape, strides, dilations, pads, auto_pad,
                          ceil_mode)
    compute = _compute_dtype(X.dtype)
    powered = jnp.abs(X.astype(compute)) ** p
    total = _reduce(powered, np.array(0, compute), lax.add, dims)
    return (total ** (1.0 / p)).astype(X.dtype)


def _max_pool_indices(X, dims, storage_order):
    """Flat index (over the whole NC<spatial> tensor) of each window's first maximum."""
    nd = len(dims)
    spatial = X.shape[-nd:]
    index, valid = [], np.ones((), bool)
    row_major = np.zeros((), np.int64)
    col_major = np.zeros((), np.int64)
    for i, (n, (out, lo, _, _, s, d, k)) in enumerate(zip(spatial, dims)):
        pos = _window_positions(out, lo, s, d, k)
        shape = [1] * (2 * nd)
        shape[i], shape[nd + i] = out, k
        pos = pos.reshape(shape)
        valid = valid & (pos >= 0) & (pos < n)
        clipped = np.clip(pos, 0, n - 1)
        index.append(clipped)
        row_major = row_major * n + clipped
    stride = 1
    for i, n in enumerate(spatial):
        col_major = col_major + index[i] * stride
        stride *= n
    outs = tuple(out for out, *_ in dims)
    window = int(np.prod([k for *_, k in dims]))
    full = outs + tuple(k for *_, k in dims)
    valid = np.broadcast_to(valid, full).reshape(outs + (window,))
    flat = np.broadcast_to(col_major if storage_order else row_major, full)
    flat = flat.reshape(outs + (window,))
    vals = X[(Ellipsis,) + tuple(index)].reshape(X.shape[:-nd] + outs + (window,))
    masked = jnp.where(valid, vals, _lowest(X.dtype))
    best = jnp.max(masked, axis=-1, keepdims=True)
    pos = jnp.argmax(valid & (masked == best), axis=-1)
    flat = jnp.broadcast_to(jnp.asarray(flat, index_dtype()), vals.shape)
    within = jnp.take_along_axis(flat, pos[..., None], axis=-1)[..., 0]
    planes = jnp.arange(int(np.prod(X.shape[:-nd])), dtype=index_dtype()).reshape(
        X.shape[:-nd] + (1,) * nd
    )
    return within + planes * int(np.prod(spatial))


@onnx("MaxPool", since=1)
def max_pool(X, *, auto_pad="NOTSET", ceil_mode=0, dilations=None, kernel_shape=(), pads=None,
             storage_order=0, strides=None, output_count=1):
    """MaxPool(T X) -> (T Y, int64 Indices); auto_pad, ceil_mode, dilations, kernel_shape,
    pads, storage_order, strides."""
    nd = len(kernel_shape)
    dims = _pool_geometry(X.shape[-nd:], kernel_shape, strides, dilations, pads, auto_pad,
                          ceil_mode)
    Y = _reduce(X, _lowest(X.dtype), lax.max, dims)
    if output_count < 2:
        return Y
    return Y, _max_pool_indices(X, dims, storage_order)


def _c_round(x):
    # C's round(): halves away from zero.
    return jnp.sign(x) * jnp.floor(jnp.abs(x) + 0.5)


@onnx("MaxRoiPool", since=1)
def max_roi_pool(X, rois, *, pooled_shape=(), spatial_scale=1.0):
    """MaxRoiPool(T X, T rois) -> T Y; pooled_shape, spatial_scale. rois rows are
    (batch, x1, y1, x2, y2); an empty bin gives 0."""
    ph, pw = pooled_shape
    height, width = X.shape[2:]
    batch = rois[:, 0].astype(jnp.int32)
    x1, y1, x2, y2 = (_c_round(rois[:, i] * spatial_scale).astype(jnp.int32) for i in range(1, 5))

    def bins(start, end, pooled, size):
        length = jnp.maximum(end - start + 1, 1).astype(jnp.float32)
        step = length[:, None] / pooled
        i = jnp.arange(pooled, dtype=jnp.float32)[None, :]
        lo = jnp.clip(jnp.floor(i * step).astype(jnp.int32) + start[:, None], 0, size)
        hi = jnp.clip(jnp.ceil((i + 1) * step).astype(jnp.int32) + start[:, None], 0, size)
        at = jnp.arange(size, dtype=jnp.int32)[None, None, :]
        return (at >= lo[..., None]) & (at < hi[..., None]), hi > lo  # [R, P, size], [R, P]

    rows, rows_ok = bins(y1, y2, ph, height)
    cols, cols_ok = bins(x1, x2, pw, width)
    low = _lowest(X.dtype)

    def one_roi(args):
        # One ROI at a time keeps the masked [C, H, PW, W] intermediate small.
        b, row, col = args
        plane = lax.dynamic_index_in_dim(X, b, axis=0, keepdims=False)  # [C, H, W]
        by_col = jnp.max(jnp.where(col[None, None], plane[:, :, None, :], low), axis=-1)
        return jnp.max(jnp.where(row[None, :, None, :], jnp.swapaxes(by_col, 1, 2)[:, None],
                                 low), axis=-1)  # [C, PH, PW]

    out = lax.map(one_roi, (batch, rows, cols))
    empty = ~(rows_ok[:, None, :, None] & cols_ok[:, None, None, :])
    return jnp.where(empty, jnp.zeros((), X.dtype), out)


@onnx("MaxUnpool", since=9, static=(2,))
def max_unpool(X, I, output_shape=None, *, kernel_shape=(), pads=None, strides=None):  # noqa: E741
    """MaxUnpool(T1 X, T2 I, T2? output_shape) -> T1 output; kernel_shape, pads, strides.

    I holds flat indices into the whole output (MaxPool's Indices of the tensor being
    restored), also when output_shape is given, as onnxruntime and PyTorch read them.
    """
    nd = len(kernel_shape)
    if output_shape is not None:
        shape = static_ints(output_shape, "MaxUnpool output_shape")
    else:
        strides = tuple(strides) if strides else (1,) * nd
        pads = tuple(pads) if pads else (0,) * (2 * nd)
        shape = tuple(X.shape[:2]) + tuple(
            (n - 1) * s - pads[i] - pads[nd + i] + k
            for i, (n, s, k) in enumerate(zip(X.shape[2:], strides, kernel_shape))
        )
    flat = jnp.zeros((math.prod(shape),), X.dtype)
    return flat.at[I.reshape(-1)].set(X.reshape(-1)).reshape(shape)


def _roi_align(X, rois, batch_indices, *, coordinate_transformation_mode, mode, output_height,
               output_width, sampling_ratio, spatial_scale):
    compute = _compute_dtype(X.dtype)
    height, width = X.shape[2:]
    rois = rois.astype(compute)
    offset = 0.5 if coordinate_transformation_mode == "half_pixel" else 0.0
    x1, y1, x2, y2 = (rois[:, i] * spatial_scale - offset for i in range(4))
    roi_w, roi_h = x2 - x1, y2 - y1
    if coordinate_transformation_mode != "half_pixel":
        roi_w, roi_h = jnp.maximum(roi_w, 1.0), jnp.maximum(roi_h, 1.0)
    bin_h, bin_w = roi_h / output_height, roi_w / output_width
    if sampling_ratio > 0:
        grid_h = grid_w = jnp.full(rois.shape[:1], sampling_ratio, jnp.int32)
        max_h = max_w = sampling_ratio
    else:
        grid_h = jnp.ceil(bin_h).astype(jnp.int32)
        grid_w = jnp.ceil(bin_w).astype(jnp.int32)
        # The sample count per bin depends on the ROI's size: take the largest that concrete
        # ROIs need; for ROIs known only at run time, enough for any within the feature map.
        if not isinstance(grid_h, jax.core.Tracer):
            max_h = max(int(np.max(np.asarray(grid_h), initial=1)), 1)
            max_w = max(int(np.max(np.asarray(grid_w), initial=1)), 1)
        else:
            max_h = max(-(-(height + 1) // output_height), 1)
            max_w = max(-(-(width + 1) // output_width), 1)
            # A larger ROI is sampled on the largest grid, spread over its whole bin.
            grid_h, grid_w = jnp.minimum(grid_h, max_h), jnp.minimum(grid_w, max_w)

    def axis_samples(start, bin_size, grid, pooled, grid_max, size):
        # [R, pooled, grid_max] sample coordinates, their corners and weights along one axis.
        p = jnp.arange(pooled, dtype=compute)[None, :, None]
        g = jnp.arange(grid_max, dtype=compute)[None, None, :]
        grid_f = jnp.maximum(grid, 1).astype(compute)[:, None, None]
        at = start[:, None, None] + p * bin_size[:, None, None] + (
            g + 0.5) * bin_size[:, None, None] / grid_f
        used = jnp.arange(grid_max, dtype=jnp.int32)[None, None, :] < grid[:, None, None]
        inside = (at >= -1.0) & (at <= size)
        at = jnp.maximum(at, 0.0)
        low = jnp.floor(at).astype(jnp.int32)
        edge = low >= size - 1
        last = jnp.int32(size - 1)
        high = jnp.where(edge, last, low + 1)
        low = jnp.where(edge, last, low)
        at = jnp.where(edge, low.astype(compute), at)
        frac = at - low.astype(compute)
        zero = jnp.zeros((), compute)
        return low, high, jnp.where(inside, 1 - frac, zero), jnp.where(inside, frac, zero), used

    yl, yh, wyl, wyh, used_y = axis_samples(y1, bin_h, grid_h, output_height, max_h, height)
    xl, xh, wxl, wxh, used_x = axis_samples(x1, bin_w, grid_w, output_width, max_w, width)
    b = batch_indices.astype(jnp.int32)[:, None, None, None, None]

    def corner(yi, xi, wy, wx):
        # [R, PH, GH, PW, GW, C]
        vals = X[b, :, yi[:, :, :, None, None], xi[:, None, None]].astype(compute)
        return vals * (wy[:, :, :, None, None] * wx[:, None, None])[..., None]

    corners = [corner(yl, xl, wyl, wxl), corner(yl, xh, wyl, wxh),
               corner(yh, xl, wyh, wxl), corner(yh, xh, wyh, wxh)]
    used = (used_y[:, :, :, None, None] & used_x[:, None, None])[..., None]
    if mode == "max":
        best = jnp.maximum(jnp.maximum(corners[0], corners[1]), jnp.maximum(corners[2], corners[3]))
        out = jnp.max(jnp.where(used, best, -jnp.inf), axis=(2, 4))
        out = jnp.where(jnp.any(used, axis=(2, 4)), out, 0)
    else:
        count = jnp.maximum(grid_h * grid_w, 1).astype(compute)[:, None, None, None]
        out = jnp.sum(jnp.where(used, sum(corners), 0), axis=(2, 4)) / count
    return jnp.moveaxis(out, -1, 1).astype(X.dtype)


@onnx("RoiAlign", since=10)
def roi_align_10(X, rois, batch_indices, *, mode="avg", output_height=1, output_width=1,
                 sampling_ratio=0, spatial_scale=1.0):
    """RoiAlign-10(T1 X, T1 rois, T2 batch_indices) -> T1 Y; without the half-pixel shift."""
    return _roi_align(X, rois, batch_indices, coordinate_transformation_mode="output_half_pixel",
                      mode=mode, output_height=output_height, output_width=output_width,
                      sampling_ratio=sampling_ratio, spatial_scale=spatial_scale)


@onnx("RoiAlign", since=16)
def roi_align(X, rois, batch_indices, *, coordinate_transformation_mode="half_pixel", mode="avg",
              output_height=1, output_width=1, sampling_ratio=0, spatial_scale=1.0):
    """RoiAlign(T1 X, T1 rois, T2 batch_indices) -> T1 Y; coordinate_transformation_mode,
    mode, output_height, output_width, sampling_ratio, spatial_scale."""
    return _roi_align(X, rois, batch_indices,
                      coordinate_transformation_mode=coordinate_transformation_mode,
                      mode=mode, output_height=output_height, output_width=output_width,
                      sampling_ratio=sampling_ratio, spatial_scale=spatial_scale)
