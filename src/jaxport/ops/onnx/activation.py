"""ONNX activations and normalized exponentials: Relu, Gelu, Softmax, ..."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from jax import lax

from ..registry import onnx
from ._helpers import normalize_axis


def _as_2d(fn, x, axis: int):
    """Opset < 13 Softmax/LogSoftmax/Hardmax: `fn` over the last axis of `x` seen as a
    matrix [prod(shape[:axis]), prod(shape[axis:])]."""
    x = jnp.asarray(x)
    axis = normalize_axis(axis, x.ndim)
    rows, cols = math.prod(x.shape[:axis]), math.prod(x.shape[axis:])
    return _wide(fn, x.reshape(rows, cols), -1).reshape(x.shape)


def _hardmax(x, axis: int):
    x = jnp.asarray(x)
    axis = normalize_axis(axis, x.ndim)
    if x.shape[axis] == 0:
        return jnp.zeros_like(x)
    first = jnp.expand_dims(jnp.argmax(x, axis=axis), axis)
    positions = lax.broadcasted_iota(first.dtype, x.shape, axis)
    return (positions == first).astype(x.dtype)


def _plus_zero(x):
    """`x` with -0.0 made 0.0 (`expm1(-0.0)` is -0.0 where `exp(-0.0) - 1` is 0.0)."""
    return jnp.where(x == 0, jnp.zeros_like(x), x)


def _softplus(x):
    return jnp.logaddexp(x, 0.0)


def _wide(fn, x, *args):
    """`fn(x, *args)` with float16/bfloat16 `x` evaluated in float32 and rounded back once:
    chains of half-precision steps (Gelu's cube, Softmax's sum) lose several bits."""
    x = jnp.asarray(x)
    if x.dtype in (jnp.float16, jnp.bfloat16):
        return fn(x.astype(jnp.float32), *args).astype(x.dtype)
    return fn(x, *args)


@onnx("Celu", since=12)
def celu(X, *, alpha=1.0):
    """Celu(T X) -> T Y; max(0, x) + min(0, alpha * (exp(x / alpha) - 1)): 0 at -0.0, as that
    formula gives (and onnxruntime)."""
    return _wide(lambda x: jnp.where(x > 0, x, _plus_zero(alpha * jnp.expm1(x / alpha))), X)


@onnx("Elu", since=1)
def elu(X, *, alpha=1.0, consumed_inputs=None):
    """Elu(T X) -> T Y; alpha * (exp(x) - 1) below 0, x elsewhere."""
    return _wide(lambda x: jnp.where(x < 0, alpha * jnp.expm1(x), x), X)


@onnx("Gelu", since=20)
def gelu(X, *, approximate="none"):
    """Gelu(T X) -> T Y; approximate "none" (erf) or "tanh"."""
    if approximate not in ("none", "tanh"):
        raise ValueError(f"Gelu: approximate must be 'none' or 'tanh', not {approximate!r}")
    return _wide(jax.nn.gelu, X, approximate == "tanh")


@onnx("HardSigmoid", since=1)
def hard_sigmoid(X, *, alpha=0.2, beta=0.5, consumed_inputs=None):
    """HardSigmoid(T X) -> T Y; max(0, min(1, alpha * x + beta))."""
    return _wide(lambda x: jnp.clip(alpha * x + beta, 0, 1), X)


@onnx("HardSwish", since=14)
def hard_swish(X):
    """HardSwish(T X) -> T Y; x * max(0, min(1, x / 6 + 1 / 2))."""
    return _wide(lambda x: x * jnp.clip(x * (1 / 6) + 0.5, 0, 1), X)


@onnx("Hardmax", since=1)
def hardmax_1(input, *, axis=1):
    """Hardmax-1/11(T input) -> T output; over the input flattened to 2-D at `axis`."""
    return _as_2d(_hardmax, input, axis)


@onnx("Hardmax", since=13)
def hardmax(input, *, axis=-1):
    """Hardmax(T input) -> T output; 1 at the first maximum along `axis`, 0 elsewhere."""
    return _hardmax(input, axis)


@onnx("LeakyRelu", since=1)
def leaky_relu(X, *, alpha=0.01, consumed_inputs=None):
    """LeakyRelu(T X) -> T Y; alpha * x below 0, x elsewhere."""
    return jnp.where(X < 0, alpha * X, X)


@onnx("LogSoftmax", since=1)
def log_softmax_1(input, *, axis=1):
    """LogSoftmax-1/11(T input) -> T output; over the input flattened to 2-D at `axis`."""
    return _as_2d(jax.nn.log_softmax, input, axis)


@onnx("LogSoftmax", since=13)
def log_softmax(input, *, axis=-1):
    """LogSoftmax(T input) -> T output; along `axis`."""
    return _wide(jax.nn.log_softmax, input, axis)


@onnx("Mish", since=18)
def mish(X):
    """Mish(T X) -> T Y; x * tanh(softplus(x))."""
    return _wide(lambda x: x * jnp.tanh(_softplus(x)), X)


@onnx("PRelu", since=1)
def prelu_1(X, slope, *, consumed_inputs=None):
    """PRelu-1/6(T X, T slope) -> T Y; a 1-D slope of X's channel count applies per channel
    (axis 1), as before unidirectional broadcasting (opset 7)."""
    slope = jnp.asarray(slope)
    if slope.size == 1:
        slope = slope.reshape(())
    elif slope.ndim == 1 and jnp.ndim(X) > 2 and slope.shape[0] == jnp.shape(X)[1]:
        slope = slope.reshape((-1,) + (1,) * (jnp.ndim(X) - 2))
    return jnp.where(X < 0, slope * X, X)


@onnx("PRelu", since=7)
def prelu(X, slope):
    """PRelu(T X, T slope) -> T Y; slope * x below 0, x elsewhere; slope broadcasts to X."""
    return jnp.where(X < 0, slope * X, X)


@onnx("Relu", since=1)
def relu(X, *, consumed_inputs=None):
    """Relu(T X) -> T Y; max(0, x): NaN and -0.0 pass through, as in onnxruntime."""
    return jnp.where(X < 0, jnp.zeros_like(X), X)


@onnx("Selu", since=1)
def selu_1(X, *, alpha=1.6732, gamma=1.0507, consumed_inputs=None):
    """Selu-1(T X) -> T Y; defaults rounded to 4 decimals in this version."""
    return selu(X, alpha=alpha, gamma=gamma)


@onnx("Selu", since=6)
def selu(X, *, alpha=1.67326319217681884765625, gamma=1.05070102214813232421875):
    """Selu(T X) -> T Y; gamma * x above 0, gamma * (alpha * exp(x) - alpha) elsewhere: 0 at
    -0.0, as that formula gives (and onnxruntime)."""
    return _wide(lambda x: jnp.where(x > 0, gamma * x, _plus_zero((gamma * alpha) * jnp.expm1(x))), X)


@onnx("Shrink", since=9)
def shrink(input, *, bias=0.0, lambd=0.5):
    """Shrink(T input) -> T output; x + bias below -lambd, x - bias above lambd, else 0."""
    x = jnp.asarray(input)
    # Integer inputs: the float attributes apply in floating point, the result casts back.
    if not jnp.issubdtype(x.dtype, jnp.floating):
        x = x.astype(jax.dtypes.canonicalize_dtype(jnp.float64))
    out = jnp.where(x < -lambd, x + bias, jnp.where(x > lambd, x - bias, 0))
    return out.astype(jnp.asarray(input).dtype)


@onnx("Sigmoid", since=1)
def sigmoid(X, *, consumed_inputs=None):
    """Sigmoid(T X) -> T Y; 1 / (1 + exp(-x))."""
    return _wide(jax.nn.sigmoid, X)


@onnx("Softmax", since=1)
def softmax_1(input, *, axis=1):
    """Softmax-1/11(T input) -> T output; over the input flattened to 2-D at `axis`."""
    return _as_2d(jax.nn.softmax, input, axis)


@onnx("Softmax", since=13)
def softmax(input, *, axis=-1):
    """Softmax(T input) -> T output; along `axis`."""
    return _wide(jax.nn.softmax, input, axis)


@onnx("Softplus", since=1)
def softplus(X):
    """Softplus(T X) -> T Y; ln(exp(x) + 1)."""
    return _wide(_softplus, X)


@onnx("Softsign", since=1)
def softsign(input):
    """Softsign(T input) -> T output; x / (1 + |x|)."""
    return _wide(lambda x: x / (1 + jnp.abs(x)), input)


@onnx("SwiGLU", since=28)
def swiglu(A, B, *, alpha=1.0):
    """SwiGLU(T A, T B) -> T Y; A * sigmoid(alpha * A) * B."""
    return _wide(lambda a, b: a * jax.nn.sigmoid(alpha * a) * b.astype(a.dtype), A, B)


@onnx("Swish", since=24)
def swish(X, *, alpha=1.0):
    """Swish(T X) -> T Y; x * sigmoid(alpha * x)."""
    return _wide(lambda x: x * jax.nn.sigmoid(alpha * x), X)


@onnx("ThresholdedRelu", since=10)
def thresholded_relu(X, *, alpha=1.0):
    """ThresholdedRelu(T X) -> T Y; x above alpha, 0 elsewhere."""
    return jnp.where(X > alpha, X, 0)
