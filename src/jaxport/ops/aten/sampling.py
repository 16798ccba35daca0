"""ATen lowerings: upsampling (nearest, nearest-exact, linear, bilinear, trilinear, bicubic) and grid sampling.

Upsampling is separable: each spatial dim gets static source indices and
weights, worked out with NumPy in the precision PyTorch uses (float32 for
float32 and reduced-precision inputs), and is applied with a gather and a
weighted sum. Grid sampling computes its coordinates from tensor values, so
it gathers the corner taps with dynamic indices.

uint8 bilinear/bicubic (plain and antialiased) follow PyTorch's PIL-style CPU
kernel instead: one pass per resized dim (width first), each pass rounding to
uint8, with float64 weights quantized to int16 fixed point and summed in int32.
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np

from ..registry import aten
from ._promotion import opmath_type

_CUBIC_A = -0.75


def _index_dtype(dtype):
    return np.float64 if np.dtype(dtype) == np.float64 else np.float32


def _out_sizes(input, nd, output_size, scale_factors):
    """(output sizes, per-dim scale factors or None) for the .vec overloads."""
    sizes = input.shape[-nd:]
    if output_size is not None:
        return list(output_size), [None] * nd if scale_factors is None else list(scale_factors)
    scales = list(scale_factors)
    if len(scales) == 1:
        scales = scales * nd
    return [int(math.floor(n * s)) for n, s in zip(sizes, scales)], scales


def _scale(in_size, out_size, align_corners, scale, ftype):
    """PyTorch's area_pixel_compute_scale."""
    if align_corners:
        return ftype((in_size - 1) / (out_size - 1)) if out_size > 1 else ftype(0)
    if scale is not None and scale > 0:
        return ftype(1.0 / scale)
    return ftype(in_size) / ftype(out_size)


def _source(scale, dst, align_corners, cubic, ftype):
    """PyTorch's area_pixel_compute_source_index, elementwise over `dst`.

    PyTorch's CPU build contracts `scale * (dst + 0.5) - 0.5` into one fused multiply-add, so
    for float32 the product and difference are taken in float64 (both exact there) and rounded
    once; a separately rounded product moves some indices by an ulp, and the output by an ulp of
    the index times the difference between neighbouring pixels.
    """
    dst = dst.astype(ftype)
    if align_corners:
        return scale * dst
    if ftype == np.float32:
        src = (np.float64(scale) * (dst + ftype(0.5)) - 0.5).astype(ftype)
    else:
        src = scale * (dst + ftype(0.5)) - ftype(0.5)
    return src if cubic else np.maximum(src, ftype(0))


def _nearest_taps(in_size, out_size, scale, exact, ftype):
    dst = np.arange(out_size)
    if scale is not None and scale > 0:
        s = ftype(1.0 / scale)
    else:
        s = ftype(in_size) / ftype(out_size)
    if exact:
        src = np.floor((dst.astype(ftype) + ftype(0.5)) * s)
    elif out_size == in_size:
        src = dst
    elif out_size == 2 * in_size:
        src = dst >> 1
    else:
        src = np.floor(dst.astype(ftype) * s)
    return np.minimum(src.astype(np.int64), in_size - 1)[:, None], None


def _linear_taps(in_size, out_size, align_corners, scale, ftype):
    dst = np.arange(out_size)
    if out_size == in_size:
        return np.stack([dst, dst], 1), np.stack(
            [np.ones(out_size, ftype), np.zeros(out_size, ftype)], 1
        )
    s = _scale(in_size, out_size, align_corners, scale, ftype)
    src = _source(s, dst, align_corners, False, ftype)
    i0 = src.astype(np.int64)
    i1 = i0 + (i0 < in_size - 1)
    l1 = np.clip(src - i0.astype(ftype), ftype(0), ftype(1)).astype(ftype)
    return np.stack([i0, i1], 1), np.stack([ftype(1) - l1, l1], 1)


def _antialiased_taps(in_size, out_size, align_corners, scale, ftype, interp_size, filt):
    """PyTorch's antialiased (PIL-style) taps for a filter spanning `interp_size` pixels: when
    downsampling, the filter widens to cover every source pixel under the output pixel, and each
    row of weights is normalized by its sum. Rows are padded with zero weights."""
    s = _scale(in_size, out_size, align_corners, scale, ftype)
    half = ftype(interp_size * 0.5)
    support = half * s if s >= 1 else half
    inverse = ftype(1) / s if s >= 1 else ftype(1)
    taps = int(math.ceil(support)) * 2 + 1
    idx = np.zeros((out_size, taps), np.int64)
    weights = np.zeros((out_size, taps), ftype)
    for i in range(out_size):
        center = s * ftype(i + 0.5)
        lo = max(int(center - support + ftype(0.5)), 0)
        hi = min(int(center + support + ftype(0.5)), in_size)
        j = np.arange(hi - lo)
        w = filt(((j + lo - center + ftype(0.5)) * inverse).astype(ftype)).astype(ftype)
        total = w.sum(dtype=ftype)
        idx[i, : hi - lo] = j + lo
        weights[i, : hi - lo] = w / total if total != 0 else w
    return idx, weights


def _cubic_weights(t, ftype):
    a = ftype(_CUBIC_A)

    def near(x):
        return ((a + 2) * x - (a + 3)) * x * x + 1

    def far(x):
        return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a

    return [far(t + 1), near(t), near(1 - t), far(2 - t)]


def _cubic_taps(in_size, out_size, align_corners, scale, ftype):
    dst = np.arange(out_size)
    s = _scale(in_size, out_size, align_corners, scale, ftype)
    src = _source(s, dst, align_corners, True, ftype)
    base = np.floor(src)
    t = (src - base).astype(ftype)
    idx = np.stack([np.clip(base.astype(np.int64) - 1 + k, 0, in_size - 1) for k in range(4)], 1)
    return idx, np.stack(_cubic_weights(t, ftype), 1).astype(ftype)


# -- uint8: PyTorch's fixed-point separable kernel ---------------------------------------------
# PyTorch resizes uint8 images like PIL (UpSampleKernel.cpp's separable_upsample_generic_Nd_kernel_impl
# and its AVX2 twin): weights in float64, quantized to int16, one uint8-rounded pass per dim. Rounding
# between passes and the quantized weights both show in the result, so both are reproduced here.

_FIXED_POINT_MAX_PRECISION = 22


def _linear_filter(x):
    """PIL's triangle filter."""
    x = np.abs(x)
    return np.where(x < 1, 1 - x, 0.0)


def _cubic_filter(x, a):
    """Keys' cubic convolution filter with parameter `a` (PIL's bicubic is a=-0.5)."""
    x = np.abs(x)
    near = ((a + 2) * x - (a + 3)) * x * x + 1
    far = ((a * x - 5 * a) * x + 8 * a) * x - 4 * a
    return np.where(x < 1, near, np.where(x < 2, far, 0.0))


def _aa_window_weights(in_size, out_size, scale, interp_size, filt):
    """(first source index[out], float64 weights[out, taps], largest weight) for antialiased resizing.

    PyTorch's _compute_indices_min_size_weights_aa: the filter is stretched by the scale when
    downsampling so that every source pixel under an output pixel contributes, and each row of
    weights is normalized by its own total, summed left to right as the C++ loop does.
    """
    support = interp_size * 0.5 * scale if scale >= 1 else interp_size * 0.5
    taps = int(math.ceil(support)) * 2 + 1
    invscale = 1.0 / scale if scale >= 1 else 1.0
    center = scale * (np.arange(out_size) + 0.5)
    # C++ casts to int64, which truncates toward zero.
    first = np.maximum(np.trunc(center - support + 0.5).astype(np.int64), 0)
    last = np.minimum(np.trunc(center + support + 0.5).astype(np.int64), in_size)
    size = np.clip(last - first, 0, taps)
    j = np.arange(taps)
    w = filt(((j + first[:, None]) - center[:, None] + 0.5) * invscale)
    w = np.where(j < size[:, None], w, 0.0)
    total = np.zeros(out_size)
    for k in range(taps):
        total = total + w[:, k]
    nonzero = total != 0
    w = np.where(nonzero[:, None], w / np.where(nonzero, total, 1.0)[:, None], w)
    return first, w, float(w[nonzero].max(initial=0.0))


def _plain_window_weights(in_size, out_size, align_corners, scale, interp_size, filt):
    """(first source index[out], float64 weights[out, taps], largest weight) without antialiasing.

    PyTorch's _compute_indices_min_size_weights: the usual source index and fraction, then the taps
    that fall outside the image are folded onto the edge pixel instead of clamping their indices.
    The "largest weight" is the largest partial sum seen while folding, as PyTorch tracks it.
    """
    support = interp_size // 2
    src = _source(scale, np.arange(out_size), align_corners, interp_size > 2, np.float64)
    # PyTorch floors with floorf, i.e. after rounding the float64 index to float32.
    index = np.minimum(np.floor(src.astype(np.float32)).astype(np.int64), in_size - 1)
    frac = np.clip(src - index, 0.0, 1.0)
    unbound = index - support + 1
    first = np.maximum(unbound, 0)
    size = np.clip(np.minimum(index + support + 1, in_size) - first, 0, interp_size)
    raw = filt((np.arange(interp_size) + 1 - support) - frac[:, None])
    weights = np.zeros((out_size, interp_size))
    rows = np.arange(out_size)
    slot = np.zeros(out_size, np.int64)
    largest = 0.0
    for j in range(interp_size):
        tap = unbound + j
        slot = np.where(tap <= 0, 0, np.where(tap >= in_size - 1, size - 1, slot))
        weights[rows, slot] += raw[:, j]
        largest = max(largest, float(weights[rows, slot].max()))
        slot = slot + 1
    return first, weights, largest


def _quantize_weights(weights, largest):
    """(int32 weights, precision): PyTorch's int16 fixed-point weights.

    The precision is the most fractional bits that keep twice the largest weight below 2**15;
    each weight is then rounded half away from zero.
    """
    precision = 0
    while (
        precision < _FIXED_POINT_MAX_PRECISION
        and int(0.5 + largest * (1 << (precision + 1))) < (1 << 15)
    ):
        precision += 1
    scaled = weights * (1 << precision)
    fixed = np.where(scaled < 0, np.trunc(scaled - 0.5), np.trunc(scaled + 0.5))
    return fixed.astype(np.int32), precision


def _fixed_point_pass(x, axis, first, weights, precision):
    """One uint8 resampling pass along `axis`: int32 accumulate, round, shift, clamp to uint8."""
    taps = weights.shape[1]
    idx = np.minimum(first[:, None] + np.arange(taps), x.shape[axis] - 1)
    g = jnp.take(x, jnp.asarray(idx.reshape(-1)), axis=axis)
    g = g.reshape(x.shape[:axis] + idx.shape + x.shape[axis + 1 :]).astype(jnp.int32)
    shape = [1] * g.ndim
    shape[axis], shape[axis + 1] = weights.shape
    acc = jnp.sum(g * jnp.asarray(weights.reshape(shape)), axis=axis + 1) + (1 << (precision - 1))
    return jnp.clip(acc >> precision, 0, 255).astype(jnp.uint8)


def _resample_uint8(input, output_size, align_corners, scales, cubic, antialias):
    """PyTorch's uint8 bilinear/bicubic resize of the last two dims, width pass first.

    A dim whose size does not change is skipped, as PyTorch skips it (even when a scale factor
    that is not 1 was given). Bicubic uses a=-0.5 (PIL) when antialiased, else a=-0.75.
    """
    interp_size = 4 if cubic else 2
    a = -0.5 if antialias else _CUBIC_A
    filt = (lambda t: _cubic_filter(t, a)) if cubic else _linear_filter
    x = input
    for i in (1, 0):
        axis = input.ndim - 2 + i
        in_size, out_size = input.shape[axis], output_size[i]
        if in_size == out_size:
            continue
        scale = _scale(in_size, out_size, align_corners, scales[i], np.float64)
        if antialias:
            first, w, largest = _aa_window_weights(in_size, out_size, scale, interp_size, filt)
        else:
            first, w, largest = _plain_window_weights(
                in_size, out_size, align_corners, scale, interp_size, filt
            )
        fixed, precision = _quantize_weights(w, largest)
        x = _fixed_point_pass(x, axis, first, fixed, precision)
    return x


def _resample(input, nd, taps_for_dim):
    """Apply per-dim (indices[out, taps], weights[out, taps] or None) along the last `nd` dims."""
    x = input
    integral = not jnp.issubdtype(input.dtype, jnp.floating)
    compute = np.dtype(np.float32) if integral else opmath_type(input.dtype)
    weighted = False
    for i in range(nd):
        axis = input.ndim - nd + i
        idx, w = taps_for_dim(i)
        if w is None:
            x = jnp.take(x, jnp.asarray(idx[:, 0]), axis=axis)
            continue
        if not weighted:
            x, weighted = x.astype(compute), True
        g = jnp.take(x, jnp.asarray(idx.reshape(-1)), axis=axis)
        g = g.reshape(x.shape[:axis] + idx.shape + x.shape[axis + 1 :])
        shape = [1] * g.ndim
        shape[axis], shape[axis + 1] = w.shape
        x = jnp.sum(g * jnp.asarray(w.reshape(shape), compute), axis=axis + 1)
    if not weighted:
        return x
    if integral:
        info = jnp.iinfo(input.dtype)
        x = jnp.clip(jnp.round(x), info.min, info.max)
    return x.astype(input.dtype)


def _upsample_nearest(input, nd, output_size, scales, exact):
    ftype = _index_dtype(input.dtype)
    sizes = input.shape[-nd:]
    return _resample(
        input, nd, lambda i: _nearest_taps(sizes[i], output_size[i], scales[i], exact, ftype)
    )


def _upsample_interp(input, nd, output_size, align_corners, scales, cubic):
    if nd == 2 and input.dtype == jnp.uint8:
        return _resample_uint8(input, output_size, align_corners, scales, cubic, False)
    ftype = _index_dtype(input.dtype)
    sizes = input.shape[-nd:]
    taps = _cubic_taps if cubic else _linear_taps
    return _resample(
        input, nd, lambda i: taps(sizes[i], output_size[i], align_corners, scales[i], ftype)
    )


def _nearest_vec(input, nd, output_size, scale_factors, exact):
    sizes, scales = _out_sizes(input, nd, output_size, scale_factors)
    return _upsample_nearest(input, nd, sizes, scales, exact)


def _interp_vec(input, nd, output_size, align_corners, scale_factors, cubic):
    sizes, scales = _out_sizes(input, nd, output_size, scale_factors)
    return _upsample_interp(input, nd, sizes, align_corners, scales, cubic)


# -- grid sampling ---------------------------------------------------------------------------------


def _unnormalize(coord, size, align_corners):
    """PyTorch's vectorized grid_sampler unnormalize: (coord + 1) times a per-size constant."""
    if align_corners:
        return (coord + 1) * ((size - 1) / 2)
    return (coord + 1) * (size / 2) - 0.5


def _reflect(coord, twice_low, twice_high):
    if twice_low == twice_high:
        return jnp.zeros_like(coord)
    low = twice_low / 2
    span = (twice_high - twice_low) / 2
    coord = jnp.abs(coord - low)
    extra = jnp.fmod(coord, span)
    # Not floor(coord / span): XLA may divide by the constant span as a multiplication by its
    # reciprocal, and 22 * (1/22) floors to 0. coord - extra is a whole number of spans.
    flips = jnp.round((coord - extra) / span)
    return jnp.where(jnp.fmod(flips, 2) == 0, extra + low, span - extra + low)


def _pad_coord(coord, size, padding_mode, align_corners):
    """Border clamps, reflection reflects then clamps (PyTorch's compute_coordinates)."""
    if padding_mode == 1:
        return jnp.clip(coord, 0, size - 1)
    if padding_mode == 2:
        if align_corners:
            coord = _reflect(coord, 0, 2 * (size - 1))
        else:
            coord = _reflect(coord, -1, 2 * size - 1)
        return jnp.clip(coord, 0, size - 1)
    return coord


def _gather_taps(x, coords, sizes):
    """x[N, C, *sizes] at integer coords (list per dim of [N, *out]); zero where out of bounds."""
    n, c = x.shape[:2]
    valid = None
    flat = 0
    for co, size in zip(coords, sizes):
        ok = (co >= 0) & (co < size)
        valid = ok if valid is None else valid & ok
        flat = flat * size + jnp.clip(co, 0, size - 1)
    out_shape = flat.shape[1:]
    vals = jnp.take_along_axis(
        x.reshape(n, c, -1), flat.reshape(n, 1, -1).astype(jnp.int64), axis=2
    )
    vals = vals.reshape((n, c) + out_shape)
    return jnp.where(valid[:, None], vals, jnp.zeros((), vals.dtype))


def _grid_sample(input, grid, interpolation_mode, padding_mode, align_corners):
    # PyTorch's CPU kernel computes half-precision coordinates, weights and sums in half, rounding
    # every step; XLA fuses those steps and rounds differently, so matching PyTorch bit for bit is
    # out of reach. Computing in float32 instead lands closer to the exact result than PyTorch does.
    compute = np.dtype(_index_dtype(input.dtype))
    x, grid = input.astype(compute), grid.astype(compute)
    nd = input.ndim - 2
    sizes = input.shape[2:]
    # grid's last dim is (x, y[, z]): reversed relative to the spatial dims (…, H, W).
    raw = [_unnormalize(grid[..., nd - 1 - i], sizes[i], align_corners) for i in range(nd)]
    if interpolation_mode == 2:  # bicubic (2-D only)
        base = [jnp.floor(r) for r in raw]
        weights = [_cubic_weights(r - b, compute.type) for r, b in zip(raw, base)]
        out = 0
        for ky in range(4):
            for kx in range(4):
                cy = _pad_coord(base[0] - 1 + ky, sizes[0], padding_mode, align_corners)
                cx = _pad_coord(base[1] - 1 + kx, sizes[1], padding_mode, align_corners)
                # Reflected taps are rounded back to a pixel index before the bounds check.
                ty, tx = jnp.floor(cy).astype(jnp.int64), jnp.floor(cx).astype(jnp.int64)
                vals = _gather_taps(x, [ty, tx], sizes)
                out = out + vals * (weights[0][ky] * weights[1][kx])[:, None]
        return out.astype(input.dtype)
    coords = [_pad_coord(r, s, padding_mode, align_corners) for r, s in zip(raw, sizes)]
    if interpolation_mode == 1:  # nearest: round half to even
        idx = [jnp.round(co).astype(jnp.int64) for co in coords]
        return _gather_taps(x, idx, sizes).astype(input.dtype)
    lows = [jnp.floor(co) for co in coords]
    fracs = [co - lo for co, lo in zip(coords, lows)]
    out = 0
    for corner in np.ndindex(*([2] * nd)):
        idx = [(lo + k).astype(jnp.int64) for lo, k in zip(lows, corner)]
        w = 1
        for f, k in zip(fracs, corner):
            w = w * (f if k else 1 - f)
        out = out + _gather_taps(x, idx, sizes) * w[:, None]
    return out.astype(input.dtype)


def _antialiased(input, output_size, align_corners, scales, cubic):
    """PyTorch's antialiased bilinear or bicubic resize of the last two dims (bicubic with PIL's
    a=-0.5)."""
    if input.dtype == jnp.uint8:
        return _resample_uint8(input, output_size, align_corners, scales, cubic, True)
    ftype = _index_dtype(input.dtype)
    interp_size, filt = (4, lambda t: _cubic_filter(t, -0.5)) if cubic else (2, _linear_filter)
    sizes = input.shape[-2:]
    return _resample(
        input, 2,
        lambda i: _antialiased_taps(sizes[i], output_size[i], align_corners, scales[i], ftype,
                                    interp_size, filt),
    )


@aten("_upsample_bicubic2d_aa.default")
def aten__upsample_bicubic2d_aa(self, output_size, align_corners, scales_h=None, scales_w=None):
    """_upsample_bicubic2d_aa(Tensor self, SymInt[2] output_size, bool align_corners, float? scales_h=None, float? scales_w=None) -> Tensor"""
    return _antialiased(self, list(output_size), align_corners, (scales_h, scales_w), True)


@aten("_upsample_bicubic2d_aa.vec")
def aten__upsample_bicubic2d_aa_vec(input, output_size, align_corners, scale_factors):
    """_upsample_bicubic2d_aa.vec(Tensor input, SymInt[]? output_size, bool align_corners, float[]? scale_factors) -> Tensor"""
    sizes, scales = _out_sizes(input, 2, output_size, scale_factors)
    return _antialiased(input, sizes, align_corners, scales, True)


@aten("_upsample_bilinear2d_aa.default")
def aten__upsample_bilinear2d_aa(self, output_size, align_corners, scales_h=None, scales_w=None):
    """_upsample_bilinear2d_aa(Tensor self, SymInt[2] output_size, bool align_corners, float? scales_h=None, float? scales_w=None) -> Tensor"""
    return _antialiased(self, list(output_size), align_corners, (scales_h, scales_w), False)


@aten("_upsample_bilinear2d_aa.vec")
def aten__upsample_bilinear2d_aa_vec(input, output_size, align_corners, scale_factors):
    """_upsample_bilinear2d_aa.vec(Tensor input, SymInt[]? output_size, bool align_corners, float[]? scale_factors) -> Tensor"""
    sizes, scales = _out_sizes(input, 2, output_size, scale_factors)
    return _antialiased(input, sizes, align_corners, scales, False)


@aten("_upsample_nearest_exact1d.default")
def aten__upsample_nearest_exact1d(self, output_size, scales=None):
    """_upsample_nearest_exact1d(Tensor self, SymInt[1] output_size, float? scales=None) -> Tensor"""
    return _upsample_nearest(self, 1, list(output_size), [scales], True)


@aten("_upsample_nearest_exact1d.vec")
def aten__upsample_nearest_exact1d_vec(input, output_size, scale_factors):
    """_upsample_nearest_exact1d.vec(Tensor input, SymInt[]? output_size, float[]? scale_factors) -> Tensor"""
    return _nearest_vec(input, 1, output_size, scale_factors, True)


@aten("_upsample_nearest_exact2d.default")
def aten__upsample_nearest_exact2d(self, output_size, scales_h=None, scales_w=None):
    """_upsample_nearest_exact2d(Tensor self, SymInt[2] output_size, float? scales_h=None, float? scales_w=None) -> Tensor"""
    return _upsample_nearest(self, 2, list(output_size), [scales_h, scales_w], True)


@aten("_upsample_nearest_exact2d.vec")
def aten__upsample_nearest_exact2d_vec(input, output_size, scale_factors):
    """_upsample_nearest_exact2d.vec(Tensor input, SymInt[]? output_size, float[]? scale_factors) -> Tensor"""
    return _nearest_vec(input, 2, output_size, scale_factors, True)


@aten("_upsample_nearest_exact3d.default")
def aten__upsample_nearest_exact3d(self, output_size, scales_d=None, scales_h=None, scales_w=None):
    """_upsample_nearest_exact3d(Tensor self, SymInt[3] output_size, float? scales_d=None, float? scales_h=None, float? scales_w=None) -> Tensor"""
    return _upsample_nearest(self, 3, list(output_size), [scales_d, scales_h, scales_w], True)


@aten("_upsample_nearest_exact3d.vec")
def aten__upsample_nearest_exact3d_vec(input, output_size, scale_factors):
    """_upsample_nearest_exact3d.vec(Tensor input, SymInt[]? output_size, float[]? scale_factors) -> Tensor"""
    return _nearest_vec(input, 3, output_size, scale_factors, True)


@aten("grid_sampler.default")
def aten_grid_sampler(input, grid, interpolation_mode, padding_mode, align_corners):
    """grid_sampler(Tensor input, Tensor grid, int interpolation_mode, int padding_mode, bool align_corners) -> Tensor"""
    return _grid_sample(input, grid, interpolation_mode, padding_mode, align_corners)


@aten("grid_sampler_2d.default")
def aten_grid_sampler_2d(input, grid, interpolation_mode, padding_mode, align_corners):
    """grid_sampler_2d(Tensor input, Tensor grid, int interpolation_mode, int padding_mode, bool align_corners) -> Tensor"""
    return _grid_sample(input, grid, interpolation_mode, padding_mode, align_corners)


@aten("grid_sampler_3d.default")
def aten_grid_sampler_3d(input, grid, interpolation_mode, padding_mode, align_corners):
    """grid_sampler_3d(Tensor input, Tensor grid, int interpolation_mode, int padding_mode, bool align_corners) -> Tensor"""
    return _grid_sample(input, grid, interpolation_mode, padding_mode, align_corners)


@aten("upsample_bicubic2d.default")
def aten_upsample_bicubic2d(self, output_size, align_corners, scales_h=None, scales_w=None):
    """upsample_bicubic2d(Tensor self, SymInt[2] output_size, bool align_corners, float? scales_h=None, float? scales_w=None) -> Tensor"""
    return _upsample_interp(self, 2, list(output_size), align_corners, [scales_h, scales_w], True)


@aten("upsample_bicubic2d.vec")
def aten_upsample_bicubic2d_vec(input, output_size, align_corners, scale_factors):
    """upsample_bicubic2d.vec(Tensor input, SymInt[]? output_size, bool align_corners, float[]? scale_factors) -> Tensor"""
    return _interp_vec(input, 2, output_size, align_corners, scale_factors, True)


@aten("upsample_bilinear2d.default")
def aten_upsample_bilinear2d(self, output_size, align_corners, scales_h=None, scales_w=None):
    """upsample_bilinear2d(Tensor self, SymInt[2] output_size, bool align_corners, float? scales_h=None, float? scales_w=None) -> Tensor"""
    return _upsample_interp(self, 2, list(output_size), align_corners, [scales_h, scales_w], False)


@aten("upsample_bilinear2d.vec")
def aten_upsample_bilinear2d_vec(input, output_size, align_corners, scale_factors):
    """upsample_bilinear2d.vec(Tensor input, SymInt[]? output_size, bool align_corners, float[]? scale_factors) -> Tensor"""
    return _interp_vec(input, 2, output_size, align_corners, scale_factors, False)


@aten("upsample_linear1d.default")
def aten_upsample_linear1d(self, output_size, align_corners, scales=None):
    """upsample_linear1d(Tensor self, SymInt[1] output_size, bool align_corners, float? scales=None) -> Tensor"""
    return _upsample_interp(self, 1, list(output_size), align_corners, [scales], False)


@aten("upsample_linear1d.vec")
def aten_upsample_linear1d_vec(input, output_size, align_corners, scale_factors):
    """upsample_linear1d.vec(Tensor input, SymInt[]? output_size, bool align_corners, float[]? scale_factors) -> Tensor"""
    return _interp_vec(input, 1, output_size, align_corners, scale_factors, False)


@aten("upsample_nearest1d.default")
def aten_upsample_nearest1d(self, output_size, scales=None):
    """upsample_nearest1d(Tensor self, SymInt[1] output_size, float? scales=None) -> Tensor"""
    return _upsample_nearest(self, 1, list(output_size), [scales], False)


@aten("upsample_nearest1d.vec")
def aten_upsample_nearest1d_vec(input, output_size, scale_factors):
    """upsample_nearest1d.vec(Tensor input, SymInt[]? output_size, float[]? scale_factors) -> Tensor"""
    return _nearest_vec(input, 1, output_size, scale_factors, False)


@aten("upsample_nearest2d.default")
def aten_upsample_nearest2d(self, output_size, scales_h=None, scales_w=None):
    """upsample_nearest2d(Tensor self, SymInt[2] output_size, float? scales_h=None, float? scales_w=None) -> Tensor"""
    return _upsample_nearest(self, 2, list(output_size), [scales_h, scales_w], False)


@aten("upsample_nearest2d.vec")
def aten_upsample_nearest2d_vec(input, output_size, scale_factors):
    """upsample_nearest2d.vec(Tensor input, SymInt[]? output_size, float[]? scale_factors) -> Tensor"""
    return _nearest_vec(input, 2, output_size, scale_factors, False)


@aten("upsample_nearest3d.default")
def aten_upsample_nearest3d(self, output_size, scales_d=None, scales_h=None, scales_w=None):
    """upsample_nearest3d(Tensor self, SymInt[3] output_size, float? scales_d=None, float? scales_h=None, float? scales_w=None) -> Tensor"""
    return _upsample_nearest(self, 3, list(output_size), [scales_d, scales_h, scales_w], False)


@aten("upsample_nearest3d.vec")
def aten_upsample_nearest3d_vec(input, output_size, scale_factors):
    """upsample_nearest3d.vec(Tensor input, SymInt[]? output_size, float[]? scale_factors) -> Tensor"""
    return _nearest_vec(input, 3, output_size, scale_factors, False)


@aten("upsample_trilinear3d.default")
def aten_upsample_trilinear3d(
    self, output_size, align_corners, scales_d=None, scales_h=None, scales_w=None
):
    """upsample_trilinear3d(Tensor self, SymInt[3] output_size, bool align_corners, float? scales_d=None, float? scales_h=None, float? scales_w=None) -> Tensor"""
    return _upsample_interp(
        self, 3, list(output_size), align_corners, [scales_d, scales_h, scales_w], False
    )


@aten("upsample_trilinear3d.vec")
def aten_upsample_trilinear3d_vec(input, output_size, align_corners, scale_factors):
    """upsample_trilinear3d.vec(Tensor input, SymInt[]? output_size, bool align_corners, float[]? scale_factors) -> Tensor"""
    return _interp_vec(input, 3, output_size, align_corners, scale_factors, False)
