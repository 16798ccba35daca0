"""ATen lowerings: special functions: the gamma family (digamma, polygamma, mvlgamma, the
incomplete gamma functions), zeta, the error and normal-distribution functions (erfcx, ndtr,
ndtri, log_ndtr), entr and xlog1py. Bessel and Airy functions are `bessel`, orthogonal
polynomials `polynomials`.

They follow PyTorch's own CPU kernels (Cephes-derived series and rational
approximations, `ATen/native/Math.h`) where JAX has no equivalent or JAX's is
less accurate, so results agree with PyTorch to a few ulp.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import jax.scipy.special as jsp
import numpy as np
from jax import lax

from ..registry import aten
from ._promotion import canonical, float_type, opmath_type, result_type
from .arithmetic import _xlog
from .unary import _float_unary


@jax.custom_jvp
def _digamma(x):
    # PyTorch: digamma(+-0) = -+inf (scipy's convention); JAX gives nan there.
    pole = jnp.copysign(jnp.asarray(np.inf, x.dtype), -x)
    return jnp.where(x == 0, pole, jsp.digamma(x))


# PyTorch's derivatives are the next polygamma functions, from its own kernels; JAX's rule for
# digamma reaches polygamma(1, x) through its Hurwitz zeta, which is wrong for x < 0 (-5.3e4 for
# 1.0e4 at x = -8.99).
_digamma.defjvp(lambda primals, tangents: (_digamma(primals[0]), _trigamma(primals[0]) * tangents[0]))


@jax.custom_jvp
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


_trigamma.defjvp(lambda primals, tangents: (_trigamma(primals[0]), _polygamma(2, primals[0]) * tangents[0]))


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
    one = jnp.ones((), acc)
    inf = jnp.asarray(np.inf, acc)
    nan = jnp.asarray(np.nan, acc)
    special = (x <= 1) | (q <= 0) & ((q == jnp.floor(q)) | (x != jnp.floor(x))) | ~jnp.isfinite(q)
    # Below zero (x an integer there), PyTorch sums (q + k)^-x term by term up to q + k > 9: 5e6
    # terms at q = -5e6. Split at r = q - floor(q) in (0, 1), the same sum is
    # zeta(x, r) + (-1)^x (zeta(x, 1 - r) - zeta(x, 1 - q)), each from a positive q: three
    # evaluations, done as one.
    negative = (q < 0) & ~special
    r = q - jnp.floor(q)
    parts = jnp.stack([jnp.where(negative, r, q), jnp.where(negative, one - r, 2 * one),
                       jnp.where(negative, one - q, 2 * one)])
    direct, low, high = _zeta_from_positive(jnp.broadcast_to(x, parts.shape), parts,
                                            jnp.broadcast_to(special, parts.shape))
    sign = jnp.where(jnp.floor(x / 2) * 2 == x, one, -one)
    # zeta(x, 1 - q) with 1 - q > 1 underflows to 0 for a huge x, where Cephes' tail gives 0 * inf
    high = jnp.where(negative & jnp.isnan(high), 0, high)
    out = jnp.where(negative, direct + sign * (low - high), direct)
    out = jnp.where(special, nan, out)
    out = jnp.where((q <= 0) & (q == jnp.floor(q)), inf, out)
    out = jnp.where(x < 1, nan, out)
    out = jnp.where(x == 1, inf, out)
    return out.astype(out_dtype)


def _zeta_from_positive(x, q, special):
    """Cephes' Hurwitz zeta in float64 where q > 0 (anything where `special`)."""
    eps = 1.11022302462515654042e-16
    one = jnp.ones((), x.dtype)

    # direct summation until a > 9 (and at least 9 terms), stopping early once terms are negligible
    def cond(state):
        i, _, _, _, done, _ = state
        return jnp.any(~done)

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
    k = jnp.zeros((), x.dtype)
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
    return tail


@aten("digamma.default")
def aten_digamma(self):
    """digamma(Tensor self) -> Tensor"""
    return _float_unary(_digamma, self)


# Temme's uniform asymptotic expansion of the regularized incomplete gamma functions for large a
# near x (DLMF 8.12; Cephes' `igam` table, as PyTorch's `_igam_helper_asymptotic_series`):
# coefficients d[k][n] of C_k(eta) = sum_n d[k][n] eta**n.
_TEMME = (
    (-3.3333333333333333e-1, 8.3333333333333333e-2, -1.4814814814814815e-2, 1.1574074074074074e-3,
     3.527336860670194e-4, -1.7875514403292181e-4, 3.9192631785224378e-5),
    (-1.8518518518518519e-3, -3.4722222222222222e-3, 2.6455026455026455e-3, -9.9022633744855967e-4,
     2.0576131687242798e-4),
    (4.1335978835978836e-3, -2.6813271604938272e-3, 7.7160493827160494e-4),
)


#: Where the expansion takes over from `jax.scipy.special.gammainc`: a at least this large and
#: x within this fraction of a. There JAX's series loses digits as a grows (float32 is off in the
#: third digit by a = 1e5) and its float64 loop never ends once a and x pass about 1e16.
_TEMME_MIN_A, _TEMME_MAX_RATIO = 20.0, 0.3


def _igamma(a, x, upper: bool):
    """P(a, x) (or Q(a, x) when `upper`) as PyTorch's igamma/igammac: JAX's, with Temme's
    expansion where a is large and x near it (`_TEMME_MIN_A`)."""
    dtype = a.dtype
    near = (a >= _TEMME_MIN_A) & (jnp.abs(x - a) < _TEMME_MAX_RATIO * a) & jnp.isfinite(a)
    # a below the epsilon, where JAX's underflows to P = 0 (or never ends when x is as small):
    # Q(a, x) = a E1(x) + O(a^2).
    tiny = (a > 0) & (a < jnp.finfo(dtype).eps) & (x > 0)
    one = jnp.ones_like(a)
    own = near | tiny
    safe_a, safe_x = jnp.where(own, one, a), jnp.where(own, one, x)  # JAX's never sees those inputs
    fallback = (jsp.gammaincc if upper else jsp.gammainc)(safe_a, safe_x)
    big_a = jnp.where(near, a, jnp.asarray(_TEMME_MIN_A, dtype))
    sigma = jnp.where(near, (x - a) / big_a, 0)
    # eta = sign(sigma) sqrt(2 (sigma - log1p(sigma))), with the difference summed as a series
    # near 0, where it cancels.
    log1pmx = jnp.where(jnp.abs(sigma) < 1e-2, -sigma**2 / 2 + sigma**3 / 3 - sigma**4 / 4 + sigma**5 / 5,
                        jnp.log1p(sigma) - sigma)
    eta = jnp.sign(sigma) * jnp.sqrt(jnp.maximum(-2 * log1pmx, 0))
    total, power = jnp.zeros_like(a), jnp.ones_like(a)
    for coefficients in _TEMME:
        term = jnp.zeros_like(a)
        for c in reversed(coefficients):
            term = term * eta + jnp.asarray(c, dtype)
        total = total + term * power
        power = power / big_a
    sign = 1 if upper else -1
    series = (0.5 * lax.erfc(sign * eta * jnp.sqrt(big_a / 2))
              + sign * jnp.exp(-0.5 * big_a * eta * eta) * total / jnp.sqrt(2 * math.pi * big_a))
    out = jnp.where(near, series, fallback)
    # E1 by its series where x is small (JAX's exp1 does not return for x near the smallest float).
    small_x = x < 1e-2
    series_x = jnp.where(small_x, x, 1e-2)
    e1 = jnp.where(small_x, -np.euler_gamma - jnp.log(series_x) + series_x - series_x**2 / 4 + series_x**3 / 18,
                   jsp.exp1(jnp.where(small_x | ~tiny, 1, x)))
    upper_tail = jnp.where(tiny, a, 0) * e1
    out = jnp.where(tiny, upper_tail if upper else 1 - upper_tail, out)
    # PyTorch's edge cases, the first that holds deciding (`calc_igamma` / `calc_igammac`).
    at_zero, at_infinity = (1, 0) if upper else (0, 1)  # the values at x = 0 and x = inf
    return jnp.select(
        [(x < 0) | (a < 0), a == 0, x == 0, jnp.isinf(a), jnp.isinf(x)],
        [jnp.nan, jnp.where(x > 0, at_infinity, jnp.nan), at_zero,
         jnp.where(jnp.isinf(x), jnp.nan, at_zero), at_infinity],
        out,
    ).astype(dtype)


@aten("igamma.default")
def aten_igamma(self, other):
    """igamma(Tensor self, Tensor other) -> Tensor"""
    dtype = float_type(result_type(self, other))
    compute = opmath_type(dtype)
    return _igamma(jnp.asarray(self, compute), jnp.asarray(other, compute), upper=False).astype(dtype)


@aten("igammac.default")
def aten_igammac(self, other):
    """igammac(Tensor self, Tensor other) -> Tensor"""
    dtype = float_type(result_type(self, other))
    compute = opmath_type(dtype)
    return _igamma(jnp.asarray(self, compute), jnp.asarray(other, compute), upper=True).astype(dtype)


@aten("mvlgamma.default")
def aten_mvlgamma(self, p):
    """mvlgamma(Tensor self, int p) -> Tensor"""

    def fn(x):
        # sum_{j<p} lgamma(x - j/2) + p(p-1)/4 log(pi), as PyTorch computes it
        offsets = -jnp.arange(p, dtype=x.dtype) / 2
        terms = lax.lgamma(x[..., None] + offsets)
        return jnp.sum(terms, axis=-1) + jnp.asarray(p * (p - 1) / 4 * math.log(math.pi), x.dtype)

    return _float_unary(fn, self)


@aten("polygamma.default")
def aten_polygamma(n, self):
    """polygamma(int n, Tensor self) -> Tensor"""
    if n == 0:
        return _float_unary(_digamma, self)
    if n == 1:
        return _float_unary(_trigamma, self)

    return _float_unary(functools.partial(_polygamma, n), self)


@functools.partial(jax.custom_jvp, nondiff_argnums=(0,))
def _polygamma(n, x):
    """polygamma(n, x) for n >= 2, as PyTorch: (-1)^(n+1) n! zeta(n+1, x)."""
    factor = (1 if n % 2 else -1) * math.factorial(n)
    return jnp.asarray(factor, x.dtype) * _zeta(jnp.full_like(x, n + 1), x)


# The derivative is the next polygamma function, as PyTorch's; differentiating _zeta's loop
# instead would leave reverse mode without a rule (a while_loop of data-dependent length).
_polygamma.defjvp(lambda n, primals, tangents: (_polygamma(n, primals[0]), _polygamma(n + 1, primals[0]) * tangents[0]))


def _entr(x):
    out = jsp.entr(x)
    # PyTorch's kernel returns +0.0 at both zeros where -x * log(x) is -0.0; abs keeps the
    # gradient there (its derivative at zero is +1).
    return jnp.where(x == 0, jnp.abs(out), out)


@aten("special_entr.default")
def aten_special_entr(self):
    """special_entr(Tensor self) -> Tensor"""
    return _float_unary(_entr, self)


@aten("special_erfcx.default")
def aten_special_erfcx(self):
    """special_erfcx(Tensor self) -> Tensor"""
    return _float_unary(jsp.erfcx, self)


@aten("special_log_ndtr.default")
def aten_special_log_ndtr(self):
    """special_log_ndtr(Tensor self) -> Tensor"""
    return _float_unary(jsp.log_ndtr, self)


@aten("special_ndtr.default")
def aten_special_ndtr(self):
    """special_ndtr(Tensor self) -> Tensor"""
    return _float_unary(jsp.ndtr, self)


@aten("special_ndtri.default")
def aten_special_ndtri(self):
    """special_ndtri(Tensor self) -> Tensor"""
    return _float_unary(jsp.ndtri, self)


@aten("special_xlog1py.default", "special_xlog1py.other_scalar", "special_xlog1py.self_scalar")
def aten_special_xlog1py(self, other):
    """special_xlog1py(Tensor self, Tensor other) -> Tensor"""
    return _xlog(jnp.log1p, self, other)


@aten("special_zeta.default", "special_zeta.other_scalar", "special_zeta.self_scalar")
def aten_special_zeta(self, other):
    """special_zeta(Tensor self, Tensor other) -> Tensor"""
    # binary, but kept beside polygamma, which shares the pole conventions of _zeta
    dtype = float_type(result_type(self, other))
    compute = opmath_type(dtype)
    return _zeta(jnp.asarray(self, compute), jnp.asarray(other, compute)).astype(dtype)
