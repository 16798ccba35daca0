"""ATen lowerings: unary math functions, rounding and classification (special functions:
`special`, `bessel`, `polynomials`).

Ops that turn integers into floats compute in float32 (`float_type`); float16
and bfloat16 compute in float32 and round once at the end (`opmath_type`), as
PyTorch's CPU kernels do. Ops that keep the input dtype leave integers alone.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ..registry import aten
from ._promotion import canonical, float_type, is_integral, opmath_type


def _float_unary(fn, self):
    """An int-to-float unary op computed in opmath precision."""
    out_dtype = float_type(self.dtype)
    return fn(self.astype(opmath_type(out_dtype))).astype(out_dtype)


def _same_dtype(fn, self):
    """A float-only unary op that keeps the input dtype, computed in opmath precision."""
    return fn(self.astype(opmath_type(self.dtype))).astype(self.dtype)


@aten("_conj.default", "conj_physical.default", "_conj_physical.default")
def aten__conj(self):
    """_conj(Tensor(a) self) -> Tensor(a)"""
    # JAX has no lazy conjugate bit: conjugating is a real op, and a no-op on real dtypes.
    return jnp.conj(self) if jnp.iscomplexobj(self) else self


@aten("abs.default")
def aten_abs(self):
    """abs(Tensor self) -> Tensor"""
    if self.dtype == jnp.bool_:
        return self
    return jnp.abs(self)


@aten("acos.default")
def aten_acos(self):
    """acos(Tensor self) -> Tensor"""
    return _float_unary(jnp.arccos, self)


@aten("acosh.default")
def aten_acosh(self):
    """acosh(Tensor self) -> Tensor"""
    return _float_unary(jnp.arccosh, self)


@aten("angle.default")
def aten_angle(self):
    """angle(Tensor self) -> Tensor"""
    if jnp.iscomplexobj(self):
        return jnp.angle(self)  # atan2(imag, real), as std::arg; a real dtype of the same width

    # Real inputs: pi below zero, 0 elsewhere (-0.0 included, where atan2 would give pi), NaN kept.
    def fn(x):
        angle = jnp.where(x < 0, jnp.asarray(math.pi, x.dtype), jnp.zeros((), x.dtype))
        return jnp.where(jnp.isnan(x), x, angle)

    return _float_unary(fn, self)


@aten("asin.default")
def aten_asin(self):
    """asin(Tensor self) -> Tensor"""
    return _float_unary(jnp.arcsin, self)


@aten("asinh.default")
def aten_asinh(self):
    """asinh(Tensor self) -> Tensor"""
    return _float_unary(jnp.arcsinh, self)


@aten("atan.default")
def aten_atan(self):
    """atan(Tensor self) -> Tensor"""
    return _float_unary(jnp.arctan, self)


@aten("atanh.default")
def aten_atanh(self):
    """atanh(Tensor self) -> Tensor"""
    return _float_unary(jnp.arctanh, self)


@aten("bitwise_not.default")
def aten_bitwise_not(self):
    """bitwise_not(Tensor self) -> Tensor"""
    return jnp.bitwise_not(self)


@aten("ceil.default")
def aten_ceil(self):
    """ceil(Tensor self) -> Tensor"""
    if is_integral(self):
        return self
    return jnp.ceil(self)


@aten("cos.default")
def aten_cos(self):
    """cos(Tensor self) -> Tensor"""
    return _float_unary(jnp.cos, self)


@aten("cosh.default")
def aten_cosh(self):
    """cosh(Tensor self) -> Tensor"""
    return _float_unary(jnp.cosh, self)


@aten("deg2rad.default")
def aten_deg2rad(self):
    """deg2rad(Tensor self) -> Tensor"""
    return _float_unary(lambda x: x * jnp.asarray(math.pi / 180.0, x.dtype), self)


@aten("erf.default")
def aten_erf(self):
    """erf(Tensor self) -> Tensor"""
    return _float_unary(lax.erf, self)


@aten("erfc.default")
def aten_erfc(self):
    """erfc(Tensor self) -> Tensor"""
    return _float_unary(lax.erfc, self)


@aten("erfinv.default")
def aten_erfinv(self):
    """erfinv(Tensor self) -> Tensor"""
    return _float_unary(lax.erf_inv, self)


@aten("exp.default")
def aten_exp(self):
    """exp(Tensor self) -> Tensor"""
    return _float_unary(jnp.exp, self)


@aten("exp2.default")
def aten_exp2(self):
    """exp2(Tensor self) -> Tensor"""
    return _float_unary(jnp.exp2, self)


@aten("expm1.default")
def aten_expm1(self):
    """expm1(Tensor self) -> Tensor"""
    return _float_unary(jnp.expm1, self)


@aten("floor.default")
def aten_floor(self):
    """floor(Tensor self) -> Tensor"""
    if is_integral(self):
        return self
    return jnp.floor(self)


@aten("frac.default")
def aten_frac(self):
    """frac(Tensor self) -> Tensor"""
    return self - jnp.trunc(self)


@aten("frexp.Tensor")
def aten_frexp(self):
    """frexp.Tensor(Tensor self) -> (Tensor mantissa, Tensor exponent)"""
    mantissa, exponent = jnp.frexp(self)
    return mantissa.astype(self.dtype), exponent.astype(np.int32)


@aten("isfinite.default")
def aten_isfinite(self):
    """isfinite(Tensor self) -> Tensor"""
    if is_integral(self):
        return jnp.ones(self.shape, jnp.bool_)
    return jnp.isfinite(self)


@aten("isinf.default")
def aten_isinf(self):
    """isinf(Tensor self) -> Tensor"""
    if is_integral(self):
        return jnp.zeros(self.shape, jnp.bool_)
    return jnp.isinf(self)


@aten("isnan.default")
def aten_isnan(self):
    """isnan(Tensor self) -> Tensor"""
    if is_integral(self):
        return jnp.zeros(self.shape, jnp.bool_)
    return jnp.isnan(self)


@aten("isneginf.default")
def aten_isneginf(self):
    """isneginf(Tensor self) -> Tensor"""
    if is_integral(self):
        return jnp.zeros(self.shape, jnp.bool_)
    return jnp.isneginf(self)


@aten("isposinf.default")
def aten_isposinf(self):
    """isposinf(Tensor self) -> Tensor"""
    if is_integral(self):
        return jnp.zeros(self.shape, jnp.bool_)
    return jnp.isposinf(self)


@aten("lgamma.default")
def aten_lgamma(self):
    """lgamma(Tensor self) -> Tensor"""
    return _float_unary(lax.lgamma, self)


@aten("log.default")
def aten_log(self):
    """log(Tensor self) -> Tensor"""
    return _float_unary(jnp.log, self)


@aten("log10.default")
def aten_log10(self):
    """log10(Tensor self) -> Tensor"""
    return _float_unary(jnp.log10, self)


@aten("log1p.default")
def aten_log1p(self):
    """log1p(Tensor self) -> Tensor"""
    return _float_unary(jnp.log1p, self)


@aten("log2.default")
def aten_log2(self):
    """log2(Tensor self) -> Tensor"""
    return _float_unary(jnp.log2, self)


@aten("logical_not.default")
def aten_logical_not(self):
    """logical_not(Tensor self) -> Tensor"""
    return jnp.logical_not(self.astype(jnp.bool_))


@aten("logit.default")
def aten_logit(self, eps=None):
    """logit(Tensor self, float? eps=None) -> Tensor"""

    def fn(x):
        if eps is not None:
            x = jnp.clip(x, jnp.asarray(eps, x.dtype), jnp.asarray(1.0 - eps, x.dtype))
        return jnp.log(x / (1 - x))

    return _float_unary(fn, self)


@aten("nan_to_num.default")
def aten_nan_to_num(self, nan=None, posinf=None, neginf=None):
    """nan_to_num(Tensor self, float? nan=None, float? posinf=None, float? neginf=None) -> Tensor"""
    if is_integral(self):
        return self
    info = jnp.finfo(self.dtype)
    nan = jnp.asarray(0.0 if nan is None else nan, self.dtype)
    posinf = jnp.asarray(info.max if posinf is None else posinf, self.dtype)
    neginf = jnp.asarray(info.min if neginf is None else neginf, self.dtype)
    out = jnp.where(jnp.isnan(self), nan, self)
    out = jnp.where(jnp.isposinf(self), posinf, out)
    return jnp.where(jnp.isneginf(self), neginf, out)


@aten("neg.default")
def aten_neg(self):
    """neg(Tensor self) -> Tensor"""
    return -self


@aten("positive.default")
def aten_positive(self):
    """positive(Tensor(a) self) -> Tensor(a)"""
    return self


@aten("rad2deg.default")
def aten_rad2deg(self):
    """rad2deg(Tensor self) -> Tensor"""
    return _float_unary(lambda x: x * jnp.asarray(180.0 / math.pi, x.dtype), self)


@aten("reciprocal.default")
def aten_reciprocal(self):
    """reciprocal(Tensor self) -> Tensor"""
    return _float_unary(lambda x: 1 / x, self)


@aten("round.default")
def aten_round(self):
    """round(Tensor self) -> Tensor"""
    if is_integral(self):
        return self
    return jnp.round(self)  # half to even, as std::nearbyint


@aten("round.decimals")
def aten_round_decimals(self, *, decimals):
    """round.decimals(Tensor self, *, int decimals) -> Tensor"""
    if is_integral(self):
        return self

    def fn(x):
        scale = jnp.asarray(10.0 ** abs(decimals), x.dtype)
        if decimals < 0:
            return jnp.round(x / scale) * scale
        return jnp.round(x * scale) / scale

    return _same_dtype(fn, self)


@aten("rsqrt.default")
def aten_rsqrt(self):
    """rsqrt(Tensor self) -> Tensor"""
    return _float_unary(lax.rsqrt, self)


@aten("sgn.default", "sign.default")
def aten_sign(self):
    """sign(Tensor self) -> Tensor"""  # sgn(Tensor self) -> Tensor for complex tensors
    if self.dtype == jnp.bool_:
        return self
    if jnp.iscomplexobj(self):  # sgn: z / |z|, 0 at 0; each part divided by |z|, as c10::complex / T
        magnitude = jnp.abs(self)
        zero = self == 0
        safe = jnp.where(zero, jnp.ones((), magnitude.dtype), magnitude)  # no 0/0 in the derivative
        unit = lax.complex(jnp.real(self) / safe, jnp.imag(self) / safe)
        return jnp.where(zero, jnp.zeros((), self.dtype), unit)
    # PyTorch: sign(nan) = 0
    return (self > 0).astype(self.dtype) - (self < 0).astype(self.dtype)


@aten("sigmoid.default")
def aten_sigmoid(self):
    """sigmoid(Tensor self) -> Tensor"""
    return _float_unary(jax.nn.sigmoid, self)


@aten("signbit.default")
def aten_signbit(self):
    """signbit(Tensor self) -> Tensor"""
    if is_integral(self):
        return self < 0 if self.dtype != jnp.bool_ else jnp.zeros(self.shape, jnp.bool_)
    return jnp.signbit(self)


@aten("sin.default")
def aten_sin(self):
    """sin(Tensor self) -> Tensor"""
    return _float_unary(jnp.sin, self)


@aten("sinc.default")
def aten_sinc(self):
    """sinc(Tensor self) -> Tensor"""

    def fn(x):
        product = jnp.asarray(math.pi, x.dtype) * x
        safe = jnp.where(x == 0, jnp.ones((), x.dtype), product)
        return jnp.where(x == 0, jnp.ones((), x.dtype), jnp.sin(safe) / safe)

    return _float_unary(fn, self)


@aten("sinh.default")
def aten_sinh(self):
    """sinh(Tensor self) -> Tensor"""
    return _float_unary(jnp.sinh, self)


@aten("sqrt.default")
def aten_sqrt(self):
    """sqrt(Tensor self) -> Tensor"""
    return _float_unary(jnp.sqrt, self)


@aten("square.default")
def aten_square(self):
    """square(Tensor self) -> Tensor"""
    if self.dtype == jnp.bool_:
        return self.astype(canonical(np.int64))
    return self * self


@aten("tan.default")
def aten_tan(self):
    """tan(Tensor self) -> Tensor"""
    return _float_unary(jnp.tan, self)


@aten("tanh.default")
def aten_tanh(self):
    """tanh(Tensor self) -> Tensor"""
    return _float_unary(jnp.tanh, self)


@aten("trunc.default", "fix.default")
def aten_trunc(self):
    """trunc(Tensor self) -> Tensor"""
    if is_integral(self):
        return self
    return jnp.trunc(self)
