"""ATen lowerings: the orthogonal polynomials of `torch.special` (Chebyshev T, U, V, W and their
shifted forms, Hermite H and He, Laguerre L, Legendre P).

Each is evaluated as PyTorch's kernel evaluates it (`_polynomial`): its three-term recurrence,
its early returns (|x| = 1, closed forms past a degree), and its degree, `n` truncated to int64.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax

from ..registry import aten
from ._promotion import as_array, canonical, float_type, result_type


def _polynomial(x, n, first, step, cases):
    """An orthogonal polynomial as PyTorch's kernels evaluate it.

    `n` truncates to an integer; P_0 = 1, P_1 = `first(x)`, and for j = 1 .. n-1
    P_{j+1} = `step(j, x, P_{j-1}, P_j)`. `cases(x, n)` lists PyTorch's early
    returns as (condition, value) pairs, the first match winning.
    """
    dtype = float_type(result_type(x, n))
    x, n = jnp.broadcast_arrays(as_array(x, dtype), as_array(n, dtype))
    # PyTorch casts n to int64; x86 turns NaN, infinities and values past int64's range into
    # INT64_MIN, a negative degree, whose polynomial is 0.
    n = jnp.where(jnp.isfinite(n) & (jnp.abs(n) < 2.0**63), n, -1).astype(canonical(np.int64))
    nf = n.astype(dtype)
    one = jnp.ones_like(x)

    def body(j, state):
        p, q = state
        r = step(j.astype(dtype), x, p, q)
        keep = j.astype(n.dtype) < n
        return jnp.where(keep, q, p), jnp.where(keep, r, q)

    top = jnp.maximum(jnp.max(n, initial=1), 1)
    _, out = lax.fori_loop(1, top, body, (one, first(x)))
    out = jnp.where(n == 0, one, out)
    for condition, value in reversed(((n < 0, jnp.zeros_like(x)), *cases(x, nf))):
        out = jnp.where(condition, value, out)
    return out


def _odd(n):
    return lax.rem(n, jnp.full_like(n, 2)) != 0


def _chebyshev(x, n, first, cases):
    return _polynomial(x, n, first, lambda j, x, p, q: (x + x) * q - p, cases)


def _shifted_chebyshev(x, n, first, cases):
    return _polynomial(x, n, first, lambda j, x, p, q: (x + x - 1 + (x + x - 1)) * q - p, cases)


@aten(
    "special_chebyshev_polynomial_t.default", "special_chebyshev_polynomial_t.x_scalar",
    "special_chebyshev_polynomial_t.n_scalar",
)
def aten_special_chebyshev_polynomial_t(x, n):
    """special_chebyshev_polynomial_t(Tensor x, Tensor n) -> Tensor"""

    def cases(x, n):
        ones = jnp.ones_like(x)
        return (
            (jnp.abs(x) == 1, jnp.where((x > 0) | ~_odd(n), ones, -ones)),
            ((n > 6) & (jnp.abs(x) < 1), jnp.cos(n * jnp.arccos(x))),
        )

    return _chebyshev(x, n, lambda x: x, cases)


@aten(
    "special_chebyshev_polynomial_u.default", "special_chebyshev_polynomial_u.x_scalar",
    "special_chebyshev_polynomial_u.n_scalar",
)
def aten_special_chebyshev_polynomial_u(x, n):
    """special_chebyshev_polynomial_u(Tensor x, Tensor n) -> Tensor"""

    def cases(x, n):
        theta = jnp.arccos(x)
        closed = jnp.where(
            jnp.sin(theta) != 0, jnp.sin((n + 1) * theta) / jnp.sin(theta), (n + 1) * jnp.cos((n + 1) * theta) / x
        )
        return (
            (jnp.abs(x) == 1, jnp.where((x > 0) | ~_odd(n), n + 1, -(n + 1))),
            ((n > 8) & (jnp.abs(x) < 1), closed),
        )

    return _chebyshev(x, n, lambda x: x + x, cases)


@aten(
    "special_chebyshev_polynomial_v.default", "special_chebyshev_polynomial_v.x_scalar",
    "special_chebyshev_polynomial_v.n_scalar",
)
def aten_special_chebyshev_polynomial_v(x, n):
    """special_chebyshev_polynomial_v(Tensor x, Tensor n) -> Tensor"""

    def cases(x, n):
        theta = jnp.arccos(x)
        edge = jnp.where(_odd(n), -(n + n + 1), n + n + 1)
        closed = jnp.where(jnp.sin(theta / 2) != 1, jnp.cos((n + 0.5) * theta) / jnp.cos(theta / 2), edge)
        return (
            (jnp.abs(x) == 1, jnp.where(x > 0, jnp.ones_like(x), edge)),
            ((n > 8) & (jnp.abs(x) < 1), closed),
        )

    return _chebyshev(x, n, lambda x: x + x - 1, cases)


@aten(
    "special_chebyshev_polynomial_w.default", "special_chebyshev_polynomial_w.x_scalar",
    "special_chebyshev_polynomial_w.n_scalar",
)
def aten_special_chebyshev_polynomial_w(x, n):
    """special_chebyshev_polynomial_w(Tensor x, Tensor n) -> Tensor"""

    def cases(x, n):
        theta = jnp.arccos(x)
        ones = jnp.ones_like(x)
        edge = jnp.where(x > 0, n + n + 1, jnp.where(_odd(n), -ones, ones))
        closed = jnp.where(jnp.cos(theta / 2) != 1, jnp.sin((n + 0.5) * theta) / jnp.sin(theta / 2), edge)
        return ((jnp.abs(x) == 1, edge), ((n > 8) & (jnp.abs(x) < 1), closed))

    return _chebyshev(x, n, lambda x: x + x + 1, cases)


def _hermite_limit(dtype) -> int:
    return 128 if np.dtype(dtype) == np.float32 else 512


@aten(
    "special_hermite_polynomial_h.default", "special_hermite_polynomial_h.x_scalar",
    "special_hermite_polynomial_h.n_scalar",
)
def aten_special_hermite_polynomial_h(x, n):
    """special_hermite_polynomial_h(Tensor x, Tensor n) -> Tensor"""

    def cases(x, n):
        return ((n == 1, x + x), (n > _hermite_limit(x.dtype), jnp.full_like(x, np.nan)))

    return _polynomial(x, n, lambda x: x + x, lambda j, x, p, q: (x + x) * q - (j + j) * p, cases)


@aten(
    "special_hermite_polynomial_he.default", "special_hermite_polynomial_he.x_scalar",
    "special_hermite_polynomial_he.n_scalar",
)
def aten_special_hermite_polynomial_he(x, n):
    """special_hermite_polynomial_he(Tensor x, Tensor n) -> Tensor"""

    def cases(x, n):
        return ((n == 1, x), (n > _hermite_limit(x.dtype), jnp.full_like(x, np.nan)))

    return _polynomial(x, n, lambda x: x, lambda j, x, p, q: x * q - j * p, cases)


@aten(
    "special_laguerre_polynomial_l.default", "special_laguerre_polynomial_l.x_scalar",
    "special_laguerre_polynomial_l.n_scalar",
)
def aten_special_laguerre_polynomial_l(x, n):
    """special_laguerre_polynomial_l(Tensor x, Tensor n) -> Tensor"""

    def cases(x, n):
        return ((x == 0, jnp.ones_like(x)),)

    return _polynomial(x, n, lambda x: 1 - x, lambda j, x, p, q: ((j + j + (1 - x)) * q - j * p) / (j + 1), cases)


@aten(
    "special_legendre_polynomial_p.default", "special_legendre_polynomial_p.x_scalar",
    "special_legendre_polynomial_p.n_scalar",
)
def aten_special_legendre_polynomial_p(x, n):
    """special_legendre_polynomial_p(Tensor x, Tensor n) -> Tensor"""

    def cases(x, n):
        ones = jnp.ones_like(x)
        return ((jnp.abs(x) == 1, jnp.where((x > 0) | ~_odd(n), ones, -ones)),)

    return _polynomial(x, n, lambda x: x, lambda j, x, p, q: ((j + j + 1) * x * q - j * p) / (j + 1), cases)


@aten(
    "special_shifted_chebyshev_polynomial_t.default", "special_shifted_chebyshev_polynomial_t.x_scalar",
    "special_shifted_chebyshev_polynomial_t.n_scalar",
)
def aten_special_shifted_chebyshev_polynomial_t(x, n):
    """special_shifted_chebyshev_polynomial_t(Tensor x, Tensor n) -> Tensor"""

    def cases(x, n):
        ones = jnp.ones_like(x)
        y = x + x - 1
        return (
            (x == 1, ones),
            (x == 0, jnp.where(_odd(n), -ones, ones)),
            ((n > 6) & (jnp.abs(y) < 1), jnp.cos(n * jnp.arccos(y))),
        )

    return _shifted_chebyshev(x, n, lambda x: x + x - 1, cases)


@aten(
    "special_shifted_chebyshev_polynomial_u.default", "special_shifted_chebyshev_polynomial_u.x_scalar",
    "special_shifted_chebyshev_polynomial_u.n_scalar",
)
def aten_special_shifted_chebyshev_polynomial_u(x, n):
    """special_shifted_chebyshev_polynomial_u(Tensor x, Tensor n) -> Tensor"""

    def cases(x, n):
        y = x + x - 1
        theta = jnp.arccos(y)
        closed = jnp.where(
            jnp.sin(theta) != 0, jnp.sin((n + 1) * theta) / jnp.sin(theta), (n + 1) * jnp.cos((n + 1) * theta) / y
        )
        return (
            (x == 1, n + 1),
            (x == 0, jnp.where(_odd(n), -(n + 1), n + 1)),
            ((n > 6) & (jnp.abs(y) < 1), closed),
        )

    return _shifted_chebyshev(x, n, lambda x: x + x - 1 + (x + x - 1), cases)


@aten(
    "special_shifted_chebyshev_polynomial_v.default", "special_shifted_chebyshev_polynomial_v.x_scalar",
    "special_shifted_chebyshev_polynomial_v.n_scalar",
)
def aten_special_shifted_chebyshev_polynomial_v(x, n):
    """special_shifted_chebyshev_polynomial_v(Tensor x, Tensor n) -> Tensor"""

    def cases(x, n):
        y = x + x - 1
        theta = jnp.arccos(y)
        edge = jnp.where(_odd(n), -(n + n + 1), n + n + 1)
        closed = jnp.where(jnp.sin(theta / 2) != 1, jnp.cos((n + 0.5) * theta) / jnp.cos(theta / 2), edge)
        return ((x == 1, jnp.ones_like(x)), (x == 0, edge), ((n > 6) & (jnp.abs(y) < 1), closed))

    return _shifted_chebyshev(x, n, lambda x: x + x - 1 + (x + x - 1) - 1, cases)


@aten(
    "special_shifted_chebyshev_polynomial_w.default", "special_shifted_chebyshev_polynomial_w.x_scalar",
    "special_shifted_chebyshev_polynomial_w.n_scalar",
)
def aten_special_shifted_chebyshev_polynomial_w(x, n):
    """special_shifted_chebyshev_polynomial_w(Tensor x, Tensor n) -> Tensor"""

    def cases(x, n):
        y = x + x - 1
        theta = jnp.arccos(y)
        ones = jnp.ones_like(x)
        edge = jnp.where(_odd(n), -ones, ones)
        closed = jnp.where(jnp.cos(theta / 2) != 1, jnp.sin((n + 0.5) * theta) / jnp.sin(theta / 2), edge)
        return ((x == 1, n + n + 1), (x == 0, edge), ((n > 4) & (jnp.abs(y) < 1), closed))

    return _shifted_chebyshev(x, n, lambda x: x + x - 1 + (x + x - 1) + 1, cases)
