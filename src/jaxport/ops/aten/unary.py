"""ATen lowerings: unary math functions, rounding, classification and special functions.

Ops that turn integers into floats compute in float32 (`float_type`); float16
and bfloat16 compute in float32 and round once at the end (`opmath_type`), as
PyTorch's CPU kernels do. Ops that keep the input dtype leave integers alone.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import jax.scipy.special as jsp
import numpy as np
from jax import lax

from ..registry import aten
from ._promotion import canonical, float_type, is_integral, opmath_type, result_type


def _float_unary(fn, self):
    """An int-to-float unary op computed in opmath precision."""
    out_dtype = float_type(self.dtype)
    return fn(self.astype(opmath_type(out_dtype))).astype(out_dtype)


def _same_dtype(fn, self):
    """A float-only unary op that keeps the input dtype, computed in opmath precision."""
    return fn(self.astype(opmath_type(self.dtype))).astype(self.dtype)


# Chebyshev coefficients of PyTorch's (Cephes') modified Bessel functions K0 and K1,
# for x <= 2 (A) and x > 2 (B).
_K0_A = (
    1.374465435613523e-16,
    4.25981614279661e-14,
    1.0349695257633842e-11,
    1.904516377220209e-09,
    2.5347910790261494e-07,
    2.286212103119452e-05,
    0.001264615411446926,
    0.0359799365153615,
    0.3442898999246285,
    -0.5353273932339028,
)
_K0_B = (
    5.300433772686263e-18,
    -1.6475804301524212e-17,
    5.2103915050390274e-17,
    -1.678231096805412e-16,
    5.512055978524319e-16,
    -1.848593377343779e-15,
    6.3400764774050706e-15,
    -2.2275133269916698e-14,
    8.032890775363575e-14,
    -2.9800969231727303e-13,
    1.140340588208475e-12,
    -4.514597883373944e-12,
    1.8559491149547177e-11,
    -7.957489244477107e-11,
    3.577397281400301e-10,
    -1.69753450938906e-09,
    8.574034017414225e-09,
    -4.660489897687948e-08,
    2.766813639445015e-07,
    -1.8317555227191195e-06,
    1.39498137188765e-05,
    -0.00012849549581627802,
    0.0015698838857300533,
    -0.0314481013119645,
    2.4403030820659555,
)
_K1_A = (
    -7.023863479386288e-18,
    -2.427449850519366e-15,
    -6.666901694199329e-13,
    -1.4114883926335278e-10,
    -2.213387630734726e-08,
    -2.4334061415659684e-06,
    -0.0001730288957513052,
    -0.006975723859639864,
    -0.12261118082265715,
    -0.3531559607765449,
    1.5253002273389478,
)
_K1_B = (
    -5.756744483665017e-18,
    1.7940508731475592e-17,
    -5.689462558442859e-17,
    1.838093544366639e-16,
    -6.057047248373319e-16,
    2.038703165624334e-15,
    -7.019837090418314e-15,
    2.4771544244813043e-14,
    -8.976705182324994e-14,
    3.3484196660784293e-13,
    -1.2891739609510289e-12,
    5.13963967348173e-12,
    -2.1299678384275683e-11,
    9.218315187605006e-11,
    -4.1903547593418965e-10,
    2.015049755197033e-09,
    -1.0345762465678097e-08,
    5.7410841254500495e-08,
    -3.5019606030878126e-07,
    2.406484947837217e-06,
    -1.936197974166083e-05,
    0.00019521551847135162,
    -0.002857816859622779,
    0.10392373657681724,
    2.7206261904844427,
)


def _chbevl(y, coefficients):
    """Clenshaw's recurrence over a Chebyshev series, as the Cephes kernels evaluate it."""
    p = q = jnp.zeros_like(y)
    a = jnp.full_like(y, coefficients[0])
    for c in coefficients[1:]:
        p, q = q, a
        a = y * q - p + c
    return 0.5 * (a - p)


def _bessel_k(x, order, scaled):
    """K0 or K1 of PyTorch's kernels; `scaled` multiplies by exp(x)."""
    small_x = jnp.where(x <= 2, x, jnp.ones_like(x))
    large_x = jnp.where(x > 2, x, jnp.full_like(x, 4.0))
    if order == 0:
        small = _chbevl(small_x * small_x - 2, _K0_A) - jnp.log(0.5 * small_x) * jsp.i0(small_x)
        large = _chbevl(8 / large_x - 2, _K0_B) / jnp.sqrt(large_x)
    else:
        small = jnp.log(0.5 * small_x) * jsp.i1(small_x) + _chbevl(small_x * small_x - 2, _K1_A) / small_x
        large = _chbevl(8 / large_x - 2, _K1_B) / jnp.sqrt(large_x)
    if scaled:
        small = small * jnp.exp(small_x)
    else:
        large = jnp.exp(-large_x) * large
    out = jnp.where(x <= 2, small, large)
    out = jnp.where(x < 0, jnp.full_like(x, np.nan), out)
    return jnp.where(x == 0, jnp.full_like(x, np.inf), out)


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


def _digamma(x):
    # PyTorch: digamma(+-0) = -+inf (scipy's convention); JAX gives nan there.
    pole = jnp.copysign(jnp.asarray(np.inf, x.dtype), -x)
    return jnp.where(x == 0, pole, jsp.digamma(x))


def _trigamma(x):
    # PyTorch's trigamma: reflection below 1/2, six recurrence steps, then the asymptotic series
    one = jnp.ones((), x.dtype)
    pi = jnp.asarray(math.pi, x.dtype)
    reflect = x < 0.5
    sin_pi_x = jnp.sin(pi * x)
    result = jnp.where(reflect, -(pi * pi) / (sin_pi_x * sin_pi_x), jnp.zeros((), x.dtype))
    x = jnp.where(reflect, one - x, x)
    for _ in range(6):
        result = result + one / (x * x)
        x = x + one
    ixx = one / (x * x)
    series = (one + one / (2 * x) + ixx * (one / 6 - ixx * (one / 30 - ixx * (one / 42)))) / x
    result = result + series
    return jnp.where(reflect, -result, result)


_ZETA_A = (
    12.0, -720.0, 30240.0, -1209600.0, 47900160.0, -1.8924375803183791606e9, 7.47242496e10,
    -2.950130727918164224e12, 1.1646782814350067249e14, -4.5979787224074726105e15,
    1.8152105401943546773e17, -7.1661652561756670113e18,
)


def _zeta(x, q):
    """Hurwitz zeta as PyTorch's CPU kernel (Cephes, in float64): JAX's is inaccurate for q < 0."""
    out_dtype = x.dtype
    acc = canonical(np.float64)
    x, q = jnp.broadcast_arrays(x.astype(acc), q.astype(acc))
    eps = 1.11022302462515654042e-16
    one = jnp.ones((), acc)
    inf = jnp.asarray(np.inf, acc)
    nan = jnp.asarray(np.nan, acc)
    special = (x <= 1) | (q <= 0) & ((q == jnp.floor(q)) | (x != jnp.floor(x))) | ~jnp.isfinite(q)

    # direct summation until a > 9 (and at least 9 terms), stopping early once terms are negligible;
    # 10**6 terms at most bounds the loop for absurdly negative q, where PyTorch loops on
    def cond(state):
        i, _, _, _, done, _ = state
        return jnp.any(~done) & (i < 1_000_000)

    def body(state):
        i, a, b, s, done, returned = state
        a_next = a + one
        b_next = a_next ** -x
        s_next = s + b_next
        a, b, s = (jnp.where(done, old, new) for old, new in ((a, a_next), (b, b_next), (s, s_next)))
        small = ~done & (-eps * s_next < b_next) & (b_next < eps * s_next)
        returned = returned | small
        i = i + 1
        return i, a, b, s, done | small | ((i >= 9) & (a > 9)), returned

    start = jnp.where(special, one, q)
    state = (0, start, jnp.zeros_like(x), start**-x, special, jnp.zeros(x.shape, jnp.bool_))
    _, a, b, s, _, finished = lax.while_loop(cond, body, state)

    # Euler-Maclaurin tail
    w = a
    tail = s + b * w / (x - one) - 0.5 * b
    a = one
    k = jnp.zeros((), acc)
    for coefficient in _ZETA_A:
        a = a * (x + k)
        b = b / w
        t = a * b / coefficient
        tail_next = tail + t
        tail = jnp.where(finished, tail, tail_next)
        finished = finished | (jnp.abs(t / tail_next) < eps)
        k = k + one
        a = a * (x + k)
        b = b / w
        k = k + one
    out = jnp.where(special, nan, tail)
    out = jnp.where((q <= 0) & (q == jnp.floor(q)), inf, out)
    out = jnp.where(x < 1, nan, out)
    out = jnp.where(x == 1, inf, out)
    return out.astype(out_dtype)


@aten("digamma.default")
def aten_digamma(self):
    """digamma(Tensor self) -> Tensor"""
    return _float_unary(_digamma, self)


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


@aten("i0.default", "special_i0.default")
def aten_i0(self):
    """i0(Tensor self) -> Tensor"""
    return _float_unary(jsp.i0, self)


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


@aten("mvlgamma.default")
def aten_mvlgamma(self, p):
    """mvlgamma(Tensor self, int p) -> Tensor"""

    def fn(x):
        # sum_{j<p} lgamma(x - j/2) + p(p-1)/4 log(pi), as PyTorch computes it
        offsets = -jnp.arange(p, dtype=x.dtype) / 2
        terms = lax.lgamma(x[..., None] + offsets)
        return jnp.sum(terms, axis=-1) + jnp.asarray(p * (p - 1) / 4 * math.log(math.pi), x.dtype)

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


@aten("polygamma.default")
def aten_polygamma(n, self):
    """polygamma(int n, Tensor self) -> Tensor"""
    if n == 0:
        return _float_unary(_digamma, self)
    if n == 1:
        return _float_unary(_trigamma, self)

    def fn(x):
        # PyTorch: (-1)^(n+1) n! zeta(n+1, x)
        factor = (1 if n % 2 else -1) * math.factorial(n)
        return jnp.asarray(factor, x.dtype) * _zeta(jnp.full_like(x, n + 1), x)

    return _float_unary(fn, self)


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
    """sign(Tensor self) -> Tensor"""
    if self.dtype == jnp.bool_:
        return self
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


@aten("special_entr.default")
def aten_special_entr(self):
    """special_entr(Tensor self) -> Tensor"""
    return _float_unary(jsp.entr, self)


@aten("special_erfcx.default")
def aten_special_erfcx(self):
    """special_erfcx(Tensor self) -> Tensor"""
    return _float_unary(jsp.erfcx, self)


@aten("special_i0e.default")
def aten_special_i0e(self):
    """special_i0e(Tensor self) -> Tensor"""
    return _float_unary(jsp.i0e, self)


@aten("special_i1.default")
def aten_special_i1(self):
    """special_i1(Tensor self) -> Tensor"""
    return _float_unary(jsp.i1, self)


@aten("special_i1e.default")
def aten_special_i1e(self):
    """special_i1e(Tensor self) -> Tensor"""
    return _float_unary(jsp.i1e, self)


@aten("special_log_ndtr.default")
def aten_special_log_ndtr(self):
    """special_log_ndtr(Tensor self) -> Tensor"""
    return _float_unary(jsp.log_ndtr, self)


@aten("special_modified_bessel_i0.default")
def aten_special_modified_bessel_i0(self):
    """special_modified_bessel_i0(Tensor self) -> Tensor"""
    return _float_unary(jsp.i0, self)


@aten("special_modified_bessel_i1.default")
def aten_special_modified_bessel_i1(self):
    """special_modified_bessel_i1(Tensor self) -> Tensor"""
    return _float_unary(jsp.i1, self)


@aten("special_modified_bessel_k0.default")
def aten_special_modified_bessel_k0(self):
    """special_modified_bessel_k0(Tensor self) -> Tensor"""
    return _float_unary(lambda x: _bessel_k(x, 0, scaled=False), self)


@aten("special_modified_bessel_k1.default")
def aten_special_modified_bessel_k1(self):
    """special_modified_bessel_k1(Tensor self) -> Tensor"""
    return _float_unary(lambda x: _bessel_k(x, 1, scaled=False), self)


@aten("special_ndtr.default")
def aten_special_ndtr(self):
    """special_ndtr(Tensor self) -> Tensor"""
    return _float_unary(jsp.ndtr, self)


@aten("special_ndtri.default")
def aten_special_ndtri(self):
    """special_ndtri(Tensor self) -> Tensor"""
    return _float_unary(jsp.ndtri, self)


@aten("special_scaled_modified_bessel_k0.default")
def aten_special_scaled_modified_bessel_k0(self):
    """special_scaled_modified_bessel_k0(Tensor self) -> Tensor"""
    return _float_unary(lambda x: _bessel_k(x, 0, scaled=True), self)


@aten("special_scaled_modified_bessel_k1.default")
def aten_special_scaled_modified_bessel_k1(self):
    """special_scaled_modified_bessel_k1(Tensor self) -> Tensor"""
    return _float_unary(lambda x: _bessel_k(x, 1, scaled=True), self)


@aten("special_spherical_bessel_j0.default")
def aten_special_spherical_bessel_j0(self):
    """special_spherical_bessel_j0(Tensor self) -> Tensor"""

    def fn(x):
        safe = jnp.where(x == 0, jnp.ones((), x.dtype), x)
        return jnp.where(x == 0, jnp.ones((), x.dtype), jnp.sin(safe) / safe)

    return _float_unary(fn, self)


@aten("special_zeta.default", "special_zeta.other_scalar", "special_zeta.self_scalar")
def aten_special_zeta(self, other):
    """special_zeta(Tensor self, Tensor other) -> Tensor"""
    # binary, but kept beside polygamma, which shares the pole conventions of _zeta
    dtype = float_type(result_type(self, other))
    compute = opmath_type(dtype)
    return _zeta(jnp.asarray(self, compute), jnp.asarray(other, compute)).astype(dtype)


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
