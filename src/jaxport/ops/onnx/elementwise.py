"""ONNX elementwise ops: arithmetic, comparison, logic, math functions, casts."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ..registry import onnx
from ._helpers import legacy_broadcast

#: TensorProto.DataType codes -> jax.numpy dtype names (STRING, 8, has no JAX dtype).
_ONNX_DTYPES = {
    1: "float32", 2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 6: "int32", 7: "int64",
    9: "bool", 10: "float16", 11: "float64", 12: "uint32", 13: "uint64", 14: "complex64",
    15: "complex128", 16: "bfloat16", 17: "float8_e4m3fn", 18: "float8_e4m3fnuz",
    19: "float8_e5m2", 20: "float8_e5m2fnuz", 21: "uint4", 22: "int4", 23: "float4_e2m1fn",
    24: "float8_e8m0fnu", 25: "uint2", 26: "int2", 27: "float6_e2m3fn", 28: "float6_e3m2fn",
}
#: Cast-1 names its target type by the DataType enum's name.
_ONNX_DTYPE_CODES = {
    "FLOAT": 1, "UINT8": 2, "INT8": 3, "UINT16": 4, "INT16": 5, "INT32": 6, "INT64": 7,
    "STRING": 8, "BOOL": 9, "FLOAT16": 10, "DOUBLE": 11, "UINT32": 12, "UINT64": 13,
    "COMPLEX64": 14, "COMPLEX128": 15, "BFLOAT16": 16, "FLOAT8E4M3FN": 17, "FLOAT8E4M3FNUZ": 18,
    "FLOAT8E5M2": 19, "FLOAT8E5M2FNUZ": 20, "UINT4": 21, "INT4": 22, "FLOAT4E2M1": 23,
    "FLOAT8E8M0": 24, "UINT2": 25, "INT2": 26, "FLOAT6E2M3": 27, "FLOAT6E3M2": 28,
}
#: The float8 types the `saturate` attribute clamps (float8e8m0 has its own rules).
_SATURATING = ("float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz")
_SUB_BYTE_INTS = ("int4", "uint4", "int2", "uint2")


def _dtype(to) -> np.dtype:
    """The dtype a `to` attribute names: a DataType code, or (Cast-1) its name."""
    code = _ONNX_DTYPE_CODES.get(to.upper(), to) if isinstance(to, str) else int(to)
    name = _ONNX_DTYPES.get(code)
    if name is None or not hasattr(jnp, name):
        raise NotImplementedError(f"ONNX data type {to!r} has no JAX dtype")
    return np.dtype(jax.dtypes.canonicalize_dtype(getattr(jnp, name)))


def _is_float(x) -> bool:
    return jnp.issubdtype(x.dtype, jnp.inexact)


def _cast(x, dtype: np.dtype, saturate: int, round_mode: str):
    x = jnp.asarray(x)
    if x.dtype == dtype:
        return x
    if dtype.name == "float8_e8m0fnu":
        return _to_e8m0(x, saturate, round_mode)
    if dtype.name in _SATURATING and saturate:
        if not _is_float(x):
            x = x.astype(jnp.float32)
        limit = float(jnp.finfo(dtype).max)
        # Clamping first turns +-inf and values past the range into +-max; NaN stays NaN.
        return jnp.clip(x, -limit, limit).astype(dtype)
    if dtype.name in _SUB_BYTE_INTS and _is_float(x):
        # Truncate, then keep the low bits like wider integers do (XLA would clamp instead).
        x = jnp.trunc(x).astype(jax.dtypes.canonicalize_dtype(jnp.int64))
    return x.astype(dtype)


def _to_e8m0(x, saturate: int, round_mode: str):
    """float -> float8e8m0 (a bare power-of-two exponent) by rounding float32's exponent."""
    f = x.astype(jnp.float32)
    bits = lax.bitcast_convert_type(f, jnp.uint32)
    exponent = ((bits >> 23) & 0xFF).astype(jnp.int32)
    fraction = bits & 0x7FFFFF
    if round_mode == "up":
        carry = fraction != 0
    elif round_mode == "nearest":
        # Ties round up for normal numbers; subnormals sit below 2**-126, and only those past
        # the midpoint 0.75 * 2**-126 reach it.
        carry = jnp.where(exponent > 0, fraction >= 0x400000, fraction > 0x400000)
    elif round_mode == "down":
        carry = jnp.zeros(f.shape, bool)
    else:
        raise ValueError(f"Cast: unknown round_mode {round_mode!r}")
    exponent = jnp.where(exponent == 0xFF, 0xFF, exponent + carry.astype(jnp.int32))
    if saturate:
        exponent = jnp.where(jnp.isnan(f), 0xFF, jnp.minimum(exponent, 0xFE))
    return lax.bitcast_convert_type(exponent.astype(jnp.uint8), jnp.float8_e8m0fnu)


def _int_or_float_pow(x, y):
    """An integer base to a floating exponent: computed in float64, then truncated."""
    wide = jax.dtypes.canonicalize_dtype(jnp.float64)
    return jnp.power(x.astype(wide), y.astype(wide)).astype(x.dtype)


def _pow(x, y):
    x, y = jnp.asarray(x), jnp.asarray(y)
    if not _is_float(x) and _is_float(y):
        return _int_or_float_pow(x, y)
    return jnp.power(x, y.astype(x.dtype))


def _clamp(x, low, high):
    """`x` within [low, high] (either None: unbounded); NaN and the sign of a zero within the
    bounds pass through, as in onnxruntime (`jnp.clip` makes clip(-0.0, 0.0) 0.0)."""
    if low is not None:
        x = jnp.where(x < low, jnp.asarray(low, x.dtype), x)
    if high is not None:
        x = jnp.where(x > high, jnp.asarray(high, x.dtype), x)
    return x


def _no_zero_divisor(b, op: str) -> None:
    """Refuse an integer divisor holding 0 when its value is known (a constant, or a model run op
    by op), as onnxruntime does. A divisor computed under `jax.jit` cannot raise: Div then
    gives x / 0 = -1 (all bits set: the unsigned maximum) and INT_MIN / -1 = INT_MIN (onnxruntime
    crashes on that one with SIGFPE); Mod gives 0, or x with fmod=1."""
    if not isinstance(b, jax.core.Tracer) and np.any(np.asarray(b) == 0):
        raise ZeroDivisionError(f"{op} by zero (onnxruntime refuses it too)")


def _div(a, b):
    divisor = b  # checked as given: under jax.jit, even jnp.asarray of a constant is traced
    a, b = jnp.asarray(a), jnp.asarray(b)
    if _is_float(a):
        return jnp.divide(a, b)
    _no_zero_divisor(divisor, "integer division")
    a, b = jnp.broadcast_arrays(a, b)
    return lax.div(a, b)  # integer division truncates toward zero, as in C


@onnx("Abs", since=1)
def abs_(X, *, consumed_inputs=None):
    """Abs(T X) -> T Y."""
    return jnp.abs(X)


@onnx("Acos", since=7)
def acos(input):
    """Acos(T input) -> T output."""
    return jnp.arccos(input)


@onnx("Acosh", since=9)
def acosh(input):
    """Acosh(T input) -> T output."""
    return jnp.arccosh(input)


@onnx("Add", since=1)
def add_1(A, B, *, broadcast=0, axis=None, consumed_inputs=None):
    """Add-1/6(T A, T B) -> T; B aligned to A by `broadcast`/`axis`."""
    return A + legacy_broadcast(B, jnp.ndim(A), broadcast, axis)


@onnx("Add", since=7)
def add(A, B):
    """Add(T A, T B) -> T C, with NumPy broadcasting."""
    return jnp.add(A, B)


@onnx("And", since=1)
def and_1(A, B, *, broadcast=0, axis=None):
    """And-1(bool A, bool B) -> bool C; B aligned to A by `broadcast`/`axis`."""
    return jnp.logical_and(A, legacy_broadcast(B, jnp.ndim(A), broadcast, axis))


@onnx("And", since=7)
def and_(A, B):
    """And(bool A, bool B) -> bool C."""
    return jnp.logical_and(A, B)


@onnx("Asin", since=7)
def asin(input):
    """Asin(T input) -> T output."""
    return jnp.arcsin(input)


@onnx("Asinh", since=9)
def asinh(input):
    """Asinh(T input) -> T output."""
    return jnp.arcsinh(input)


@onnx("Atan", since=7)
def atan(input):
    """Atan(T input) -> T output."""
    return jnp.arctan(input)


@onnx("Atanh", since=9)
def atanh(input):
    """Atanh(T input) -> T output."""
    return jnp.arctanh(input)


@onnx("BitCast", since=26)
def bit_cast(input, *, to):
    """BitCast(T1 input) -> T2 output; `to` of the same bit width."""
    x = jnp.asarray(input)
    dtype = _dtype(to)
    if x.dtype == dtype:
        return x
    # XLA does not bitcast booleans; their bytes are 0 and 1.
    if x.dtype == jnp.bool_:
        x = x.astype(jnp.uint8)
    if dtype == jnp.bool_:
        return lax.bitcast_convert_type(x, jnp.uint8) != 0
    return lax.bitcast_convert_type(x, dtype)


@onnx("BitShift", since=11)
def bit_shift(X, Y, *, direction):
    """BitShift(T X, T Y) -> T Z; direction LEFT or RIGHT (arithmetic for signed T)."""
    x, y = jnp.broadcast_arrays(X, Y)
    bits = jnp.iinfo(x.dtype).bits
    # Shifts by a negative amount or by the width or more leave only the sign fill.
    outside = (y < 0) | (y >= bits)
    if direction == "LEFT":
        return jnp.where(outside, jnp.zeros_like(x), lax.shift_left(x, jnp.where(outside, 0, y)))
    if direction != "RIGHT":
        raise ValueError(f"BitShift: direction must be LEFT or RIGHT, not {direction!r}")
    if jnp.issubdtype(x.dtype, jnp.signedinteger):
        return lax.shift_right_arithmetic(x, jnp.where(outside, bits - 1, y))
    return jnp.where(outside, jnp.zeros_like(x), lax.shift_right_logical(x, jnp.where(outside, 0, y)))


@onnx("BitwiseAnd", since=18)
def bitwise_and(A, B):
    """BitwiseAnd(T A, T B) -> T C."""
    return jnp.bitwise_and(A, B)


@onnx("BitwiseNot", since=18)
def bitwise_not(X):
    """BitwiseNot(T X) -> T Y."""
    return jnp.invert(X)


@onnx("BitwiseOr", since=18)
def bitwise_or(A, B):
    """BitwiseOr(T A, T B) -> T C."""
    return jnp.bitwise_or(A, B)


@onnx("BitwiseXor", since=18)
def bitwise_xor(A, B):
    """BitwiseXor(T A, T B) -> T C."""
    return jnp.bitwise_xor(A, B)


@onnx("Cast", since=1)
def cast(input, *, to, saturate=1, round_mode="up"):
    """Cast(T1 input) -> T2 output; `to` (a type name in Cast-1), saturate (float8),
    round_mode (float8e8m0)."""
    return _cast(input, _dtype(to), saturate, round_mode)


@onnx("CastLike", since=15)
def cast_like(input, target_type, *, saturate=1, round_mode="up"):
    """CastLike(T1 input, T2 target_type) -> T2 output; saturate, round_mode as Cast's."""
    return _cast(input, np.dtype(target_type.dtype), saturate, round_mode)


@onnx("Ceil", since=1)
def ceil(X, *, consumed_inputs=None):
    """Ceil(T X) -> T Y."""
    return jnp.ceil(X)


@onnx("Clip", since=1)
def clip_1(input, *, min=-3.4028234663852886e38, max=3.4028234663852886e38,
           consumed_inputs=None):
    """Clip-1/6(T input) -> T output; bounds `min`, `max` as attributes."""
    return _clamp(jnp.asarray(input), min, max)


@onnx("Clip", since=11)
def clip(input, min=None, max=None):
    """Clip(T input, T min?, T max?) -> T output; with min > max every value becomes max. An
    omitted bound is the type's lowest / highest finite value (so infinities clip to them)."""
    x = jnp.asarray(input)
    if jnp.issubdtype(x.dtype, jnp.floating):
        lowest, highest = jnp.finfo(x.dtype).min, jnp.finfo(x.dtype).max
        min = lowest if min is None else min
        max = highest if max is None else max
    return _clamp(x, min, max)


@onnx("Cos", since=7)
def cos(input):
    """Cos(T input) -> T output."""
    return jnp.cos(input)


@onnx("Cosh", since=9)
def cosh(input):
    """Cosh(T input) -> T output."""
    return jnp.cosh(input)


@onnx("Div", since=1)
def div_1(A, B, *, broadcast=0, axis=None, consumed_inputs=None):
    """Div-1/6(T A, T B) -> T; B aligned to A by `broadcast`/`axis`."""
    return _div(A, legacy_broadcast(B, jnp.ndim(A), broadcast, axis))


@onnx("Div", since=7)
def div(A, B):
    """Div(T A, T B) -> T C; integers divide truncating toward zero, and an integer B of 0 is
    refused where known (`_no_zero_divisor`)."""
    return _div(A, B)


@onnx("Equal", since=1)
def equal_1(A, B, *, broadcast=0, axis=None):
    """Equal-1(T A, T B) -> bool C; B aligned to A by `broadcast`/`axis`."""
    return jnp.equal(A, legacy_broadcast(B, jnp.ndim(A), broadcast, axis))


@onnx("Equal", since=7)
def equal(A, B):
    """Equal(T A, T B) -> bool C."""
    return jnp.equal(A, B)


@onnx("Erf", since=9)
def erf(input):
    """Erf(T input) -> T output."""
    x = jnp.asarray(input)
    if _is_float(x):
        return lax.erf(x)
    return lax.erf(x.astype(jnp.float32)).astype(x.dtype)


@onnx("Exp", since=1)
def exp(input, *, consumed_inputs=None):
    """Exp(T input) -> T output."""
    return jnp.exp(input)


@onnx("Floor", since=1)
def floor(X, *, consumed_inputs=None):
    """Floor(T X) -> T Y."""
    return jnp.floor(X)


@onnx("Greater", since=1)
def greater_1(A, B, *, broadcast=0, axis=None):
    """Greater-1(T A, T B) -> bool C; B aligned to A by `broadcast`/`axis`."""
    return jnp.greater(A, legacy_broadcast(B, jnp.ndim(A), broadcast, axis))


@onnx("Greater", since=7)
def greater(A, B):
    """Greater(T A, T B) -> bool C."""
    return jnp.greater(A, B)


@onnx("GreaterOrEqual", since=12)
def greater_or_equal(A, B):
    """GreaterOrEqual(T A, T B) -> bool C."""
    return jnp.greater_equal(A, B)


@onnx("IsInf", since=10)
def is_inf(X, *, detect_negative=1, detect_positive=1):
    """IsInf(T1 X) -> bool Y; detect_negative, detect_positive."""
    x = jnp.asarray(X)
    if detect_negative and detect_positive:
        return jnp.isinf(x)
    if detect_positive:
        return jnp.isposinf(x)
    if detect_negative:
        return jnp.isneginf(x)
    return jnp.zeros(x.shape, bool)


@onnx("IsNaN", since=9)
def is_nan(X):
    """IsNaN(T1 X) -> bool Y."""
    return jnp.isnan(X)


@onnx("Less", since=1)
def less_1(A, B, *, broadcast=0, axis=None):
    """Less-1(T A, T B) -> bool C; B aligned to A by `broadcast`/`axis`."""
    return jnp.less(A, legacy_broadcast(B, jnp.ndim(A), broadcast, axis))


@onnx("Less", since=7)
def less(A, B):
    """Less(T A, T B) -> bool C."""
    return jnp.less(A, B)


@onnx("LessOrEqual", since=12)
def less_or_equal(A, B):
    """LessOrEqual(T A, T B) -> bool C."""
    return jnp.less_equal(A, B)


@onnx("Log", since=1)
def log(input, *, consumed_inputs=None):
    """Log(T input) -> T output."""
    return jnp.log(input)


@onnx("Max", since=1)
def max_(*data, consumed_inputs=None):
    """Max(T data_0, ...) -> T max; NaN propagates."""
    return functools.reduce(jnp.maximum, data)


@onnx("Mean", since=1)
def mean(*data, consumed_inputs=None):
    """Mean(T data_0, ...) -> T mean."""
    return functools.reduce(jnp.add, data) / len(data)


@onnx("Min", since=1)
def min_(*data, consumed_inputs=None):
    """Min(T data_0, ...) -> T min; NaN propagates."""
    return functools.reduce(jnp.minimum, data)


@onnx("Mod", since=10)
def mod(A, B, *, fmod=0):
    """Mod(T A, T B) -> T C; fmod=0: sign of B (floor), fmod=1: sign of A (truncate). An integer
    B of 0 is refused where known (`_no_zero_divisor`)."""
    if not _is_float(jnp.asarray(A)):
        _no_zero_divisor(B, "integer modulo")
    a, b = jnp.broadcast_arrays(A, B)
    if fmod:
        return lax.rem(a, b)
    if not _is_float(a):
        return jnp.remainder(a, b)
    r = lax.rem(a, b)
    r = jnp.where((r != 0) & ((r < 0) != (b < 0)), r + b, r)
    # A zero remainder takes B's sign.
    return jnp.where(r == 0, jnp.where(jnp.signbit(b), -jnp.zeros_like(r), jnp.zeros_like(r)), r)


@onnx("Mul", since=1)
def mul_1(A, B, *, broadcast=0, axis=None, consumed_inputs=None):
    """Mul-1/6(T A, T B) -> T; B aligned to A by `broadcast`/`axis`."""
    return A * legacy_broadcast(B, jnp.ndim(A), broadcast, axis)


@onnx("Mul", since=7)
def mul(A, B):
    """Mul(T A, T B) -> T C."""
    return jnp.multiply(A, B)


@onnx("Neg", since=1)
def neg(X, *, consumed_inputs=None):
    """Neg(T X) -> T Y."""
    return jnp.negative(X)


@onnx("Not", since=1)
def not_(X):
    """Not(bool X) -> bool Y."""
    return jnp.logical_not(X)


@onnx("Or", since=1)
def or_1(A, B, *, broadcast=0, axis=None):
    """Or-1(bool A, bool B) -> bool C; B aligned to A by `broadcast`/`axis`."""
    return jnp.logical_or(A, legacy_broadcast(B, jnp.ndim(A), broadcast, axis))


@onnx("Or", since=7)
def or_(A, B):
    """Or(bool A, bool B) -> bool C."""
    return jnp.logical_or(A, B)


@onnx("Pow", since=1)
def pow_1(X, Y, *, broadcast=0, axis=None):
    """Pow-1(T X, T Y) -> T Z; Y aligned to X by `broadcast`/`axis`."""
    return _pow(X, legacy_broadcast(Y, jnp.ndim(X), broadcast, axis))


@onnx("Pow", since=7)
def pow_(X, Y):
    """Pow(T X, T1 Y) -> T Z; the result has X's type."""
    return _pow(X, Y)


@onnx("Reciprocal", since=1)
def reciprocal(X, *, consumed_inputs=None):
    """Reciprocal(T X) -> T Y."""
    return jnp.reciprocal(X)


@onnx("Round", since=11)
def round_(X):
    """Round(T X) -> T Y; halves to even."""
    return jnp.round(X)


@onnx("Sign", since=9)
def sign(input):
    """Sign(T input) -> T output; 0 for -0.0 (the spec's "0 if input == 0", as onnxruntime)."""
    x = jnp.asarray(input)
    return jnp.where(x == 0, jnp.zeros_like(x), jnp.sign(x))


@onnx("Sin", since=7)
def sin(input):
    """Sin(T input) -> T output."""
    return jnp.sin(input)


@onnx("Sinh", since=9)
def sinh(input):
    """Sinh(T input) -> T output."""
    return jnp.sinh(input)


@onnx("Sqrt", since=1)
def sqrt(X, *, consumed_inputs=None):
    """Sqrt(T X) -> T Y."""
    return jnp.sqrt(X)


@onnx("Sub", since=1)
def sub_1(A, B, *, broadcast=0, axis=None, consumed_inputs=None):
    """Sub-1/6(T A, T B) -> T; B aligned to A by `broadcast`/`axis`."""
    return A - legacy_broadcast(B, jnp.ndim(A), broadcast, axis)


@onnx("Sub", since=7)
def sub(A, B):
    """Sub(T A, T B) -> T C."""
    return jnp.subtract(A, B)


@onnx("Sum", since=1)
def sum_(*data, consumed_inputs=None):
    """Sum(T data_0, ...) -> T sum."""
    return functools.reduce(jnp.add, data)


@onnx("Tan", since=7)
def tan(input):
    """Tan(T input) -> T output."""
    return jnp.tan(input)


@onnx("Tanh", since=1)
def tanh(input, *, consumed_inputs=None):
    """Tanh(T input) -> T output."""
    return jnp.tanh(input)


@onnx("Where", since=9)
def where(condition, X, Y):
    """Where(bool condition, T X, T Y) -> T output."""
    return jnp.where(condition, X, Y)


@onnx("Xor", since=1)
def xor_1(A, B, *, broadcast=0, axis=None):
    """Xor-1(bool A, bool B) -> bool C; B aligned to A by `broadcast`/`axis`."""
    return jnp.logical_xor(A, legacy_broadcast(B, jnp.ndim(A), broadcast, axis))


@onnx("Xor", since=7)
def xor(A, B):
    """Xor(bool A, bool B) -> bool C."""
    return jnp.logical_xor(A, B)
