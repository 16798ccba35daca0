"""ATen lowerings: `torch.linalg` and its older names: factorizations (Cholesky, LU, QR,
eigendecompositions, SVD), solvers, inverses, determinants, matrix norms and matrix functions.
Products are `matmul`, vector norms `norms`.

LAPACK-style results that PyTorch returns alongside (LU factors, pivots, info)
follow LAPACK's conventions: 1-based int32 pivots, int32 info. Where JAX's derivative
differs from PyTorch's, a `jax.custom_jvp` gives PyTorch's (`_hermitian`, `_cholesky`,
`_eig`, `_householder_product`, `_pinv`).
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
import numpy as np
from jax import lax

from ..registry import aten
from ._promotion import canonical, norm_dtypes, opmath_type, rounded_as
from .matmul import _matmul
from .norms import p_norm


def _lu_pivots(pivots):
    """JAX's 0-based LU pivots as LAPACK's 1-based int32."""
    return (pivots + 1).astype(np.int32)


def _info(shape):
    return jnp.zeros(shape, np.int32)


@functools.partial(jax.custom_jvp, nondiff_argnums=(1,))
def _hermitian(A, UPLO="L"):
    """The Hermitian matrix LAPACK sees when it reads only the `UPLO` triangle of A.

    Differentiated as PyTorch differentiates eigh and eigvalsh: their backward formulas
    take A to be Hermitian and give Hermitian gradients, so a change dA acts as (dA + dA^H) / 2
    (not through the triangle alone, where the upper half would get no gradient).
    """
    tri = jnp.tril(A) if UPLO.upper() == "L" else jnp.triu(A)
    strict = jnp.tril(A, -1) if UPLO.upper() == "L" else jnp.triu(A, 1)
    return tri + jnp.conj(jnp.swapaxes(strict, -1, -2))


@_hermitian.defjvp
def _hermitian_jvp(UPLO, primals, tangents):
    (A,), (dA,) = primals, tangents
    return _hermitian(A, UPLO), (dA + jnp.conj(jnp.swapaxes(dA, -1, -2))) / 2


def _adjoint(x):
    return jnp.conj(jnp.swapaxes(x, -1, -2))


@functools.partial(jax.custom_jvp, nondiff_argnums=(1,))
def _cholesky(A, UPLO="L"):
    """The lower Cholesky factor L of the Hermitian matrix A's `UPLO` triangle gives (`_hermitian`).

    Differentiated so that reverse mode is PyTorch's cholesky_backward for every A,
    gA = L^-H Phi(L^H gL) L^-1 with Phi(Y) = (tril(Y) + tril(Y, -1)^H) / 2: the tangent map below
    is that map's transpose. Along Hermitian directions dA it is PyTorch's forward mode too; along
    others PyTorch's two modes disagree with each other for complex A (its backward is not the
    transpose of its forward rule), and jaxport follows reverse mode, the one training uses.
    """
    return jnp.linalg.cholesky(_hermitian(A, UPLO), symmetrize_input=False)


@_cholesky.defjvp
def _cholesky_jvp(UPLO, primals, tangents):
    (A,), (dA,) = primals, tangents
    L = _cholesky(A, UPLO)
    X = jsl.solve_triangular(L, dA, lower=True)
    X = _adjoint(jsl.solve_triangular(L, _adjoint(X), lower=True))  # L^-1 dA L^-H
    return L, L @ ((jnp.tril(X) + jnp.tril(_adjoint(X), -1)) / 2)


def _batch_broadcast(a, b):
    """Broadcast the batch dims (all but the last two) of two matrices against each other."""
    batch = jnp.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    return jnp.broadcast_to(a, batch + a.shape[-2:]), jnp.broadcast_to(b, batch + b.shape[-2:])


def _matrix_norm(A, ord, axes, keepdim):
    """PyTorch's matrix norms of A over `axes` (two dims)."""
    r, c = (a % A.ndim for a in axes)
    if ord == "fro":
        out = jnp.sqrt(jnp.sum(jnp.abs(A) ** 2, axis=(r, c)))
    elif ord in ("nuc", 2, -2):
        s = jnp.linalg.svd(jnp.moveaxis(A, (r, c), (-2, -1)), compute_uv=False)
        # Norms are >= 0, so a max starting at 0 changes nothing but gives empty matrices PyTorch's 0.
        out = jnp.sum(s, axis=-1) if ord == "nuc" else jnp.max(s, axis=-1, initial=0) if ord == 2 else jnp.min(s, axis=-1)
    elif ord in (1, -1, math.inf, -math.inf):
        sum_axis, other = (r, c) if ord in (1, -1) else (c, r)
        sums = jnp.sum(jnp.abs(A), axis=sum_axis, keepdims=True)
        out = jnp.max(sums, axis=other, keepdims=True, initial=0) if ord > 0 else jnp.min(sums, axis=other, keepdims=True)
        out = jnp.squeeze(out, (r, c))
    else:
        raise ValueError(f"linalg.matrix_norm: unsupported ord {ord!r}")
    if keepdim:
        out = jnp.expand_dims(out, tuple(sorted((r, c))))
    return out


# -- ops ------------------------------------------------------------------------------------------


@aten("_linalg_det.default")
def aten__linalg_det(A):
    """_linalg_det(Tensor A) -> (Tensor result, Tensor LU, Tensor pivots)"""
    lu, pivots, _ = lax.linalg.lu(A)
    return _det(A), lu, _lu_pivots(pivots)


@aten("_linalg_eigh.default")
def aten__linalg_eigh(A, UPLO="L", compute_v=True):
    """_linalg_eigh(Tensor A, str UPLO="L", bool compute_v=True) -> (Tensor eigenvalues, Tensor eigenvectors)"""
    values, vectors = jnp.linalg.eigh(_hermitian(A, UPLO), symmetrize_input=False)
    if not compute_v:
        vectors = jnp.zeros((0,), A.dtype)
    return values, vectors


@aten("_linalg_slogdet.default")
def aten__linalg_slogdet(A):
    """_linalg_slogdet(Tensor A) -> (Tensor sign, Tensor logabsdet, Tensor LU, Tensor pivots)"""
    lu, pivots, _ = lax.linalg.lu(A)
    sign, logabsdet = jnp.linalg.slogdet(A)
    return sign, logabsdet, lu, _lu_pivots(pivots)


@aten("_linalg_solve_ex.default")
def aten__linalg_solve_ex(A, B, *, left=True, check_errors=False):
    """_linalg_solve_ex(Tensor A, Tensor B, *, bool left=True, bool check_errors=False) -> (Tensor result, Tensor LU, Tensor pivots, Tensor info)"""
    # B is a batch of vectors when it has one dim fewer than A and its shape matches A's batch.
    vector = B.ndim == 1 or (B.ndim == A.ndim - 1 and B.shape == A.shape[:-1])
    lu, pivots, _ = lax.linalg.lu(A if left else jnp.swapaxes(A, -1, -2))
    rhs = B[..., None] if vector else (B if left else jnp.swapaxes(B, -1, -2))
    batch = jnp.broadcast_shapes(lu.shape[:-2], rhs.shape[:-2])
    out = jsl.lu_solve(
        (jnp.broadcast_to(lu, batch + lu.shape[-2:]), jnp.broadcast_to(pivots, batch + pivots.shape[-1:])),
        jnp.broadcast_to(rhs, batch + rhs.shape[-2:]),
    )
    out = out[..., 0] if vector else (out if left else jnp.swapaxes(out, -1, -2))
    return out, lu, _lu_pivots(pivots), _info(A.shape[:-2])


@aten("_linalg_svd.default")
def aten__linalg_svd(A, full_matrices=False, compute_uv=True, *, driver=None):
    """_linalg_svd(Tensor A, bool full_matrices=False, compute_uv=True, *, str? driver=None) -> (Tensor U, Tensor S, Tensor Vh)"""
    if not compute_uv:
        s = jnp.linalg.svd(A, compute_uv=False)
        empty = jnp.zeros((0,), A.dtype)
        return empty, s, empty
    return tuple(jnp.linalg.svd(A, full_matrices=full_matrices))


@aten("cholesky.default")
def aten_cholesky(self, upper=False):
    """cholesky(Tensor self, bool upper=False) -> Tensor"""
    return aten_linalg_cholesky_ex(self, upper=upper)[0]


@aten("cholesky_inverse.default")
def aten_cholesky_inverse(self, upper=False):
    """cholesky_inverse(Tensor self, bool upper=False) -> Tensor"""
    eye = jnp.broadcast_to(jnp.eye(self.shape[-1], dtype=self.dtype), self.shape)
    return jsl.cho_solve((self, not upper), eye)


@aten("cholesky_solve.default")
def aten_cholesky_solve(self, input2, upper=False):
    """cholesky_solve(Tensor self, Tensor input2, bool upper=False) -> Tensor"""
    factor, rhs = _batch_broadcast(input2, self)
    return jsl.cho_solve((factor, not upper), rhs)


@aten("det.default", "linalg_det.default")
def aten_det(A):
    """linalg_det(Tensor A) -> Tensor"""
    return _det(A)


def _det(A):
    # The determinant of a 0x0 matrix is 1; JAX's computes it, but its derivative rule indexes
    # into the empty LU factors and fails.
    if A.shape[-1] == 0:
        return jnp.ones(A.shape[:-2], A.dtype)
    return jnp.linalg.det(A)


@aten("geqrf.default")
def aten_geqrf(self):
    """geqrf(Tensor self) -> (Tensor a, Tensor tau)"""
    # numpy's "raw" QR is LAPACK's geqrf with the reflectors stored transposed.
    h, tau = jnp.linalg.qr(self, mode="raw")
    return jnp.swapaxes(h, -1, -2), tau


@aten("linalg_cholesky.default")
def aten_linalg_cholesky(self, *, upper=False):
    """linalg_cholesky(Tensor self, *, bool upper=False) -> Tensor"""
    return aten_linalg_cholesky_ex(self, upper=upper)[0]


@aten("linalg_cholesky_ex.default")
def aten_linalg_cholesky_ex(self, *, upper=False, check_errors=False):
    """linalg_cholesky_ex(Tensor self, *, bool upper=False, bool check_errors=False) -> (Tensor L, Tensor info)"""
    lower = _cholesky(self, "U" if upper else "L")  # LAPACK reads the triangle it returns
    out = jnp.conj(jnp.swapaxes(lower, -1, -2)) if upper else lower
    return out, _info(self.shape[:-2])


@aten("linalg_cond.default")
def aten_linalg_cond(self, p=None):
    """linalg_cond(Tensor self, Scalar? p=None) -> Tensor"""
    if p is None or p in (2, -2):
        s = jnp.linalg.svd(self, compute_uv=False)
        big, small = jnp.max(s, axis=-1), jnp.min(s, axis=-1)
        return small / big if p == -2 else big / small
    inv = jnp.linalg.inv(self)
    return _matrix_norm(self, p, (-2, -1), False) * _matrix_norm(inv, p, (-2, -1), False)


@aten("linalg_cross.default")
def aten_linalg_cross(self, other, *, dim=-1):
    """linalg_cross(Tensor self, Tensor other, *, int dim=-1) -> Tensor"""
    shape = jnp.broadcast_shapes(self.shape, other.shape)
    self, other = jnp.broadcast_to(self, shape), jnp.broadcast_to(other, shape)
    dtype = self.dtype
    if jnp.issubdtype(dtype, jnp.floating) and opmath_type(dtype) != dtype:
        # PyTorch's half kernel rounds each product and the difference to the half type.
        a, b = (jnp.moveaxis(t.astype(opmath_type(dtype)), dim, 0) for t in (self, other))
        parts = [rounded_as(rounded_as(a[i] * b[j], dtype) - rounded_as(a[j] * b[i], dtype), dtype)
                 for i, j in ((1, 2), (2, 0), (0, 1))]
        return jnp.moveaxis(jnp.stack(parts), 0, dim).astype(dtype)
    return jnp.cross(self, other, axis=dim)


@aten("linalg_eigh.default")
def aten_linalg_eigh(self, UPLO="L"):
    """linalg_eigh(Tensor self, str UPLO="L") -> (Tensor eigenvalues, Tensor eigenvectors)"""
    return aten__linalg_eigh(self, UPLO)


@aten("linalg_eig.default")
def aten_linalg_eig(self):
    """linalg_eig(Tensor self) -> (Tensor eigenvalues, Tensor eigenvectors)"""
    # LAPACK's geev on both sides: eigenvalues in its order, each eigenvector of unit norm (its
    # phase is free: PyTorch's and JAX's builds may choose differently).
    values, vectors = _eig(self)
    dtype = self.dtype if jnp.iscomplexobj(self) else (np.complex128 if self.dtype == np.float64 else np.complex64)
    return values.astype(dtype), vectors.astype(dtype)


@jax.custom_jvp
def _eig(A):
    return jnp.linalg.eig(A)


@_eig.defjvp
def _eig_jvp(primals, tangents):
    # PyTorch's derivative (JAX has none for eigenvectors): with dP = V^-1 dA V, dL = diag(dP)
    # and dV = V (dP / (L_j - L_i), off the diagonal), less the part that would change each
    # eigenvector's norm.
    (A,), (dA,) = primals, tangents
    L, V = _eig(A)
    dA = dA.astype(V.dtype)
    dP = jnp.linalg.solve(V, dA @ V)
    off = ~jnp.eye(A.shape[-1], dtype=bool)
    gaps = L[..., None, :] - L[..., :, None]
    dV = V @ jnp.where(off, dP / jnp.where(off, gaps, jnp.ones((), gaps.dtype)), jnp.zeros((), dP.dtype))
    dV = dV - V * jnp.real(jnp.sum(jnp.conj(V) * dV, axis=-2)).astype(V.dtype)[..., None, :]
    return (L, V), (jnp.diagonal(dP, axis1=-2, axis2=-1), dV)


@aten("linalg_eigvals.default")
def aten_linalg_eigvals(self):
    """linalg_eigvals(Tensor self) -> Tensor"""
    return aten_linalg_eig(self)[0]


@aten("linalg_eigvalsh.default")
def aten_linalg_eigvalsh(self, UPLO="L"):
    """linalg_eigvalsh(Tensor self, str UPLO="L") -> Tensor"""
    return jnp.linalg.eigvalsh(_hermitian(self, UPLO))


@aten("linalg_householder_product.default")
def aten_linalg_householder_product(input, tau):
    """linalg_householder_product(Tensor input, Tensor tau) -> Tensor"""
    return _householder_product(input, tau)


@jax.custom_jvp
def _householder_product(A, tau):
    """The first n columns of H_1 ... H_k, H_i = I - tau_i v_i v_i^H (LAPACK's orgqr/ungqr)."""
    return lax.linalg.householder_product(A, tau)


@_householder_product.defjvp
def _householder_product_jvp(primals, tangents):
    return _householder_product(*primals), jax.jvp(_householder_product_explicit, primals, tangents)[1]


def _householder_product_explicit(A, tau):
    """`_householder_product` as k rank-one updates, which JAX can differentiate (its LAPACK call
    has no derivative rule)."""
    m, n = A.shape[-2:]
    rows = jnp.arange(m)
    Q = jnp.broadcast_to(jnp.eye(m, dtype=A.dtype), A.shape[:-2] + (m, m))
    for i in range(tau.shape[-1]):
        v = jnp.where(rows == i, jnp.ones((), A.dtype), jnp.where(rows > i, A[..., :, i], jnp.zeros((), A.dtype)))
        Qv = jnp.einsum("...ij,...j->...i", Q, v)
        Q = Q - tau[..., i, None, None] * Qv[..., :, None] * jnp.conj(v)[..., None, :]
    return Q[..., :, :n]


@aten("linalg_inv.default")
def aten_linalg_inv(A):
    """linalg_inv(Tensor A) -> Tensor"""
    return jnp.linalg.inv(A)


@aten("linalg_inv_ex.default")
def aten_linalg_inv_ex(A, *, check_errors=False):
    """linalg_inv_ex(Tensor A, *, bool check_errors=False) -> (Tensor inverse, Tensor info)"""
    return jnp.linalg.inv(A), _info(A.shape[:-2])


@aten("linalg_lstsq.default")
def aten_linalg_lstsq(self, b, rcond=None, *, driver=None):
    """linalg_lstsq(Tensor self, Tensor b, float? rcond=None, *, str? driver=None) -> (Tensor solution, Tensor residuals, Tensor rank, Tensor singular_values)"""
    # What each LAPACK driver fills in besides the solution, as PyTorch's CPU kernel does (its
    # default there is gelsy): the rank for gelsy, gelsd and gelss, the singular values for
    # gelsd and gelss, and for a tall system (m > n) the squared residuals of each column for
    # gels, and for gelsd and gelss when every matrix has full rank (a value-dependent shape).
    driver = driver or "gelsy"
    m, n = self.shape[-2:]
    real = jnp.finfo(self.dtype).dtype
    empty = jnp.zeros((0,), real)
    if rcond is None:
        rcond = float(jnp.finfo(self.dtype).eps) * max(m, n)
    solution = jnp.matmul(jnp.linalg.pinv(self, rtol=rcond), b)
    s = jnp.linalg.svd(self, compute_uv=False)
    cutoff = rcond * jnp.max(s, axis=-1, keepdims=True, initial=0.0)
    rank = jnp.sum(s > cutoff, axis=-1, dtype=canonical(np.int64))
    residuals = empty
    tall = m > n
    if driver != "gels":
        tall = tall and driver != "gelsy" and bool(jnp.all(rank == n))
    if tall:
        residuals = jnp.sum(jnp.abs(jnp.matmul(self, solution) - b) ** 2, axis=-2).astype(real)
    return (solution, residuals,
            jnp.zeros((0,), rank.dtype) if driver == "gels" else rank,
            s.astype(real) if driver in ("gelsd", "gelss") else empty)


@aten("linalg_lu.default")
def aten_linalg_lu(A, *, pivot=True):
    """linalg_lu(Tensor A, *, bool pivot=True) -> (Tensor P, Tensor L, Tensor U)"""
    # lax's LU takes batches and rectangular matrices (jax.scipy's only single square ones):
    # A[..., perm, :] = L U, so P = onehot(perm)^T gives A = P L U.
    m, n = A.shape[-2:]
    k = min(m, n)
    lu, _, perm = lax.linalg.lu(A)
    lower = jnp.tril(lu[..., :, :k], -1) + jnp.eye(m, k, dtype=A.dtype)
    upper = jnp.triu(lu[..., :k, :])
    p = jnp.swapaxes(jax.nn.one_hot(perm, m, dtype=A.dtype), -1, -2)
    return p, lower, upper


@aten("linalg_lu_factor.default", "linalg_lu_factor_ex.default")
def aten_linalg_lu_factor(A, *, pivot=True, check_errors=False):
    """linalg_lu_factor_ex(Tensor A, *, bool pivot=True, bool check_errors=False) -> (Tensor LU, Tensor pivots, Tensor info)"""
    lu, pivots, _ = lax.linalg.lu(A)
    return lu, _lu_pivots(pivots), _info(A.shape[:-2])


@aten("linalg_lu_solve.default")
def aten_linalg_lu_solve(LU, pivots, B, *, left=True, adjoint=False):
    """linalg_lu_solve(Tensor LU, Tensor pivots, Tensor B, *, bool left=True, bool adjoint=False) -> Tensor"""
    # A right solve is a left solve of the transposed system: X A = B is A^T X^T = B^T, and
    # X A^H = B is conj(A) X^T = B^T, that is A conj(X^T) = conj(B^T).
    if left:
        lu, rhs = _batch_broadcast(LU, B)
    else:
        lu, rhs = _batch_broadcast(LU, jnp.swapaxes(B, -1, -2))
    piv = jnp.broadcast_to(pivots - 1, lu.shape[:-2] + pivots.shape[-1:])
    if left:
        return jsl.lu_solve((lu, piv), rhs, trans=2 if adjoint else 0)  # 2: A^H, A^T for real A
    if adjoint:
        return jnp.swapaxes(jnp.conj(jsl.lu_solve((lu, piv), jnp.conj(rhs), trans=0)), -1, -2)
    return jnp.swapaxes(jsl.lu_solve((lu, piv), rhs, trans=1), -1, -2)


@aten("linalg_matrix_exp.default", "matrix_exp.default")
def aten_linalg_matrix_exp(self):
    """linalg_matrix_exp(Tensor self) -> Tensor"""
    if self.shape[-1] == 0:
        return self
    return jsl.expm(self.astype(opmath_type(self.dtype))).astype(self.dtype)


@aten("linalg_matrix_norm.default", "linalg_matrix_norm.str_ord")
def aten_linalg_matrix_norm(self, ord="fro", dim=(-2, -1), keepdim=False, *, dtype=None):
    """linalg_matrix_norm.str_ord(Tensor self, str ord="fro", int[] dim=[-2,-1], bool keepdim=False, *, ScalarType? dtype=None) -> Tensor"""
    compute, out_dtype = norm_dtypes(self.dtype, dtype)
    return _matrix_norm(self.astype(compute), ord, tuple(dim), keepdim).astype(out_dtype)


@aten("linalg_matrix_power.default")
def aten_linalg_matrix_power(self, n):
    """linalg_matrix_power(Tensor self, int n) -> Tensor"""
    return jnp.linalg.matrix_power(self, n)


@aten("linalg_matrix_rank.atol_rtol_tensor", "linalg_matrix_rank.atol_rtol_float")
def aten_linalg_matrix_rank(input, *, atol=None, rtol=None, hermitian=False):
    """linalg_matrix_rank.atol_rtol_tensor(Tensor input, *, Tensor? atol=None, Tensor? rtol=None, bool hermitian=False) -> Tensor"""
    if hermitian:
        s = jnp.abs(jnp.linalg.eigvalsh(_hermitian(input)))
    else:
        s = jnp.linalg.svd(input, compute_uv=False)
    smax = jnp.max(s, axis=-1, keepdims=True, initial=0.0)
    if rtol is None:  # PyTorch: eps * max(m, n) when no atol is given, else 0
        rtol = max(input.shape[-2:]) * np.finfo(s.dtype).eps if atol is None else 0.0
    atol = jnp.zeros((), s.dtype) if atol is None else jnp.asarray(atol, s.dtype)
    rtol = jnp.asarray(rtol, s.dtype)
    cutoff = jnp.maximum(atol[..., None] if atol.ndim else atol, (rtol[..., None] if rtol.ndim else rtol) * smax)
    return jnp.sum(s > cutoff, axis=-1, dtype=canonical(np.int64))


@aten("linalg_norm.default", "linalg_norm.ord_str")
def aten_linalg_norm(A, ord=None, dim=None, keepdim=False, *, dtype=None):
    """linalg_norm(Tensor A, Scalar? ord=None, int[1]? dim=None, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor"""
    compute, out_dtype = norm_dtypes(A.dtype, dtype)
    x = A.astype(compute)
    if isinstance(ord, str) or (dim is not None and len(dim) == 2) or (dim is None and ord is not None and A.ndim == 2):
        axes = tuple(dim) if dim is not None else (-2, -1)
        return _matrix_norm(x, "fro" if ord is None else ord, axes, keepdim).astype(out_dtype)
    if dim is None:
        x, dim = (x.reshape(-1), None) if not keepdim else (x, None)
    axes = tuple(range(x.ndim)) if dim is None else tuple(d % x.ndim for d in dim)
    return p_norm(x, ord, axes, keepdim).astype(out_dtype)


@aten("linalg_pinv.atol_rtol_tensor", "linalg_pinv.atol_rtol_float")
def aten_linalg_pinv(self, *, atol=None, rtol=None, hermitian=False):
    """linalg_pinv.atol_rtol_tensor(Tensor self, *, Tensor? atol=None, Tensor? rtol=None, bool hermitian=False) -> Tensor"""
    real = np.dtype(jnp.finfo(self.dtype).dtype)
    if rtol is None:  # PyTorch: eps * max(m, n) when no atol is given, else 0
        rtol = max(self.shape[-2:]) * np.finfo(real).eps if atol is None else 0.0
    atol = jnp.zeros((), real) if atol is None else jnp.asarray(atol, real)
    return _pinv(self, atol, jnp.asarray(rtol, real), hermitian)


@functools.partial(jax.custom_jvp, nondiff_argnums=(3,))
def _pinv(A, atol, rtol, hermitian):
    """The pseudo-inverse of A, dropping singular values (eigenvalue moduli where `hermitian`) at
    or below max(atol, rtol * the largest)."""
    if hermitian:
        values, vectors = jnp.linalg.eigh(_hermitian(A), symmetrize_input=False)
        s = jnp.abs(values)
    else:
        u, s, vh = jnp.linalg.svd(A, full_matrices=False)
    smax = jnp.max(s, axis=-1, keepdims=True, initial=0.0)
    cutoff = jnp.maximum(atol[..., None] if atol.ndim else atol, (rtol[..., None] if rtol.ndim else rtol) * smax)
    keep = s > cutoff
    if hermitian:
        s_inv = jnp.where(keep, 1 / jnp.where(keep, values, 1), 0).astype(vectors.dtype)  # real, for complex A too
        return jnp.matmul(vectors * s_inv[..., None, :], _adjoint(vectors))
    s_inv = jnp.where(keep, 1 / jnp.where(keep, s, 1), 0).astype(vh.dtype)
    return jnp.matmul(_adjoint(vh) * s_inv[..., None, :], _adjoint(u))


@_pinv.defjvp
def _pinv_jvp(hermitian, primals, tangents):
    # PyTorch's pinv derivative (Golub and Pereyra), where the rank stays constant: through the
    # decomposition's own derivative, repeated or zero singular values would give 0/0.
    A, atol, rtol = primals
    dA = tangents[0]
    P = _pinv(A, atol, rtol, hermitian)
    m, n = A.shape[-2:]
    dAh = _adjoint(dA)
    dP = (-P @ dA @ P
          + (jnp.eye(n, dtype=A.dtype) - P @ A) @ dAh @ _adjoint(P) @ P
          + P @ _adjoint(P) @ dAh @ (jnp.eye(m, dtype=A.dtype) - A @ P))
    return P, dP


@aten("linalg_qr.default")
def aten_linalg_qr(A, mode="reduced"):
    """linalg_qr(Tensor A, str mode="reduced") -> (Tensor Q, Tensor R)"""
    if mode == "r":
        return jnp.zeros((0,), A.dtype), jnp.linalg.qr(A, mode="r")
    return tuple(jnp.linalg.qr(A, mode=mode))


@aten("linalg_slogdet.default")
def aten_linalg_slogdet(A):
    """linalg_slogdet(Tensor A) -> (Tensor sign, Tensor logabsdet)"""
    return tuple(jnp.linalg.slogdet(A))


@aten("linalg_solve.default")
def aten_linalg_solve(A, B, *, left=True):
    """linalg_solve(Tensor A, Tensor B, *, bool left=True) -> Tensor"""
    return aten__linalg_solve_ex(A, B, left=left)[0]


@aten("linalg_solve_ex.default")
def aten_linalg_solve_ex(A, B, *, left=True, check_errors=False):
    """linalg_solve_ex(Tensor A, Tensor B, *, bool left=True, bool check_errors=False) -> (Tensor result, Tensor info)"""
    result, _, _, info = aten__linalg_solve_ex(A, B, left=left)
    return result, info


@aten("linalg_solve_triangular.default")
def aten_linalg_solve_triangular(self, B, *, upper, left=True, unitriangular=False):
    """linalg_solve_triangular(Tensor self, Tensor B, *, bool upper, bool left=True, bool unitriangular=False) -> Tensor"""
    a, b = _batch_broadcast(self, B)
    if left:
        return jsl.solve_triangular(a, b, lower=not upper, unit_diagonal=unitriangular)
    out = jsl.solve_triangular(a, jnp.swapaxes(b, -1, -2), trans=1, lower=not upper, unit_diagonal=unitriangular)
    return jnp.swapaxes(out, -1, -2)


@aten("linalg_svd.default")
def aten_linalg_svd(A, full_matrices=True, *, driver=None):
    """linalg_svd(Tensor A, bool full_matrices=True, *, str? driver=None) -> (Tensor U, Tensor S, Tensor Vh)"""
    return aten__linalg_svd(A, full_matrices)


@aten("linalg_svdvals.default")
def aten_linalg_svdvals(A, *, driver=None):
    """linalg_svdvals(Tensor A, *, str? driver=None) -> Tensor"""
    return jnp.linalg.svd(A, compute_uv=False)


@aten("linalg_tensorinv.default")
def aten_linalg_tensorinv(self, ind=2):
    """linalg_tensorinv(Tensor self, int ind=2) -> Tensor"""
    return jnp.linalg.tensorinv(self, ind=ind)


@aten("linalg_tensorsolve.default")
def aten_linalg_tensorsolve(self, other, dims=None):
    """linalg_tensorsolve(Tensor self, Tensor other, int[]? dims=None) -> Tensor"""
    if dims is not None:
        self = jnp.moveaxis(self, tuple(dims), tuple(range(self.ndim - len(dims), self.ndim)))
    out_shape = self.shape[other.ndim:]
    n = math.prod(out_shape)
    return jnp.linalg.solve(self.reshape(-1, n), other.reshape(-1)).reshape(out_shape)


@aten("logdet.default")
def aten_logdet(self):
    """logdet(Tensor self) -> Tensor"""
    sign, logabsdet = jnp.linalg.slogdet(self)
    if jnp.iscomplexobj(self):  # the complex logarithm: log|det| + i arg(det)
        out = lax.complex(logabsdet, jnp.angle(sign))
        return jnp.where(sign == 0, jnp.asarray(-jnp.inf, out.dtype), out)
    return jnp.where(sign < 0, jnp.nan, jnp.where(sign == 0, -jnp.inf, logabsdet)).astype(logabsdet.dtype)


@aten("lu_unpack.default")
def aten_lu_unpack(LU_data, LU_pivots, unpack_data=True, unpack_pivots=True):
    """lu_unpack(Tensor LU_data, Tensor LU_pivots, bool unpack_data=True, bool unpack_pivots=True) -> (Tensor P, Tensor L, Tensor U)"""
    m, n = LU_data.shape[-2:]
    k = min(m, n)
    empty = jnp.zeros((0,), LU_data.dtype)
    L = U = P = empty
    if unpack_data:
        L = jnp.tril(LU_data[..., :, :k], -1) + jnp.eye(m, k, dtype=LU_data.dtype)
        U = jnp.triu(LU_data[..., :k, :])
    if unpack_pivots:
        pivots = LU_pivots.astype(np.int32) - 1
        if m == 0 or pivots.shape[-1] == 0:
            perm = jnp.broadcast_to(jnp.arange(m, dtype=np.int32), LU_pivots.shape[:-1] + (m,))
        else:
            perm = lax.linalg.lu_pivots_to_permutation(pivots, m)
        # LAPACK's A = P L U, with A[perm] = L U: P[perm[i], i] = 1.
        P = jnp.swapaxes(jax.nn.one_hot(perm, m, dtype=LU_data.dtype), -1, -2)
    return P, L, U


@aten("ormqr.default")
def aten_ormqr(self, input2, input3, left=True, transpose=False):
    """ormqr(Tensor self, Tensor input2, Tensor input3, bool left=True, bool transpose=False) -> Tensor"""
    size = input3.shape[-2] if left else input3.shape[-1]
    k = input2.shape[-1]
    # Householder reflectors with tau = 0 are the identity: pad to the full m x m Q.
    a = jnp.pad(self[..., :, :k], [(0, 0)] * (self.ndim - 1) + [(0, size - k)])
    tau = jnp.pad(input2, [(0, 0)] * (input2.ndim - 1) + [(0, size - k)])
    q = _householder_product(a, tau)
    if transpose:
        q = jnp.conj(jnp.swapaxes(q, -1, -2))
    q, c = _batch_broadcast(q, input3)
    return _matmul(q, c) if left else _matmul(c, q)


@aten("triangular_solve.default")
def aten_triangular_solve(self, A, upper=True, transpose=False, unitriangular=False):
    """triangular_solve(Tensor self, Tensor A, bool upper=True, bool transpose=False, bool unitriangular=False) -> (Tensor solution, Tensor cloned_coefficient)"""
    a, b = _batch_broadcast(A, self)
    out = jsl.solve_triangular(a, b, trans=int(transpose), lower=not upper, unit_diagonal=unitriangular)
    return out, a
