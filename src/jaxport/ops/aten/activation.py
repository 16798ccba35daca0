"""ATen lowerings: activation functions (relu, gelu, elu, silu, ... and their parameters).

Outputs keep the input's dtype. float16/bfloat16 math runs in float32 and
rounds once at the end, as PyTorch's CPU kernels do. Scalar parameters
(`alpha`, `negative_slope`, ...) arrive as Python numbers.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from jax import lax

from ..registry import aten
from ._promotion import opmath_type

_SELU_ALPHA = 1.6732632423543772848170429916717
_SELU_SCALE = 1.0507009873554804934193349852946


def _compute(self):
    return self.astype(opmath_type(self.dtype))


def _scalar(value, like):
    """A Python scalar parameter as a 0-d array of `like`'s dtype."""
    return jnp.asarray(value, like.dtype)


def _between(x, low, high):
    """PyTorch's clamp with scalar bounds: `x` where it ties with a bound (hardtanh(-0.0, 0.0, 6.0)
    is -0.0 in every CPU loop, where IEEE maximum gives +0.0), NaN from `x` or a bound, `high`
    where `low > high`."""
    floating = jnp.issubdtype(x.dtype, jnp.inexact)
    x = jnp.where((x < low) | jnp.isnan(low) if floating else x < low, low, x)
    return jnp.where((x > high) | jnp.isnan(high) if floating else x > high, high, x)


def _elu(self, alpha, scale, input_scale):
    x = _compute(self)
    negative = _scalar(alpha * scale, x) * jnp.expm1(x * _scalar(input_scale, x))
    return jnp.where(x > 0, x * _scalar(scale, x), negative).astype(self.dtype)


def _softplus(x):
    return jnp.logaddexp(x, jnp.zeros_like(x))


@aten("_prelu_kernel.default")
def aten__prelu_kernel(self, weight):
    """_prelu_kernel(Tensor self, Tensor weight) -> Tensor"""
    x, w = _compute(self), weight.astype(opmath_type(self.dtype))
    return jnp.where(x > 0, x, w * x).astype(self.dtype)


@aten("celu.default")
def aten_celu(self, alpha=1.0):
    """celu(Tensor self, Scalar alpha=1.) -> Tensor"""
    return _elu(self, alpha, 1.0, 1.0 / alpha)


@aten("elu.default")
def aten_elu(self, alpha=1, scale=1, input_scale=1):
    """elu(Tensor self, Scalar alpha=1, Scalar scale=1, Scalar input_scale=1) -> Tensor"""
    return _elu(self, alpha, scale, input_scale)


@aten("gelu.default")
def aten_gelu(self, *, approximate="none"):
    """gelu(Tensor self, *, str approximate="none") -> Tensor"""
    x = _compute(self)
    half = _scalar(0.5, x)
    if approximate == "tanh":
        inner = _scalar(math.sqrt(2 / math.pi), x) * (x + _scalar(0.044715, x) * x * x * x)
        out = half * x * (1 + jnp.tanh(inner))
    else:
        out = half * x * (1 + lax.erf(x * _scalar(1 / math.sqrt(2), x)))
    return out.astype(self.dtype)


@aten("glu.default")
def aten_glu(self, dim=-1):
    """glu(Tensor self, int dim=-1) -> Tensor"""
    a, b = jnp.split(_compute(self), 2, axis=dim)
    return (a * jax.nn.sigmoid(b)).astype(self.dtype)


@aten("hardshrink.default")
def aten_hardshrink(self, lambd=0.5):
    """hardshrink(Tensor self, Scalar lambd=0.5) -> Tensor"""
    x = _compute(self)
    lambd = _scalar(lambd, x)
    return jnp.where((x >= -lambd) & (x <= lambd), jnp.zeros_like(x), x).astype(self.dtype)


@aten("hardsigmoid.default")
def aten_hardsigmoid(self):
    """hardsigmoid(Tensor self) -> Tensor"""
    x = _compute(self)
    return (jnp.clip(x + 3, 0, 6) / 6).astype(self.dtype)


@aten("hardswish.default")
def aten_hardswish(self):
    """hardswish(Tensor self) -> Tensor"""
    x = _compute(self)
    return (x * jnp.clip(x + 3, 0, 6) / 6).astype(self.dtype)


@aten("hardtanh.default")
def aten_hardtanh(self, min_val=-1, max_val=1):
    """hardtanh(Tensor self, Scalar min_val=-1, Scalar max_val=1) -> Tensor"""
    if jnp.issubdtype(self.dtype, jnp.integer):
        min_val, max_val = int(min_val), int(max_val)
    x = _compute(self)
    low, high = _scalar(min_val, x), _scalar(max_val, x)
    out = _between(x, low, high)
    if jnp.issubdtype(x.dtype, jnp.inexact):
        # Gradients pass strictly inside the bounds, as hardtanh_backward passes them: none at a
        # tie, where `x` itself is returned (clamp's backward passes them there; this does not).
        out = jnp.where((x > low) & (x < high), out, lax.stop_gradient(out))
    return out.astype(self.dtype)


@aten("leaky_relu.default")
def aten_leaky_relu(self, negative_slope=0.01):
    """leaky_relu(Tensor self, Scalar negative_slope=0.01) -> Tensor"""
    x = _compute(self)
    return jnp.where(x > 0, x, x * _scalar(negative_slope, x)).astype(self.dtype)


def _log_sigmoid(x):
    # PyTorch's CPU kernel: min(x, 0) - log1p(exp(-|x|)), which is +0.0 where exp(-|x|)
    # underflows (x = inf, large x); -softplus(-x) gives -0.0 there. The min is a where so its
    # gradient at 0 goes to one side only (jnp.minimum would split it and give 1, not 0.5).
    return jnp.where(x < 0, x, jnp.zeros_like(x)) - jnp.log1p(jnp.exp(-jnp.abs(x)))


@aten("log_sigmoid.default")
def aten_log_sigmoid(self):
    """log_sigmoid(Tensor self) -> Tensor"""
    return _log_sigmoid(_compute(self)).astype(self.dtype)


@aten("log_sigmoid_forward.default")
def aten_log_sigmoid_forward(self):
    """log_sigmoid_forward(Tensor self) -> (Tensor output, Tensor buffer)"""
    x = _compute(self)
    # The buffer is what PyTorch's CPU kernel saves for the backward: exp(-|x|).
    buffer = jnp.exp(-jnp.abs(x))
    return _log_sigmoid(x).astype(self.dtype), buffer.astype(self.dtype)


@aten("mish.default")
def aten_mish(self):
    """mish(Tensor self) -> Tensor"""
    x = _compute(self)
    return (x * jnp.tanh(_softplus(x))).astype(self.dtype)


@aten("prelu.default")
def aten_prelu(self, weight):
    """prelu(Tensor self, Tensor weight) -> Tensor"""
    if weight.size != 1 and self.ndim >= 2:
        weight = weight.reshape((-1,) + (1,) * (self.ndim - 2))
    elif weight.size == 1:
        weight = weight.reshape(())
    return aten__prelu_kernel(self, weight)


@aten("relu.default")
def aten_relu(self):
    """relu(Tensor self) -> Tensor; NaN and -0.0 pass through, as in PyTorch's clamp_min(x, 0)."""
    return jnp.where(self < 0, jnp.zeros_like(self), self) if self.dtype != jnp.bool_ else self


@aten("relu6.default")
def aten_relu6(self):
    """relu6(Tensor self) -> Tensor"""
    return aten_hardtanh(self, 0, 6)


@aten("rrelu.default", random=True)
def aten_rrelu(self, lower=0.125, upper=1.0 / 3.0, training=False, generator=None, *, key):
    """rrelu(Tensor self, Scalar lower=0.125, Scalar upper=0.33333333333333331, bool training=False, Generator? generator=None) -> Tensor"""
    return aten_rrelu_with_noise_functional(self, self, lower, upper, training, generator, key=key)[
        0
    ]


@aten("rrelu_with_noise.default", random=True)
def aten_rrelu_with_noise(
    self, noise, lower=0.125, upper=1.0 / 3.0, training=False, generator=None, *, key
):
    """rrelu_with_noise(Tensor self, Tensor(b!) noise, Scalar lower=0.125, Scalar upper=0.33333333333333331, bool training=False, Generator? generator=None) -> Tensor"""
    return aten_rrelu_with_noise_functional(
        self, noise, lower, upper, training, generator, key=key
    )[0]


@aten("rrelu_with_noise_functional.default", random=True)
def aten_rrelu_with_noise_functional(
    self, noise, lower=0.125, upper=1.0 / 3.0, training=False, generator=None, *, key
):
    """rrelu_with_noise_functional(Tensor self, Tensor noise, Scalar lower=0.125, Scalar upper=0.33333333333333331, bool training=False, Generator? generator=None) -> (Tensor, Tensor noise_out)"""
    x = _compute(self)
    if not training:
        return aten_leaky_relu(self, (lower + upper) / 2), noise
    slope = jax.random.uniform(key, x.shape, x.dtype, lower, upper)
    slope = jnp.where(x > 0, jnp.ones_like(x), slope)
    return (x * slope).astype(self.dtype), slope.astype(noise.dtype)


@aten("selu.default")
def aten_selu(self):
    """selu(Tensor self) -> Tensor"""
    return _elu(self, _SELU_ALPHA, _SELU_SCALE, 1.0)


@aten("silu.default")
def aten_silu(self):
    """silu(Tensor self) -> Tensor"""
    x = _compute(self)
    return (x / (1 + jnp.exp(-x))).astype(self.dtype)


@aten("softplus.default")
def aten_softplus(self, beta=1, threshold=20):
    """softplus(Tensor self, Scalar beta=1, Scalar threshold=20) -> Tensor"""
    x = _compute(self)
    scaled = x * _scalar(beta, x)
    soft = jnp.log1p(jnp.exp(scaled)) / _scalar(beta, x)
    return jnp.where(scaled > _scalar(threshold, x), x, soft).astype(self.dtype)


@aten("softshrink.default")
def aten_softshrink(self, lambd=0.5):
    """softshrink(Tensor self, Scalar lambd=0.5) -> Tensor"""
    x = _compute(self)
    lambd = _scalar(lambd, x)
    # x * 0 in the middle, as PyTorch's kernel: NaN stays NaN, a negative x gives -0.0.
    out = jnp.where(x > lambd, x - lambd, jnp.where(x < -lambd, x + lambd, x * 0))
    return out.astype(self.dtype)


@aten("threshold.default")
def aten_threshold(self, threshold, value):
    """threshold(Tensor self, Scalar threshold, Scalar value) -> Tensor"""
    if jnp.issubdtype(self.dtype, jnp.integer):
        return jnp.where(self <= int(threshold), jnp.asarray(int(value), self.dtype), self)
    x = _compute(self)
    return jnp.where(x <= _scalar(threshold, x), _scalar(value, x), x).astype(self.dtype)
