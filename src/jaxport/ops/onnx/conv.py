"""ONNX convolutions: Conv, ConvTranspose, ConvInteger, DeformConv.

ONNX keeps NC<spatial> data and OI<spatial> weights (IO<spatial>, with the output channels
per group, for ConvTranspose), the layout `ops._convolution.convolve` takes (it picks how each
convolution reaches the compiler, as for ATen). Padding is worked out from the static shapes;
float16/bfloat16 accumulate in float32.
"""

from __future__ import annotations

import itertools

import jax.numpy as jnp
import numpy as np
from jax import lax

from .._convolution import convolve
from ..registry import onnx


def _compute_dtype(dtype):
    dtype = np.dtype(dtype)
    half = dtype.itemsize < 4 and jnp.issubdtype(dtype, jnp.floating)
    return np.dtype(np.float32) if half else dtype


def _conv_pads(spatial, kernel, strides, dilations, pads, auto_pad):
    """[(low, high)] per spatial dim, from explicit `pads` or `auto_pad`."""
    nd = len(spatial)
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        result = []
        for size, k, s, d in zip(spatial, kernel, strides, dilations):
            out = -(-size // s)
            total = max((out - 1) * s + (k - 1) * d + 1 - size, 0)
            half = total // 2
            lower = auto_pad == "SAME_LOWER"
            result.append((total - half, half) if lower else (half, total - half))
        return result
    if auto_pad == "VALID" or not pads:
        return [(0, 0)] * nd
    return list(zip(pads[:nd], pads[nd:]))


def _conv_attributes(X, W, kernel_shape, strides, dilations):
    nd = X.ndim - 2
    kernel = tuple(kernel_shape) if kernel_shape else tuple(W.shape[2:])
    strides = tuple(strides) if strides else (1,) * nd
    dilations = tuple(dilations) if dilations else (1,) * nd
    return nd, kernel, strides, dilations


def _conv(X, W, pads, strides, dilations, group, compute, lhs_dilation=None):
    return convolve(X.astype(compute), W.astype(compute), strides=strides, padding=pads,
                    lhs_dilation=lhs_dilation, rhs_dilation=dilations, groups=group)


@onnx("Conv", since=1)
def conv(X, W, B=None, *, auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None,
         pads=None, strides=None):
    """Conv(T X, T W, T? B) -> T Y; auto_pad, dilations, group, kernel_shape, pads, strides."""
    nd, kernel, strides, dilations = _conv_attributes(X, W, kernel_shape, strides, dilations)
    padding = _conv_pads(X.shape[2:], kernel, strides, dilations, pads, auto_pad)
    compute = _compute_dtype(X.dtype)
    Y = _conv(X, W, padding, strides, dilations, group, compute)
    if B is not None:
        Y = Y + B.astype(compute).reshape((-1,) + (1,) * nd)
    return Y.astype(X.dtype)


@onnx("ConvInteger", since=10)
def conv_integer(x, w, x_zero_point=None, w_zero_point=None, *, auto_pad="NOTSET",
                 dilations=None, group=1, kernel_shape=None, pads=None, strides=None):
    """ConvInteger(T1 x, T2 w, T1? x_zero_point, T2? w_zero_point) -> int32 y; as Conv."""
    nd, kernel, strides, dilations = _conv_attributes(x, w, kernel_shape, strides, dilations)
    padding = _conv_pads(x.shape[2:], kernel, strides, dilations, pads, auto_pad)
    # Zero padding of the shifted input is padding the raw input with its zero point.
    x = x.astype(jnp.int32)
    w = w.astype(jnp.int32)
    if x_zero_point is not None:
        x = x - jnp.asarray(x_zero_point).astype(jnp.int32).reshape(())
    if w_zero_point is not None:
        wz = jnp.asarray(w_zero_point).astype(jnp.int32)
        w = w - wz.reshape((-1,) + (1,) * (w.ndim - 1) if wz.size > 1 else ())
    return _conv(x, w, padding, strides, dilations, group, np.dtype(np.int32))


@onnx("ConvTranspose", since=1)
def conv_transpose(X, W, B=None, *, auto_pad="NOTSET", dilations=None, group=1,
                   kernel_shape=None, output_padding=None, output_shape=None, pads=None,
                   strides=None):
    """ConvTranspose(T X, T W, T? B) -> T Y; auto_pad, dilations, group, kernel_shape,
    output_padding, output_shape, pads, strides."""
    nd, kernel, strides, dilations = _conv_attributes(X, W, kernel_shape, strides, dilations)
    output_padding = tuple(output_padding) if output_padding else (0,) * nd
    spatial = X.shape[2:]
    full = [s * (n - 1) + op + (k - 1) * d + 1
            for n, k, s, d, op in zip(spatial, kernel, strides, dilations, output_padding)]
    if output_shape or auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        if output_shape:
            target = tuple(output_shape)[-nd:]
        else:
            target = [n * s for n, s in zip(spatial, strides)]
        padding = []
        for size, want in zip(full, target):
            total = size - want
            half = total // 2
            upper = auto_pad == "SAME_UPPER"
            padding.append((half, total - half) if upper else (total - half, half))
    elif auto_pad == "VALID" or not pads:
        padding = [(0, 0)] * nd
    else:
        padding = list(zip(pads[:nd], pads[nd:]))
    # A transposed convolution is a plain one over the stride-dilated input with the
    # kernel flipped and its in/out channels swapped within each group.
    cin, cout_g = W.shape[:2]
    k = tuple(W.shape[2:])
    Wt = W.reshape((group, cin // group, cout_g) + k)
    Wt = jnp.swapaxes(Wt, 1, 2).reshape((group * cout_g, cin // group) + k)
    Wt = jnp.flip(Wt, axis=tuple(range(2, 2 + nd)))
    conv_pads = [(d * (kk - 1) - lo, d * (kk - 1) - hi + op)
                 for kk, d, (lo, hi), op in zip(k, dilations, padding, output_padding)]
    compute = _compute_dtype(X.dtype)
    Y = _conv(X, Wt, conv_pads, (1,) * nd, dilations, group, compute, lhs_dilation=strides)
    if B is not None:
        Y = Y + B.astype(compute).reshape((-1,) + (1,) * nd)
    return Y.astype(X.dtype)


@onnx("DeformConv", since=19)
def deform_conv(X, W, offset, B=None, mask=None, *, dilations=None, group=1,
                kernel_shape=None, offset_group=1, pads=None, strides=None):
    """DeformConv(T X, T W, T offset, T? B, T? mask) -> T Y; dilations, group, kernel_shape,
    offset_group, pads, strides."""
    nd, kernel, strides, dilations = _conv_attributes(X, W, kernel_shape, strides, dilations)
    pads = tuple(pads) if pads else (0,) * (2 * nd)
    compute = _compute_dtype(X.dtype)
    n, c = X.shape[:2]
    spatial = X.shape[2:]
    out = tuple(offset.shape[2:])
    oc = W.shape[0]
    n_kernel = int(np.prod(kernel))
    n_out = int(np.prod(out))
    offset = offset.astype(compute).reshape((n, offset_group) + kernel + (nd,) + out)
    if mask is None:
        mask = jnp.ones((n, offset_group) + kernel + out, compute)
    mask = mask.astype(compute).reshape((n, offset_group) + kernel + out)
    # Sampling positions: the window's grid plus the learned offsets, [N, G, *K, *O] per dim.
    positions = []
    for i in range(nd):
        shape = [1] * (2 * nd)
        shape[i] = kernel[i]
        base_k = (np.arange(kernel[i]) * dilations[i]).reshape(shape)
        shape = [1] * (2 * nd)
        shape[nd + i] = out[i]
        base_o = (np.arange(out[i]) * strides[i] - pads[i]).reshape(shape)
        base = (base_k + base_o).astype(compute)
        positions.append(offset[(slice(None),) * (2 + nd) + (i,)] + base)
    lows = [jnp.floor(p) for p in positions]
    fracs = [p - lo for p, lo in zip(positions, lows)]
    lows = [lo.astype(jnp.int32) for lo in lows]
    plane = X.astype(compute).reshape(n, offset_group, c // offset_group, int(np.prod(spatial)))
    sampled = 0
    # Multilinear interpolation; corners outside the input read zero.
    for corner in itertools.product((0, 1), repeat=nd):
        weight, valid, flat = 1, True, 0
        for i, bit in enumerate(corner):
            idx = lows[i] + bit
            weight = weight * (fracs[i] if bit else 1 - fracs[i])
            valid = valid & (idx >= 0) & (idx < spatial[i])
            flat = flat * spatial[i] + jnp.clip(idx, 0, spatial[i] - 1)
        flat = flat.reshape(n, offset_group, 1, n_kernel * n_out)
        vals = jnp.take_along_axis(plane, flat, axis=3)
        coef = jnp.where(valid, weight, 0).reshape(n, offset_group, 1, n_kernel * n_out)
        sampled = sampled + vals * coef
    sampled = sampled * mask.reshape(n, offset_group, 1, n_kernel * n_out)
    cols = sampled.reshape(n, group, c // group, n_kernel, n_out)
    w = W.astype(compute).reshape(group, oc // group, c // group, n_kernel)
    Y = jnp.einsum("ngckp,gock->ngop", cols, w, precision=lax.Precision.HIGHEST)
    Y = Y.reshape((n, oc) + out)
    if B is not None:
        Y = Y + B.astype(compute).reshape((-1,) + (1,) * nd)
    return Y.astype(X.dtype)
