"""ATen lowerings: convolutions (plain and transposed), their backward, im2col and col2im.

Everything keeps PyTorch's layout: NC<spatial> inputs and OI<spatial> weights
(IO<spatial> for transposed convolutions, rearranged into a plain convolution over the
stride-dilated input). `ops._convolution.convolve` picks how each reaches the compiler
(depthwise ones as shifted multiply-adds on CPU). float16/bfloat16 accumulate in float32.
float32 operands multiply at `precision`, which the torch frontend fills with what PyTorch's
CUDA convolutions use (TF32 by default, unlike its matrix products: `dtypes.convolution_precision`);
XLA:CPU computes either in float32, as PyTorch's CPU convolutions do.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from .._convolution import convolve
from ..registry import aten
from ._promotion import opmath_type


def _expand(value, nd):
    """An int or a list of ints as a list of `nd` ints (a one-element list repeats)."""
    if isinstance(value, int):
        return [value] * nd
    value = list(value)
    return value * nd if len(value) == 1 else value


def _conv(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups, precision="float32"):
    nd = weight.ndim - 2
    unbatched = input.ndim == nd + 1
    if unbatched:
        input = input[None]
    stride, dilation = _expand(stride, nd), _expand(dilation, nd)
    padding, output_padding = _expand(padding, nd), _expand(output_padding, nd)
    out_dtype = input.dtype
    compute = opmath_type(out_dtype)
    kernel = weight.shape[2:]
    if transposed:
        # (Cin, Cout/g, k...) -> (Cout, Cin/g, k...), spatially flipped: a transposed
        # convolution is a plain one over the stride-dilated input.
        cin, cout_g = weight.shape[:2]
        w = weight.reshape((groups, cin // groups, cout_g) + kernel)
        w = jnp.swapaxes(w, 1, 2).reshape((groups * cout_g, cin // groups) + kernel)
        w = jnp.flip(w, axis=tuple(range(2, 2 + nd)))
        pads = [
            (d * (k - 1) - p, d * (k - 1) - p + op)
            for k, p, d, op in zip(kernel, padding, dilation, output_padding)
        ]
        lhs_dilation, strides = stride, [1] * nd
    else:
        w = weight
        pads = [(p, p) for p in padding]
        lhs_dilation, strides = [1] * nd, stride
    out = convolve(input.astype(compute), w.astype(compute), strides=strides, padding=pads,
                   lhs_dilation=lhs_dilation, rhs_dilation=dilation, groups=groups, precision=precision)
    if bias is not None:
        out = out + bias.astype(compute).reshape((-1,) + (1,) * nd)
    out = out.astype(out_dtype)
    return out[0] if unbatched else out


def _same_padding(weight, dilation, nd):
    """padding="same": total padding d*(k-1), the odd unit on the high side (as PyTorch)."""
    dilation = _expand(dilation, nd)
    total = [d * (k - 1) for d, k in zip(dilation, weight.shape[2:])]
    return [(t // 2, t - t // 2) for t in total]


def _conv_padding_str(input, weight, bias, stride, padding, dilation, groups, precision):
    nd = weight.ndim - 2
    if padding == "valid":
        return _conv(input, weight, bias, stride, 0, dilation, False, 0, groups, precision)
    pads = _same_padding(weight, dilation, nd)
    symmetric = [lo for lo, hi in pads]
    extra = [(0, 0)] * (input.ndim - nd) + [(0, hi - lo) for lo, hi in pads]
    if any(hi != lo for lo, hi in pads):
        input = jnp.pad(input, extra)
    return _conv(input, weight, bias, stride, symmetric, dilation, False, 0, groups, precision)


@aten("col2im.default")
def aten_col2im(self, output_size, kernel_size, dilation, padding, stride):
    """col2im(Tensor self, SymInt[2] output_size, int[2] kernel_size, int[2] dilation, int[2] padding, int[2] stride) -> Tensor"""
    unbatched = self.ndim == 2
    x = self[None] if unbatched else self
    (oh, ow), (kh, kw) = _expand(output_size, 2), _expand(kernel_size, 2)
    (dh, dw), (ph, pw), (sh, sw) = _expand(dilation, 2), _expand(padding, 2), _expand(stride, 2)
    n, ckk, _ = x.shape
    c = ckk // (kh * kw)
    bh = (oh + 2 * ph - dh * (kh - 1) - 1) // sh + 1
    bw = (ow + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    # Padded-output row and column of every (kernel offset, block) pair.
    rows = (np.arange(kh) * dh)[:, None, None, None] + (np.arange(bh) * sh)[None, None, :, None]
    cols = (np.arange(kw) * dw)[None, :, None, None] + (np.arange(bw) * sw)[None, None, None, :]
    rows, cols = np.broadcast_arrays(rows, cols)
    flat = (rows * (ow + 2 * pw) + cols).reshape(-1)
    compute = opmath_type(x.dtype)
    vals = x.astype(compute).reshape(n, c, kh * kw * bh * bw)
    out = jnp.zeros((n, c, (oh + 2 * ph) * (ow + 2 * pw)), compute).at[:, :, flat].add(vals)
    out = out.reshape(n, c, oh + 2 * ph, ow + 2 * pw)[:, :, ph : ph + oh, pw : pw + ow].astype(
        x.dtype
    )
    return out[0] if unbatched else out


@aten("conv1d.default", "conv2d.default", "conv3d.default", convolution=True)
def aten_conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, *, precision="float32"):
    """conv2d(Tensor input, Tensor weight, Tensor? bias=None, SymInt[2] stride=[1, 1], SymInt[2] padding=[0, 0], SymInt[2] dilation=[1, 1], SymInt groups=1) -> Tensor"""
    return _conv(input, weight, bias, stride, padding, dilation, False, 0, groups, precision)


@aten("conv1d.padding", "conv2d.padding", "conv3d.padding", convolution=True)
def aten_conv2d_padding(input, weight, bias=None, stride=1, padding="valid", dilation=1, groups=1, *,
                        precision="float32"):
    """conv2d.padding(Tensor input, Tensor weight, Tensor? bias=None, SymInt[2] stride=[1, 1], str padding="valid", SymInt[2] dilation=[1, 1], SymInt groups=1) -> Tensor"""
    return _conv_padding_str(input, weight, bias, stride, padding, dilation, groups, precision)


@aten("conv_transpose1d.default", "conv_transpose2d.input", "conv_transpose3d.input", convolution=True)
def aten_conv_transpose2d(
    input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1, *, precision="float32"
):
    """conv_transpose2d.input(Tensor input, Tensor weight, Tensor? bias=None, SymInt[2] stride=[1, 1], SymInt[2] padding=[0, 0], SymInt[2] output_padding=[0, 0], SymInt groups=1, SymInt[2] dilation=[1, 1]) -> Tensor"""
    return _conv(input, weight, bias, stride, padding, dilation, True, output_padding, groups, precision)


@aten("convolution.default", "_convolution.default", convolution=True)
def aten_convolution(
    input, weight, bias, stride, padding, dilation, transposed, output_padding, groups, *unused, precision="float32"
):
    """convolution(Tensor input, Tensor weight, Tensor? bias, SymInt[] stride, SymInt[] padding, SymInt[] dilation, bool transposed, SymInt[] output_padding, SymInt groups) -> Tensor"""
    return _conv(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups, precision)


@aten("convolution_backward.default", convolution=True)
def aten_convolution_backward(
    grad_output,
    input,
    weight,
    bias_sizes,
    stride,
    padding,
    dilation,
    transposed,
    output_padding,
    groups,
    output_mask,
    *,
    precision="float32",
):
    """convolution_backward(Tensor grad_output, Tensor input, Tensor weight, SymInt[]? bias_sizes, SymInt[] stride, SymInt[] padding, SymInt[] dilation, bool transposed, SymInt[] output_padding, SymInt groups, bool[3] output_mask) -> (Tensor, Tensor, Tensor)"""
    compute = opmath_type(grad_output.dtype)

    def forward(x, w):
        return _conv(x, w, None, stride, padding, dilation, transposed, output_padding, groups, precision)

    _, vjp = jax.vjp(forward, input.astype(compute), weight.astype(compute))
    grad_input, grad_weight = vjp(grad_output.astype(compute))
    nd = weight.ndim - 2
    batch_axes = (
        (0,) + tuple(range(2, 2 + nd)) if grad_output.ndim == nd + 2 else tuple(range(1, 1 + nd))
    )
    grad_bias = jnp.sum(grad_output.astype(compute), axis=batch_axes)
    return (
        grad_input.astype(input.dtype) if output_mask[0] else None,
        grad_weight.astype(weight.dtype) if output_mask[1] else None,
        grad_bias.astype(grad_output.dtype) if output_mask[2] else None,
    )


@aten("im2col.default")
def aten_im2col(self, kernel_size, dilation, padding, stride):
    """im2col(Tensor self, int[2] kernel_size, int[2] dilation, int[2] padding, int[2] stride) -> Tensor"""
    unbatched = self.ndim == 3
    x = self[None] if unbatched else self
    (kh, kw), (dh, dw) = _expand(kernel_size, 2), _expand(dilation, 2)
    (ph, pw), (sh, sw) = _expand(padding, 2), _expand(stride, 2)
    n, c, h, w = x.shape
    x = jnp.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    bh = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1
    bw = (w + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    rows = (np.arange(kh) * dh)[:, None, None, None] + (np.arange(bh) * sh)[None, None, :, None]
    cols = (np.arange(kw) * dw)[None, :, None, None] + (np.arange(bw) * sw)[None, None, None, :]
    out = x[:, :, rows, cols].reshape(n, c * kh * kw, bh * bw)
    return out[0] if unbatched else out
