"""ONNX quantization: QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear, QLinearConv,
QLinearMatMul.

Quantized arithmetic runs on int32 (matmul, conv) and requantizes in float32 as onnxruntime
does (`_requantize`), so rounding ties land where it puts them; QuantizeLinear rounds in the
widest float JAX has (float64 under x64), as ONNX's reference does.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ..registry import onnx
from ._helpers import normalize_axis

#: ONNX TensorProto element types (the `output_dtype` / `precision` attributes) by JAX name.
_DTYPES = {
    1: "float32", 2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 6: "int32", 7: "int64",
    10: "float16", 11: "float64", 12: "uint32", 13: "uint64", 16: "bfloat16",
    17: "float8_e4m3fn", 18: "float8_e4m3fnuz", 19: "float8_e5m2", 20: "float8_e5m2fnuz",
    21: "uint4", 22: "int4", 23: "float4_e2m1fn", 25: "uint2", 26: "int2",
}


def _onnx_dtype(code: int):
    if int(code) not in _DTYPES:
        raise TypeError(f"ONNX element type {code} has no JAX dtype")
    return np.dtype(getattr(jnp, _DTYPES[int(code)]))


def _wide():
    """The float requantization runs in: float64 when JAX has it, else float32."""
    return jax.dtypes.canonicalize_dtype(np.float64)


def _per_axis(value, shape, axis: int, block_size: int):
    """A scale or zero point shaped to broadcast against a tensor of `shape`: a scalar,
    one value per index of `axis`, or (blocked) one per `block_size` run along `axis`."""
    if value.ndim == 0:
        return value
    if value.size == 1:
        return value.reshape(())
    if not block_size:
        dims = [1] * len(shape)
        dims[axis] = value.size
        return value.reshape(dims)
    return jnp.repeat(value, block_size, axis=axis)[(slice(None),) * axis + (slice(0, shape[axis]),)]


def _is_float_q(dtype) -> bool:
    return jnp.issubdtype(dtype, jnp.floating) and jnp.finfo(dtype).bits <= 8


@onnx("DequantizeLinear", since=10)
def dequantize_linear(x, x_scale, x_zero_point=None, *, axis=1, block_size=0, output_dtype=0):
    """DequantizeLinear(T1 x, T2 x_scale, T1 x_zero_point) -> T3 y; axis, block_size,
    output_dtype."""
    axis = normalize_axis(axis, max(x.ndim, 1))
    out = _onnx_dtype(output_dtype) if output_dtype else x_scale.dtype
    ctype = jnp.float64 if x_scale.dtype == jnp.float64 else jnp.float32
    dx = x.astype(ctype)
    # Float8/float4 zero points carry no offset (ONNX requires them to be zero).
    if x_zero_point is not None and not _is_float_q(x.dtype):
        dx = dx - _per_axis(x_zero_point, x.shape, axis, block_size).astype(ctype)
    y = dx * _per_axis(x_scale, x.shape, axis, block_size).astype(ctype)
    return y.astype(out)


@onnx("DynamicQuantizeLinear", since=11)
def dynamic_quantize_linear(x):
    """DynamicQuantizeLinear(T1 x) -> (T2 y, float y_scale, T2 y_zero_point)."""
    xf = x.astype(jnp.float32)
    hi = jnp.maximum(jnp.max(xf), 0.0)
    lo = jnp.minimum(jnp.min(xf), 0.0)
    # An all-zero x gets scale 1 (onnxruntime's rule; the formula would divide by zero).
    scale = jnp.where(hi == lo, jnp.float32(1.0), (hi - lo) / jnp.float32(255))
    zero = jnp.round(jnp.clip(-lo / scale, 0, 255))
    y = jnp.clip(jnp.round(xf / scale) + zero, 0, 255)
    return y.astype(jnp.uint8), scale.astype(x.dtype), zero.astype(jnp.uint8)


def _conv_pads(auto_pad, spatial, kernel, strides, dilations, pads):
    k = len(spatial)
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        out = []
        for n, kk, s, d in zip(spatial, kernel, strides, dilations):
            total = max(0, (-(-n // s) - 1) * s + (kk - 1) * d + 1 - n)
            small, big = total // 2, total - total // 2
            out.append((small, big) if auto_pad == "SAME_UPPER" else (big, small))
        return out
    if auto_pad == "VALID" or not pads:
        return [(0, 0)] * k
    return [(pads[i], pads[i + k]) for i in range(k)]


@onnx("QLinearConv", since=10)
def qlinear_conv(x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point,
                 B=None, *, auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None,
                 pads=None, strides=None):
    """QLinearConv(T1 x, float x_scale, T1 x_zero_point, T2 w, float w_scale, T2 w_zero_point,
    float y_scale, T3 y_zero_point, T4 B) -> T3 y; auto_pad, dilations, group, kernel_shape,
    pads, strides."""
    k = x.ndim - 2
    kernel = tuple(kernel_shape or w.shape[2:])
    strides = tuple(strides or (1,) * k)
    dilations = tuple(dilations or (1,) * k)
    xi = x.astype(jnp.int32)
    if x_zero_point is not None:
        xi = xi - x_zero_point.astype(jnp.int32)
    wi = w.astype(jnp.int32)
    if w_zero_point is not None:
        wi = wi - _per_axis(w_zero_point, w.shape, 0, 0).astype(jnp.int32)
    padding = _conv_pads(auto_pad, x.shape[2:], kernel, strides, dilations, pads)
    acc = lax.conv_general_dilated(
        xi, wi, strides, padding, rhs_dilation=dilations, feature_group_count=group,
        preferred_element_type=jnp.int32)
    channel = (1, -1) + (1,) * k
    if B is not None:
        acc = acc + B.astype(jnp.int32).reshape(channel)
    w_scale = w_scale.reshape(channel) if w_scale.size > 1 else w_scale.reshape(())
    multiplier = x_scale.astype(jnp.float32) * w_scale.astype(jnp.float32) / y_scale.astype(jnp.float32)
    return _requantize(acc, multiplier, y_zero_point, x.dtype)


def _requantize(acc, multiplier, zero_point, default_dtype):
    """An int32 accumulator scaled back to the output's integer type as onnxruntime does it
    (MLAS's requantize): in float32, clamped to the type's range less the zero point, rounded
    half to even, then offset by the zero point. float32 is what onnxruntime computes in; a
    wider float moves rounding ties by one."""
    out = zero_point.dtype if zero_point is not None else np.dtype(default_dtype)
    zero = zero_point.astype(jnp.float32) if zero_point is not None else jnp.float32(0)
    info = jnp.iinfo(out)
    r = jnp.clip(acc.astype(jnp.float32) * multiplier, info.min - zero, info.max - zero)
    return (jnp.round(r) + zero).astype(out)


@onnx("QLinearMatMul", since=10)
def qlinear_matmul(a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point):
    """QLinearMatMul(T1 a, TS a_scale, T1 a_zero_point, T2 b, TS b_scale, T2 b_zero_point,
    TS y_scale, T3 y_zero_point) -> T3 y."""

    def rows(v):  # a's 1-D parameters are per row: they broadcast down a's last axis
        return v.reshape(()) if v.size == 1 else v.reshape(-1, 1)

    ai = a.astype(jnp.int32)
    if a_zero_point is not None:
        ai = ai - rows(a_zero_point).astype(jnp.int32)
    bi = b.astype(jnp.int32)
    if b_zero_point is not None:
        bi = bi - b_zero_point.astype(jnp.int32)
    acc = jnp.matmul(ai, bi, preferred_element_type=jnp.int32)
    multiplier = rows(a_scale).astype(jnp.float32) * b_scale.astype(jnp.float32) / y_scale.astype(jnp.float32)
    return _requantize(acc, multiplier, y_zero_point, a.dtype)


@onnx("QuantizeLinear", since=10)
def quantize_linear(x, y_scale, y_zero_point=None, *, axis=1, block_size=0, output_dtype=0,
                    precision=0, saturate=1):
    """QuantizeLinear(T1 x, T2 y_scale, T3 y_zero_point) -> T3 y; axis, block_size,
    output_dtype, precision, saturate."""
    axis = normalize_axis(axis, max(x.ndim, 1))
    if y_zero_point is not None:
        out = y_zero_point.dtype
    else:
        out = _onnx_dtype(output_dtype) if output_dtype else np.dtype(np.uint8)
    scale = _per_axis(y_scale, x.shape, axis, block_size)
    if precision:
        ctype = _onnx_dtype(precision)
    elif x.dtype == scale.dtype:
        ctype = x.dtype
    else:
        ctype = jnp.float64 if jnp.float64 in (x.dtype, scale.dtype) else jnp.float32
    v = x.astype(ctype) / scale.astype(ctype)
    if jnp.issubdtype(out, jnp.integer):
        wide = _wide()
        q = jnp.round(v).astype(wide)
        if y_zero_point is not None:
            q = q + _per_axis(y_zero_point, x.shape, axis, block_size).astype(wide)
        info = jnp.iinfo(out)
        return jnp.clip(q, info.min, info.max).astype(out)
    info = jnp.finfo(out)
    if info.bits == 4:  # float4 zero points shift; it has no inf or nan, so it saturates
        if y_zero_point is not None:
            v = v.astype(jnp.float32) + _per_axis(y_zero_point, x.shape, axis,
                                                  block_size).astype(jnp.float32)
        return jnp.clip(v, float(info.min), float(info.max)).astype(out)
    if saturate:
        v = jnp.clip(v, float(info.min), float(info.max))
    return v.astype(out)
