"""ONNX resampling: Resize, Upsample, GridSample, AffineGrid, Col2Im.

Resize is separable: each resized axis is one gather of a few taps per output position and
a weighted sum. The taps and weights depend only on shapes and the static scales/sizes/roi,
so they are computed in NumPy (float64) and enter the program as constants.
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np

from ..registry import onnx
from ._helpers import normalize_axis, static_array, static_ints


@onnx("AffineGrid", since=20, static=(1,))
def affine_grid(theta, size, *, align_corners=0):
    """AffineGrid(T1 theta, int64 size) -> T1 grid; align_corners."""
    spatial = static_ints(size, "AffineGrid size")[2:]
    axes = []
    for n in spatial:
        if align_corners:
            a = np.array([-1.0]) if n == 1 else np.linspace(-1.0, 1.0, n)
        else:
            a = (2.0 * np.arange(n) + 1.0) / n - 1.0
        axes.append(a)
    # Homogeneous base coordinates, innermost spatial dim first (x, y[, z], 1).
    mesh = np.meshgrid(*axes, indexing="ij")
    base = np.stack([*mesh[::-1], np.ones(tuple(spatial))], axis=-1).reshape(-1, len(spatial) + 1)
    grid = jnp.einsum("pk,njk->npj", jnp.asarray(base, theta.dtype), theta)
    return grid.reshape((theta.shape[0], *spatial, len(spatial)))


@onnx("Col2Im", since=18, static=(1, 2))
def col2im(input, image_shape, block_shape, *, dilations=None, pads=None, strides=None):
    """Col2Im(T input, int64 image_shape, int64 block_shape) -> T; dilations, pads, strides."""
    image = static_ints(image_shape, "Col2Im image_shape")
    block = static_ints(block_shape, "Col2Im block_shape")
    k = len(image)
    dilations = tuple(dilations or (1,) * k)
    strides = tuple(strides or (1,) * k)
    pads = tuple(pads or (0,) * (2 * k))
    padded = [image[i] + pads[i] + pads[i + k] for i in range(k)]
    counts = [(padded[i] - dilations[i] * (block[i] - 1) - 1) // strides[i] + 1 for i in range(k)]
    # Position in the padded image of every (block offset, sliding block) pair, flattened.
    offsets = np.indices(block).reshape(k, -1)
    starts = np.indices(counts).reshape(k, -1)
    pos = (starts[:, None, :] * np.array(strides)[:, None, None]
           + offsets[:, :, None] * np.array(dilations)[:, None, None])
    flat = np.ravel_multi_index(tuple(pos), padded)
    n, cols, length = input.shape
    bsize = int(np.prod(block))
    x = input.reshape(n, cols // bsize, bsize * length)
    out = jnp.zeros((n, cols // bsize, int(np.prod(padded))), input.dtype)
    out = out.at[:, :, flat.reshape(-1)].add(x)
    out = out.reshape((n, cols // bsize, *padded))
    crop = tuple(slice(pads[i], pads[i] + image[i]) for i in range(k))
    return out[(slice(None), slice(None), *crop)]


def _compute_dtype(dtype):
    """Interpolation arithmetic: float64 for float64 data, float32 for the rest (half
    precision and integer data are weighted in float32 and rounded back once)."""
    return jnp.float64 if dtype == jnp.float64 else jnp.float32


def _reflect(x, lo: float, hi: float):
    """Fold coordinates outside [lo, hi] back in by mirroring at the borders, repeatedly."""
    span = hi - lo
    if span <= 0:
        return jnp.full_like(x, lo)
    below = x < lo
    d = jnp.where(below, lo - x, x - hi)
    flips = jnp.floor(d / span)
    r = d - flips * span
    even = jnp.mod(flips, 2) == 0
    inside_from_below = jnp.where(even, lo + r, hi - r)
    inside_from_above = jnp.where(even, hi - r, lo + r)
    out = jnp.where(below, inside_from_below, inside_from_above)
    return jnp.where((x < lo) | (x > hi), out, x)


def _cubic_kernel(d, a: float):
    d = np.abs(d) if isinstance(d, np.ndarray) else jnp.abs(d)
    d2, d3 = d * d, d * d * d
    near = (a + 2) * d3 - (a + 3) * d2 + 1
    far = a * d3 - 5 * a * d2 + 8 * a * d - 4 * a
    where = np.where if isinstance(d, np.ndarray) else jnp.where
    return where(d <= 1, near, where(d < 2, far, 0.0))


@onnx("GridSample", since=16)
@onnx("GridSample", since=20)
def grid_sample(X, grid, *, align_corners=0, mode="linear", padding_mode="zeros"):
    """GridSample(T1 X, T2 grid) -> T1 Y; align_corners, mode, padding_mode."""
    mode = {"bilinear": "linear", "bicubic": "cubic"}.get(mode, mode)
    n, c, *dims = X.shape
    k = len(dims)
    out_spatial = grid.shape[1:-1]
    ctype = _compute_dtype(grid.dtype)
    g = grid.astype(ctype).reshape(n, -1, k)
    taps, weights = [], []
    for i, size in enumerate(dims):
        v = g[..., k - 1 - i]
        x = (v + 1) / 2 * (size - 1) if align_corners else ((v + 1) * size - 1) / 2
        lo, hi = (0.0, size - 1.0) if align_corners else (-0.5, size - 0.5)
        if mode == "nearest":
            x = jnp.round(x)
        # Cubic leaves the coordinate alone and clamps only its taps, as PyTorch and
        # onnxruntime do (ONNX's reference clamps both; the cases do not cover it).
        if padding_mode == "border" and mode != "cubic":
            x = jnp.where((x < lo) | (x > hi), jnp.clip(x, 0, size - 1), x)
        elif padding_mode == "reflection":
            x = _reflect(x, lo, hi)
        if mode == "nearest":
            idx, w = [jnp.trunc(x).astype(jnp.int32)], [jnp.ones_like(x)]
        else:
            base = jnp.floor(x)
            t = x - base
            base = base.astype(jnp.int32)
            if mode == "linear":
                idx, w = [base, base + 1], [1 - t, t]
            elif mode == "cubic":
                idx = [base + j for j in (-1, 0, 1, 2)]
                w = [_cubic_kernel(t - j, -0.75) for j in (-1, 0, 1, 2)]
            else:
                raise ValueError(f"GridSample mode '{mode}' is not nearest, linear or cubic")
        fixed = []
        for j, wj in zip(idx, w):
            if padding_mode == "zeros":
                wj = jnp.where((j >= 0) & (j < size), wj, 0)
            elif padding_mode == "reflection":
                j = jnp.trunc(_reflect(j.astype(ctype), lo, hi)).astype(jnp.int32)
            fixed.append((jnp.clip(j, 0, size - 1), wj))
        taps.append([f[0] for f in fixed])
        weights.append([f[1] for f in fixed])
    strides = [int(np.prod(dims[i + 1:])) for i in range(k)]
    flat_x = X.reshape(n, c, -1)
    wtype = _compute_dtype(X.dtype)
    acc = None
    for combo in np.ndindex(*[len(t) for t in taps]):
        flat = sum(taps[i][combo[i]] * strides[i] for i in range(k))
        w = math.prod(weights[i][combo[i]] for i in range(k))
        vals = jnp.take_along_axis(flat_x, flat[:, None, :], axis=2)
        term = vals.astype(wtype) * w[:, None, :].astype(wtype)
        acc = term if acc is None else acc + term
    if not jnp.issubdtype(X.dtype, jnp.floating):
        acc = jnp.round(acc)
    return acc.astype(X.dtype).reshape((n, c, *out_spatial))


def _source_coords(mode, out_size, in_size, scale, roi_lo, roi_hi):
    """Where output positions 0..out_size-1 sample the input along one axis (float64)."""
    y = np.arange(out_size, dtype=np.float64)
    length = scale * in_size  # the fractional output length the scale implies
    if mode == "align_corners":
        return np.zeros(out_size) if length == 1 else y * (in_size - 1) / (length - 1)
    if mode == "asymmetric":
        return y / scale
    if mode == "tf_crop_and_resize":
        if length == 1:
            x = np.full(out_size, (roi_hi - roi_lo) * (in_size - 1) / 2)
        else:
            x = y * (roi_hi - roi_lo) * (in_size - 1) / (length - 1)
        return x + roi_lo * (in_size - 1)
    if mode == "pytorch_half_pixel":
        return np.full(out_size, -0.5) if length == 1 else (y + 0.5) / scale - 0.5
    if mode == "half_pixel":
        return (y + 0.5) / scale - 0.5
    if mode == "half_pixel_symmetric":
        offset = in_size / 2 * (1 - out_size / length)
        return offset + (y + 0.5) / scale - 0.5
    if mode == "tf_half_pixel_for_nn":
        return (y + 0.5) / scale
    raise ValueError(f"Resize coordinate_transformation_mode '{mode}' is not supported")


def _nearest_index(x, rule: str, scale: float):
    base = np.floor(x)
    frac = x - base
    if rule == "round_prefer_floor":
        return np.where(frac <= 0.5, base, base + 1)
    if rule == "round_prefer_ceil":
        return np.where(frac < 0.5, base, base + 1)
    if rule == "floor":
        return base
    if rule == "ceil":
        return np.ceil(x)
    if rule == "simple":  # opset < 11 (onnxruntime): ceil when shrinking, else floor
        return np.ceil(x) if scale < 1 else base
    raise ValueError(f"Resize nearest_mode '{rule}' is not supported")


def _axis_taps(x, in_size, mode, scale, *, nearest_mode, cubic_coeff_a, exclude_outside, antialias):
    """(indices, weights), each (out, taps), that resample one axis at coordinates `x`."""
    if mode == "nearest":
        idx = _nearest_index(x, nearest_mode, scale)[:, None]
        return np.clip(idx, 0, in_size - 1).astype(np.int64), None
    if mode == "linear":
        support, kernel = 1.0, lambda d: np.clip(1 - np.abs(d), 0, 1)
    elif mode == "cubic":
        support, kernel = 2.0, lambda d: _cubic_kernel(d, cubic_coeff_a)
    else:
        raise ValueError(f"Resize mode '{mode}' is not nearest, linear or cubic")
    # Antialiasing stretches the kernel by 1/scale when shrinking.
    stretch = min(scale, 1.0) if antialias else 1.0
    start = math.floor(-support / stretch) + 1
    offsets = np.arange(start, 2 - start)
    idx = np.floor(x)[:, None] + offsets[None, :]
    w = kernel((idx - x[:, None]) * stretch)
    if antialias:
        w = w / w.sum(axis=1, keepdims=True)
    if exclude_outside:
        w = np.where((idx < 0) | (idx >= in_size), 0.0, w)
        total = w.sum(axis=1, keepdims=True)
        w = w / np.where(total == 0, 1.0, total)
    return np.clip(idx, 0, in_size - 1).astype(np.int64), w


def _resize(X, *, sizes, scales, roi, axes, mode, coordinate_transformation_mode,
            nearest_mode, cubic_coeff_a, exclude_outside, extrapolation_value, antialias,
            keep_aspect_ratio_policy):
    rank = X.ndim
    axes = list(range(rank)) if axes is None else [normalize_axis(a, rank) for a in axes]
    shape = X.shape
    if sizes is not None:
        scale_of = {a: sizes[i] / shape[a] for i, a in enumerate(axes)}
        out_of = {a: int(sizes[i]) for i, a in enumerate(axes)}
        if keep_aspect_ratio_policy in ("not_larger", "not_smaller"):
            pick = min if keep_aspect_ratio_policy == "not_larger" else max
            s = pick(scale_of.values())
            scale_of = {a: s for a in axes}
            out_of = {a: int(s * shape[a] + 0.5) for a in axes}
        elif keep_aspect_ratio_policy != "stretch":
            raise ValueError(f"Resize keep_aspect_ratio_policy '{keep_aspect_ratio_policy}'")
    else:
        scale_of = {a: float(scales[i]) for i, a in enumerate(axes)}
        out_of = {a: int(math.floor(scales[i] * shape[a])) for i, a in enumerate(axes)}
    roi_of = {}
    if roi is not None and len(roi) == 2 * len(axes):
        roi_of = {a: (float(roi[i]), float(roi[len(axes) + i])) for i, a in enumerate(axes)}
    ctype = X.dtype if mode == "nearest" else _compute_dtype(X.dtype)
    y = X if mode == "nearest" else X.astype(ctype)
    for a in axes:
        lo, hi = roi_of.get(a, (0.0, 1.0))
        scale, out = scale_of[a], out_of[a]
        if math.isclose(scale, 1.0) and out == y.shape[a] and math.isclose(lo, 0.0) \
                and math.isclose(hi, 1.0):
            continue
        x = _source_coords(coordinate_transformation_mode, out, y.shape[a], scale, lo, hi)
        idx, w = _axis_taps(x, y.shape[a], mode, scale, nearest_mode=nearest_mode,
                            cubic_coeff_a=cubic_coeff_a, exclude_outside=exclude_outside,
                            antialias=antialias)
        taken = jnp.take(y, jnp.asarray(idx.reshape(-1)), axis=a)
        taken = taken.reshape(y.shape[:a] + idx.shape + y.shape[a + 1:])
        if w is None:
            y = jnp.squeeze(taken, a + 1)
        else:
            wb = jnp.asarray(w.reshape(w.shape + (1,) * (rank - a - 1)), ctype)
            y = (taken * wb).sum(axis=a + 1)
        if coordinate_transformation_mode == "tf_crop_and_resize":
            outside = (x < 0) | (x > shape[a] - 1)
            if outside.any():
                mask = jnp.asarray(outside.reshape((out,) + (1,) * (rank - a - 1)))
                y = jnp.where(mask, jnp.asarray(extrapolation_value, y.dtype), y)
    if y.dtype == X.dtype:
        return y
    if jnp.issubdtype(X.dtype, jnp.integer):
        info = jnp.iinfo(X.dtype)
        y = jnp.clip(jnp.round(y), info.min, info.max)
    elif X.dtype == jnp.bool_:
        return y != 0
    return y.astype(X.dtype)


def _nonempty(value, what):
    """A static optional operand as NumPy, or None when absent or empty (opset 11's stand-in)."""
    if value is None:
        return None
    arr = static_array(value, what)
    return arr if arr.size else None


@onnx("Resize", since=10, static=(1,))
def resize_10(X, scales, *, mode="nearest"):
    """Resize(T X, float scales) -> T Y; mode. Asymmetric coordinates, as Upsample."""
    scales = static_array(scales, "Resize scales").astype(np.float64)
    return _resize(X, sizes=None, scales=scales, roi=None, axes=None, mode=mode,
                   coordinate_transformation_mode="asymmetric", nearest_mode="simple",
                   cubic_coeff_a=-0.75, exclude_outside=0, extrapolation_value=0.0,
                   antialias=0, keep_aspect_ratio_policy="stretch")


@onnx("Resize", since=11, static=(1, 2, 3))
def resize(X, roi=None, scales=None, sizes=None, *, antialias=0, axes=None,
           coordinate_transformation_mode="half_pixel", cubic_coeff_a=-0.75, exclude_outside=0,
           extrapolation_value=0.0, keep_aspect_ratio_policy="stretch", mode="nearest",
           nearest_mode="round_prefer_floor"):
    """Resize(T1 X, T2 roi, float scales, int64 sizes) -> T1 Y; antialias, axes,
    coordinate_transformation_mode, cubic_coeff_a, exclude_outside, extrapolation_value,
    keep_aspect_ratio_policy, mode, nearest_mode."""
    roi = _nonempty(roi, "Resize roi")
    scales = _nonempty(scales, "Resize scales")
    sizes = _nonempty(sizes, "Resize sizes")
    if sizes is None and scales is None:
        raise ValueError("Resize needs scales or sizes")
    return _resize(X, sizes=None if sizes is None else [int(v) for v in sizes.reshape(-1)],
                   scales=None if scales is None else scales.astype(np.float64).reshape(-1),
                   roi=None if roi is None else roi.astype(np.float64).reshape(-1),
                   axes=axes, mode=mode,
                   coordinate_transformation_mode=coordinate_transformation_mode,
                   nearest_mode=nearest_mode, cubic_coeff_a=cubic_coeff_a,
                   exclude_outside=exclude_outside, extrapolation_value=extrapolation_value,
                   antialias=antialias, keep_aspect_ratio_policy=keep_aspect_ratio_policy)


def _upsample(X, scales, mode):
    mode = "linear" if mode in ("bilinear", "linear") else mode
    return _resize(X, sizes=None, scales=np.asarray(scales, np.float64), roi=None, axes=None,
                   mode=mode, coordinate_transformation_mode="asymmetric",
                   nearest_mode="simple", cubic_coeff_a=-0.75, exclude_outside=0,
                   extrapolation_value=0.0, antialias=0, keep_aspect_ratio_policy="stretch")


@onnx("Upsample", since=1)
def upsample_1(X, *, height_scale, width_scale, mode="nearest"):
    """Upsample(T X) -> T Y; height_scale, width_scale, mode (NCHW input)."""
    return _upsample(X, [1.0, 1.0, height_scale, width_scale], mode)


@onnx("Upsample", since=7)
def upsample_7(X, *, scales, mode="nearest"):
    """Upsample(T X) -> T Y; scales, mode."""
    return _upsample(X, scales, mode)


@onnx("Upsample", since=9, static=(1,))
def upsample(X, scales, *, mode="nearest"):
    """Upsample(T X, float scales) -> T Y; mode."""
    return _upsample(X, static_array(scales, "Upsample scales").reshape(-1), mode)

