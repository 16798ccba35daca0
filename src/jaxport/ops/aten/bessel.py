"""ATen lowerings: Bessel and Airy functions (J0, J1, Y0, Y1; I0, I1, K0, K1 and their scaled
forms; the spherical j0; Airy Ai).

They follow PyTorch's own CPU kernels (Cephes' Chebyshev series and rational
approximations, `ATen/native/Math.h`) where JAX has no equivalent or JAX's is
less accurate, so results agree with PyTorch to a few ulp.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import jax.scipy.special as jsp
import numpy as np
from jax import lax

from ..registry import aten
from .unary import _float_unary

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
    # NaN fails every comparison, so PyTorch's kernel sends it down the x > 2 branch (NaN out).
    large_x = jnp.where(x <= 2, jnp.full_like(x, 4.0), x)
    # log(x) - log(2), not log(0.5 * x): at the smallest normal x, 0.5 * x is subnormal, which
    # XLA:CPU flushes to zero (log -> -inf), while PyTorch's log reads it and stays finite.
    log_half_x = jnp.log(small_x) - math.log(2.0)
    if order == 0:
        small = _chbevl(small_x * small_x - 2, _K0_A) - log_half_x * jsp.i0(small_x)
        large = _chbevl(8 / large_x - 2, _K0_B) / jnp.sqrt(large_x)
    else:
        small = log_half_x * jsp.i1(small_x) + _chbevl(small_x * small_x - 2, _K1_A) / small_x
        large = _chbevl(8 / large_x - 2, _K1_B) / jnp.sqrt(large_x)
    if scaled:
        small = small * jnp.exp(small_x)
    else:
        large = jnp.exp(-large_x) * large
    out = jnp.where(x <= 2, small, large)
    out = jnp.where(x < 0, jnp.full_like(x, np.nan), out)
    return jnp.where(x == 0, jnp.full_like(x, np.inf), out)


# PyTorch's (Cephes') rational approximations of the Bessel functions J0, J1, Y0, Y1
# (P/Q: asymptotic amplitude and phase for x > 5; R, Y: x <= 5) and of Airy Ai
# (N/D: x >= 2.09; F/G: x < -2.09).
_J0_PP = (7.96936729297347051624e-04, 8.28352392107440799803e-02, 1.23953371646414299388e+00,
          5.44725003058768775090e+00, 8.74716500199817011941e+00, 5.30324038235394892183e+00,
          9.99999999999999997821e-01)


_J0_PQ = (9.24408810558863637013e-04, 8.56288474354474431428e-02, 1.25352743901058953537e+00,
          5.47097740330417105182e+00, 8.76190883237069594232e+00, 5.30605288235394617618e+00,
          1.00000000000000000218e+00)


_J0_QP = (-1.13663838898469149931e-02, -1.28252718670509318512e+00, -1.95539544257735972385e+01,
          -9.32060152123768231369e+01, -1.77681167980488050595e+02, -1.47077505154951170175e+02,
          -5.14105326766599330220e+01, -6.05014350600728481186e+00)


_J0_QQ = (6.43178256118178023184e+01, 8.56430025976980587198e+02, 3.88240183605401609683e+03,
          7.24046774195652478189e+03, 5.93072701187316984827e+03, 2.06209331660327847417e+03,
          2.42005740240291393179e+02)


_J0_RP = (-4.79443220978201773821e+09, 1.95617491946556577543e+12, -2.49248344360967716204e+14,
          9.70862251047306323952e+15)


_J0_RQ = (4.99563147152651017219e+02, 1.73785401676374683123e+05, 4.84409658339962045305e+07,
          1.11855537045356834862e+10, 2.11277520115489217587e+12, 3.10518229857422583814e+14,
          3.18121955943204943306e+16, 1.71086294081043136091e+18)


_Y0_YP = (1.55924367855235737965e+04, -1.46639295903971606143e+07, 5.43526477051876500413e+09,
          -9.82136065717911466409e+11, 8.75906394395366999549e+13, -3.46628303384729719441e+15,
          4.42733268572569800351e+16, -1.84950800436986690637e+16)


_Y0_YQ = (1.04128353664259848412e+03, 6.26107330137134956842e+05, 2.68919633393814121987e+08,
          8.64002487103935000337e+10, 2.02979612750105546709e+13, 3.17157752842975028269e+15,
          2.50596256172653059228e+17)


_J1_PP = (7.62125616208173112003e-04, 7.31397056940917570436e-02, 1.12719608129684925192e+00,
          5.11207951146807644818e+00, 8.42404590141772420927e+00, 5.21451598682361504063e+00,
          1.00000000000000000254e+00)


_J1_PQ = (5.71323128072548699714e-04, 6.88455908754495404082e-02, 1.10514232634061696926e+00,
          5.07386386128601488557e+00, 8.39985554327604159757e+00, 5.20982848682361821619e+00,
          9.99999999999999997461e-01)


_J1_QP = (5.10862594750176621635e-02, 4.98213872951233449420e+00, 7.58238284132545283818e+01,
          3.66779609360150777800e+02, 7.10856304998926107277e+02, 5.97489612400613639965e+02,
          2.11688757100572135698e+02, 2.52070205858023719784e+01)


_J1_QQ = (7.42373277035675149943e+01, 1.05644886038262816351e+03, 4.98641058337653607651e+03,
          9.56231892404756170795e+03, 7.99704160447350683650e+03, 2.82619278517639096600e+03,
          3.36093607810698293419e+02)


_J1_RP = (-8.99971225705559398224e+08, 4.52228297998194034323e+11, -7.27494245221818276015e+13,
          3.68295732863852883286e+15)


_J1_RQ = (6.20836478118054335476e+02, 2.56987256757748830383e+05, 8.35146791431949253037e+07,
          2.21511595479792499675e+10, 4.74914122079991414898e+12, 7.84369607876235854894e+14,
          8.95222336184627338078e+16, 5.32278620332680085395e+18)


_Y1_YP = (1.26320474790178026440e+09, -6.47355876379160291031e+11, 1.14509511541823727583e+14,
          -8.12770255501325109621e+15, 2.02439475713594898196e+17, -7.78877196265950026825e+17)


_Y1_YQ = (5.94301592346128195359e+02, 2.35564092943068577943e+05, 7.34811944459721705660e+07,
          1.87601316108706159478e+10, 3.88231277496238566008e+12, 6.20557727146953693363e+14,
          6.87141087355300489866e+16, 3.97270608116560655612e+18)


_AIRY_AN = (3.46538101525629032477e-01, 1.20075952739645805542e+01, 7.62796053615234516538e+01,
            1.68089224934630576269e+02, 1.59756391350164413639e+02, 7.05360906840444183113e+01,
            1.40264691163389668864e+01, 9.99999999999999995305e-01)


_AIRY_AD = (5.67594532638770212846e-01, 1.47562562584847203173e+01, 8.45138970141474626562e+01,
            1.77318088145400459522e+02, 1.64234692871529701831e+02, 7.14778400825575695274e+01,
            1.40959135607834029598e+01, 1.00000000000000000470e+00)


_AIRY_AFN = (-1.31696323418331795333e-01, -6.26456544431912369773e-01, -6.93158036036933542233e-01,
             -2.79779981545119124951e-01, -4.91900132609500318020e-02, -4.06265923594885404393e-03,
             -1.59276496239262096340e-04, -2.77649108155232920844e-06, -1.67787698489114633780e-08)


_AIRY_AFD = (1.33560420706553243746e+01, 3.26825032795224613948e+01, 2.67367040941499554804e+01,
             9.18707402907259625840e+00, 1.47529146771666414581e+00, 1.15687173795188044134e-01,
             4.40291641615211203805e-03, 7.54720348287414296618e-05, 4.51850092970580378464e-07)


_AIRY_AGN = (1.97339932091685679179e-02, 3.91103029615688277255e-01, 1.06579897599595591108e+00,
             9.39169229816650230044e-01, 3.51465656105547619242e-01, 6.33888919628925490927e-02,
             5.85804113048388458567e-03, 2.82851600836737019778e-04, 6.98793669997260967291e-06,
             8.11789239554389293311e-08, 3.41551784765923618484e-10)


_AIRY_AGD = (9.30892908077441974853e+00, 1.98352928718312140417e+01, 1.55646628932864612953e+01,
             5.47686069422975497931e+00, 9.54293611618961883998e-01, 8.64580826352392193095e-02,
             4.12656523824222607191e-03, 1.01259085116509135510e-04, 1.17166733214413521882e-06,
             4.91834570062930015649e-09)


_SQRT_2_OVER_PI = 0.797884560802865355879892119868763737


_TWO_OVER_PI = 0.636619772367581343075535053490057448


def _polevl(z, coefficients):
    """Horner evaluation in the order PyTorch's kernels accumulate (highest degree first)."""
    acc = jnp.full_like(z, coefficients[0])
    for c in coefficients[1:]:
        acc = acc * z + c
    return acc


def _bessel_asymptotic(x, order, second_kind):
    """The x > 5 branch of J0/J1 (first kind) or Y0/Y1 (second kind)."""
    pp, pq, qp, qq = (_J0_PP, _J0_PQ, _J0_QP, _J0_QQ) if order == 0 else (_J1_PP, _J1_PQ, _J1_QP, _J1_QQ)
    z = 25.0 / (x * x) if order == 0 else 5.0 / x * (5.0 / x)
    p = _polevl(z, pp) / _polevl(z, pq)
    q = 5.0 / x * (_polevl(z, qp) / _polevl(z, qq))
    phase = x - (0.785398163397448309615660845819875721 if order == 0 else 2.356194490192344928846982537459627163)
    if second_kind:
        out = p * jnp.sin(phase) + q * jnp.cos(phase)
    else:
        out = p * jnp.cos(phase) - q * jnp.sin(phase)
    return out * _SQRT_2_OVER_PI / jnp.sqrt(x)


def _bessel_j0(x):
    x = jnp.abs(x)
    small = jnp.where(x <= 5, x, jnp.ones_like(x))
    large = jnp.where(x <= 5, jnp.full_like(x, 6.0), x)
    z = small * small
    rational = (z - 5.78318596294678452118e+00) * (z - 3.04712623436620863991e+01) * _polevl(z, _J0_RP) / _polevl(z, _J0_RQ)
    near_zero = 1.0 - x * x / 4.0
    return jnp.where(x <= 5, jnp.where(x < 0.00001, near_zero, rational), _bessel_asymptotic(large, 0, False))


def _bessel_j1(x):
    negative = x < 0
    x = jnp.where(negative, -x, x)  # keeps -0.0, whose J1 is -0.0 as in PyTorch
    small = jnp.where(x <= 5, x, jnp.ones_like(x))
    large = jnp.where(x <= 5, jnp.full_like(x, 6.0), x)
    z = small * small
    rational = _polevl(z, _J1_RP) / _polevl(z, _J1_RQ) * small * (z - 1.46819706421238932572e+01) * (z - 4.92184563216946036703e+01)
    out = jnp.where(x <= 5, rational, _bessel_asymptotic(large, 1, False))
    return jnp.where(negative, -out, out)


def _bessel_y(x, order):
    small = jnp.where((x <= 5) & (x > 0), x, jnp.ones_like(x))
    large = jnp.where(x <= 5, jnp.full_like(x, 6.0), x)
    z = small * small
    if order == 0:
        rational = _polevl(z, _Y0_YP) / _polevl(z, _Y0_YQ) + _TWO_OVER_PI * jnp.log(small) * _bessel_j0(small)
    else:
        rational = small * (_polevl(z, _Y1_YP) / _polevl(z, _Y1_YQ)) + _TWO_OVER_PI * (
            _bessel_j1(small) * jnp.log(small) - 1.0 / small
        )
    rational = jnp.where(x < 0, jnp.full_like(x, np.nan), rational)
    rational = jnp.where(x == 0, jnp.full_like(x, -np.inf), rational)
    return jnp.where(x <= 5, rational, _bessel_asymptotic(large, order, True))


def _airy_ai(x):
    eps = float(jnp.finfo(x.dtype).eps)
    # x < -2.09: modulus/phase asymptotic expansion.
    neg = jnp.where(x < -2.09, x, jnp.full_like(x, -4.0))
    zeta_neg = -2.0 * neg * jnp.sqrt(-neg) / 3.0
    z = 1.0 / zeta_neg
    zz = z * z
    t = zeta_neg + 0.25 * math.pi
    negative = 5.64189583547756286948e-01 / jnp.sqrt(jnp.sqrt(-neg)) * (
        jnp.sin(t) * (1.0 + zz * _polevl(zz, _AIRY_AFN) / _polevl(zz, _AIRY_AFD))
        - jnp.cos(t) * (z * _polevl(zz, _AIRY_AGN) / _polevl(zz, _AIRY_AGD))
    )
    # x >= 2.09: exponentially decaying asymptotic expansion.
    pos = jnp.where(x >= 2.09, x, jnp.full_like(x, 4.0))
    zeta = 2.0 * pos * jnp.sqrt(pos) / 3.0
    positive = 5.64189583547756286948e-01 * (_polevl(1.0 / zeta, _AIRY_AN) / _polevl(1.0 / zeta, _AIRY_AD)) / (
        2.0 * jnp.sqrt(jnp.sqrt(pos)) * jnp.exp(zeta)
    )
    # |x| small: Maclaurin series, each element stopping when its term drops below eps. NaN fails
    # both range tests, so, as in PyTorch's kernel, it takes this branch and comes out NaN.
    mid = jnp.where((x < -2.09) | (x >= 2.09), jnp.zeros_like(x), x)
    cube = mid * mid * mid
    one = jnp.ones_like(x)

    def cond(state):
        return jnp.any(state[-1])

    def body(state):
        f, g, k, m, n, active = state
        m1 = m * cube
        k1 = k + 1.0
        m1 = m1 / k1
        n1 = n * cube
        k1 = k1 + 1.0
        n1 = n1 / k1
        m1 = m1 / k1
        f1 = f + m1
        k1 = k1 + 1.0
        n1 = n1 / k1
        g1 = g + n1
        still = jnp.abs(m1 / f1) > eps
        new, old = (f1, g1, k1, m1, n1), (f, g, k, m, n)
        return (*(jnp.where(active, a, b) for a, b in zip(new, old)), active & still)

    active = jnp.ones(x.shape, jnp.bool_)
    f, g, *_ = lax.while_loop(cond, body, (one, mid, one, one, mid, active))
    series = 0.355028053887817239260 * f - 0.258819403792806798405 * g
    out = jnp.where(x < -2.09, negative, jnp.where(x >= 2.09, positive, series))
    out = jnp.where(x > 103.892, jnp.zeros_like(x), out)
    return jnp.where(jnp.isinf(x), jnp.full_like(x, np.nan), out)


@aten("i0.default", "special_i0.default")
def aten_i0(self):
    """i0(Tensor self) -> Tensor"""
    return _float_unary(_i0, self)


@jax.custom_jvp
def _i0(x):
    return jsp.i0(x)


# I0' = I1, as PyTorch's rule: JAX differentiates exp(|x|) * i0e(x), whose |x| has slope 1 at 0
# (an I0'(0) of 1 where it is 0).
_i0.defjvp(lambda primals, tangents: (_i0(primals[0]), jsp.i1(primals[0]) * tangents[0]))


@aten("special_airy_ai.default")
def aten_special_airy_ai(x):
    """special_airy_ai(Tensor x) -> Tensor"""
    return _float_unary(_airy_ai, x)


@aten("special_bessel_j0.default")
def aten_special_bessel_j0(self):
    """special_bessel_j0(Tensor self) -> Tensor"""
    return _float_unary(_bessel_j0, self)


@aten("special_bessel_j1.default")
def aten_special_bessel_j1(self):
    """special_bessel_j1(Tensor self) -> Tensor"""
    return _float_unary(_bessel_j1, self)


@aten("special_bessel_y0.default")
def aten_special_bessel_y0(self):
    """special_bessel_y0(Tensor self) -> Tensor"""
    return _float_unary(lambda x: _bessel_y(x, 0), self)


@aten("special_bessel_y1.default")
def aten_special_bessel_y1(self):
    """special_bessel_y1(Tensor self) -> Tensor"""
    return _float_unary(lambda x: _bessel_y(x, 1), self)


@aten("special_i0e.default")
def aten_special_i0e(self):
    """special_i0e(Tensor self) -> Tensor"""
    return _float_unary(jsp.i0e, self)


def _odd_from_abs(fn):
    """Odd `fn` as PyTorch's (Cephes') kernels evaluate it: on |x|, negated only where x < 0, so
    -0.0 gives +0.0 (abs's derivative at zero is +1, so the gradient there is fn's)."""

    def odd(x):
        out = fn(jnp.abs(x))
        return jnp.where(x < 0, -out, out)

    return odd


@aten("special_i1.default")
def aten_special_i1(self):
    """special_i1(Tensor self) -> Tensor"""
    return _float_unary(_odd_from_abs(jsp.i1), self)


@aten("special_i1e.default")
def aten_special_i1e(self):
    """special_i1e(Tensor self) -> Tensor"""
    return _float_unary(_odd_from_abs(jsp.i1e), self)


@aten("special_modified_bessel_i0.default")
def aten_special_modified_bessel_i0(self):
    """special_modified_bessel_i0(Tensor self) -> Tensor"""
    return _float_unary(_i0, self)


@aten("special_modified_bessel_i1.default")
def aten_special_modified_bessel_i1(self):
    """special_modified_bessel_i1(Tensor self) -> Tensor"""
    return _float_unary(_odd_from_abs(jsp.i1), self)


@aten("special_modified_bessel_k0.default")
def aten_special_modified_bessel_k0(self):
    """special_modified_bessel_k0(Tensor self) -> Tensor"""
    return _float_unary(lambda x: _bessel_k(x, 0, scaled=False), self)


@aten("special_modified_bessel_k1.default")
def aten_special_modified_bessel_k1(self):
    """special_modified_bessel_k1(Tensor self) -> Tensor"""
    return _float_unary(lambda x: _bessel_k(x, 1, scaled=False), self)


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
        # PyTorch's kernel returns +0.0 at +-inf, where sin(x) / x is NaN; the safe operand keeps
        # NaN out of the gradient at both special points.
        special = (x == 0) | jnp.isinf(x)
        safe = jnp.where(special, jnp.ones((), x.dtype), x)
        out = jnp.where(x == 0, jnp.ones((), x.dtype), jnp.sin(safe) / safe)
        return jnp.where(jnp.isinf(x), jnp.zeros((), x.dtype), out)

    return _float_unary(fn, self)
