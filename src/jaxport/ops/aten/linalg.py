"""ATen lowerings: matrix products, distances and `torch.linalg`.

Products accumulate float16/bfloat16 in float32 (`preferred_element_type`) and
round once, as PyTorch's kernels do; `alpha`/`beta` scaling happens in that
precision too, and `beta=0` ignores `self` entirely (NaN in it does not leak).
LAPACK-style results that PyTorch returns alongside (LU factors, pivots, info)
follow LAPACK's conventions: 1-based int32 pivots, int32 info.
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import jax.scipy.linalg as jsl
import numpy as np
from jax import lax

from ..registry import aten
from ._promotion import canonical, opmath_type, result_type


def _product(fn, *operands):
    """`fn(*operands, preferred_element_type=...)` in opmath precision: (result, output dtype)."""
    dtype = result_type(*operands)
    operands = [x.astype(dtype) for x in operands]
    if dtype == np.bool_:
        out = fn(*[x.astype(np.int32) for x in operands], preferred_element_type=np.int32) != 0
        return out, dtype
    return fn(*operands, preferred_element_type=opmath_type(dtype)), dtype


def _scaled_add(self, product, beta, alpha, dtype):
    """beta * self + alpha * product, in the product's precision; `beta == 0` drops `self`."""
    if dtype == np.bool_:
        out = product & bool(alpha)
        return out | (self.astype(bool) & bool(beta)) if beta else out
    compute = product.dtype
    if alpha != 1:
        product = product * jnp.asarray(alpha, compute)
    if beta != 0:
        scaled = self.astype(compute)
        if beta != 1:
            scaled = scaled * jnp.asarray(beta, compute)
        product = product + scaled
    return product.astype(dtype)


def _matmul(a, b, preferred_element_type=None):
    return jnp.matmul(a, b, preferred_element_type=preferred_element_type)


def _lu_pivots(pivots):
    """JAX's 0-based LU pivots as LAPACK's 1-based int32."""
    return (pivots + 1).astype(np.int32)


def _info(shape):
    return jnp.zeros(shape, np.int32)


def _pnorm_dist(diff, p, axis=-1):
    """The p-norm of `diff` along `axis`, PyTorch's cdist/pdist definition (p=0 counts nonzeros)."""
    a = jnp.abs(diff)
    if p == 0:
        return jnp.sum((a != 0).astype(a.dtype), axis=axis)
    if p == 1:
        return jnp.sum(a, axis=axis)
    if p == 2:
        return jnp.sqrt(jnp.sum(a * a, axis=axis))
    if math.isinf(p):
        return jnp.max(a, axis=axis) if a.shape[axis] else jnp.zeros(a.shape[:axis % a.ndim], a.dtype)
    return jnp.sum(a**p, axis=axis) ** (1.0 / p)


# -- ops ------------------------------------------------------------------------------------------


@aten("_cdist_forward.default")
def aten__cdist_forward(x1, x2, p, compute_mode):
    """_cdist_forward(Tensor x1, Tensor x2, float p, int? compute_mode) -> Tensor"""
    dtype = np.dtype(x1.dtype)
    compute = opmath_type(dtype)
    a, b = x1.astype(compute), x2.astype(compute)
    batch = jnp.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    a = jnp.broadcast_to(a, batch + a.shape[-2:])
    b = jnp.broadcast_to(b, batch + b.shape[-2:])
    r1, r2 = a.shape[-2], b.shape[-2]
    # compute_mode: None/0 = matrix products for p=2 when either side has more than 25 rows,
    # 1 = always for p=2, 2 = never; this is how PyTorch picks, and the two differ by rounding.
    use_mm = p == 2 and (compute_mode == 1 or (compute_mode in (None, 0) and (r1 > 25 or r2 > 25)))
    if use_mm and a.shape[-1] > 0:
        a_sq = jnp.sum(a * a, axis=-1, keepdims=True)
        b_sq = jnp.sum(b * b, axis=-1, keepdims=True)
        cross = jnp.matmul(a, jnp.swapaxes(b, -1, -2))
        out = jnp.sqrt(jnp.maximum(a_sq - 2 * cross + jnp.swapaxes(b_sq, -1, -2), 0))
    else:
        out = _pnorm_dist(a[..., :, None, :] - b[..., None, :, :], p)
    return out.astype(dtype)


@aten("_linalg_det.default")
def aten__linalg_det(A):
    """_linalg_det(Tensor A) -> (Tensor result, Tensor LU, Tensor pivots)"""
    lu, pivots, _ = lax.linalg.lu(A)
    return jnp.linalg.det(A), lu, _lu_pivots(pivots)


@aten("_linalg_eigh.default")
def aten__linalg_eigh(A, UPLO="L", compute_v=True):
    """_linalg_eigh(Tensor A, str UPLO="L", bool compute_v=True) -> (Tensor eigenvalues, Tensor eigenvectors)"""
    values, vectors = jnp.linalg.eigh(A, UPLO=UPLO, symmetrize_input=False)
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


@aten("_pdist_forward.default")
def aten__pdist_forward(self, p=2.0):
    """_pdist_forward(Tensor self, float p=2.) -> Tensor"""
    dtype = np.dtype(self.dtype)
    rows, cols = np.triu_indices(self.shape[0], 1)
    x = self.astype(opmath_type(dtype))
    return _pnorm_dist(x[rows] - x[cols], p).astype(dtype)


@aten("addbmm.default")
def aten_addbmm(self, batch1, batch2, *, beta=1, alpha=1):
    """addbmm(Tensor self, Tensor batch1, Tensor batch2, *, Scalar beta=1, Scalar alpha=1) -> Tensor"""
    dtype = result_type(batch1, batch2)
    if opmath_type(dtype) != dtype and batch1.shape[0] > 0:
        # PyTorch adds one addmm per batch into the 16-bit result, rounding after each.
        out = aten_addmm(self, batch1[0], batch2[0], beta=beta, alpha=alpha)
        out = jnp.broadcast_to(out, (batch1.shape[1], batch2.shape[2]))

        def step(acc, mats):
            return aten_addmm(acc, mats[0], mats[1], beta=1, alpha=alpha), None

        return lax.scan(step, out, (batch1[1:], batch2[1:]))[0]
    product, dtype = _product(
        lambda a, b, **kw: lax.dot_general(a, b, (((0, 2), (0, 1)), ((), ())), **kw), batch1, batch2
    )
    return _scaled_add(self, product, beta, alpha, dtype)


@aten("addmm.default")
def aten_addmm(self, mat1, mat2, *, beta=1, alpha=1):
    """addmm(Tensor self, Tensor mat1, Tensor mat2, *, Scalar beta=1, Scalar alpha=1) -> Tensor"""
    product, dtype = _product(_matmul, mat1, mat2)
    return _scaled_add(self, product, beta, alpha, dtype)


@aten("addmv.default")
def aten_addmv(self, mat, vec, *, beta=1, alpha=1):
    """addmv(Tensor self, Tensor mat, Tensor vec, *, Scalar beta=1, Scalar alpha=1) -> Tensor"""
    product, dtype = _product(_matmul, mat, vec)
    return _scaled_add(self, product, beta, alpha, dtype)


@aten("addr.default")
def aten_addr(self, vec1, vec2, *, beta=1, alpha=1):
    """addr(Tensor self, Tensor vec1, Tensor vec2, *, Scalar beta=1, Scalar alpha=1) -> Tensor"""
    dtype = result_type(vec1, vec2)
    if opmath_type(dtype) != dtype:
        # PyTorch's kernel computes beta * self + alpha * vec1 * vec2 elementwise, rounding each op.
        def r(x):
            return x.astype(dtype).astype(np.float32)

        product = r(r(r(jnp.asarray(alpha, np.float32)) * vec1.astype(np.float32))[:, None] * vec2.astype(np.float32))
        if beta != 0:
            product = r(r(jnp.asarray(beta, np.float32)) * self.astype(np.float32)) + product
        return jnp.broadcast_to(product, (vec1.shape[0], vec2.shape[0])).astype(dtype)
    product, dtype = _product(
        lambda a, b, **kw: lax.dot_general(a[:, None], b[None, :], (((1,), (0,)), ((), ())), **kw), vec1, vec2
    )
    return _scaled_add(self, product, beta, alpha, dtype)


@aten("baddbmm.default")
def aten_baddbmm(self, batch1, batch2, *, beta=1, alpha=1):
    """baddbmm(Tensor self, Tensor batch1, Tensor batch2, *, Scalar beta=1, Scalar alpha=1) -> Tensor"""
    product, dtype = _product(_matmul, batch1, batch2)
    return _scaled_add(self, product, beta, alpha, dtype)


@aten("bmm.default", "matmul.default", "mm.default", "mv.default")
def aten_matmul(self, other):
    """matmul(Tensor self, Tensor other) -> Tensor"""
    out, dtype = _product(_matmul, self, other)
    return out.astype(dtype)


@aten("dot.default", "vdot.default")
def aten_dot(self, tensor):
    """dot(Tensor self, Tensor tensor) -> Tensor"""
    out, dtype = _product(
        lambda a, b, **kw: lax.dot_general(jnp.conj(a) if jnp.iscomplexobj(a) else a, b, (((0,), (0,)), ((), ())), **kw),
        self, tensor,
    )
    return out.astype(dtype)


@aten("einsum.default")
def aten_einsum(equation, tensors, *, path=None):
    """einsum(str equation, Tensor[] tensors, *, int[]? path=None) -> Tensor"""
    dtype = result_type(*tensors)
    if len(tensors) == 1:  # a pure reduction: sum in opmath, as PyTorch does
        out = jnp.einsum(equation, tensors[0].astype(opmath_type(dtype)))
    else:
        out, dtype = _product(lambda *ops, **kw: jnp.einsum(equation, *ops, **kw), *tensors)
    if dtype == np.bool_ or jnp.issubdtype(dtype, jnp.integer):
        # PyTorch sums away a label found in one operand only with `sum`, which widens to int64.
        inputs, _, output = equation.replace(" ", "").partition("->")
        terms = inputs.split(",")
        def summed_early(i):
            others = set(output) | {c for j, t in enumerate(terms) if j != i for c in t}
            return any(c.isalpha() and c not in others for c in terms[i])
        if "->" in equation and all(summed_early(i) for i in range(len(terms))):
            dtype = canonical(np.int64)
    return out.astype(dtype)


@aten("linalg_cholesky_ex.default")
def aten_linalg_cholesky_ex(self, *, upper=False, check_errors=False):
    """linalg_cholesky_ex(Tensor self, *, bool upper=False, bool check_errors=False) -> (Tensor L, Tensor info)"""
    lower = jnp.linalg.cholesky(self, symmetrize_input=False)
    out = jnp.conj(jnp.swapaxes(lower, -1, -2)) if upper else lower
    return out, _info(self.shape[:-2])


@aten("linalg_inv_ex.default")
def aten_linalg_inv_ex(A, *, check_errors=False):
    """linalg_inv_ex(Tensor A, *, bool check_errors=False) -> (Tensor inverse, Tensor info)"""
    return jnp.linalg.inv(A), _info(A.shape[:-2])


@aten("linalg_lstsq.default")
def aten_linalg_lstsq(self, b, rcond=None, *, driver=None):
    """linalg_lstsq(Tensor self, Tensor b, float? rcond=None, *, str? driver=None) -> (Tensor solution, Tensor residuals, Tensor rank, Tensor singular_values)"""
    # PyTorch's default CPU driver, gelsy, returns neither residuals nor singular values.
    pinv = jnp.linalg.pinv(self, rtol=rcond)
    solution = jnp.matmul(pinv, b)
    empty = jnp.zeros((0,), self.dtype)
    return solution, empty, jnp.zeros((0,), canonical(np.int64)), empty


@aten("linalg_pinv.atol_rtol_tensor", "linalg_pinv.atol_rtol_float")
def aten_linalg_pinv(self, *, atol=None, rtol=None, hermitian=False):
    """linalg_pinv.atol_rtol_tensor(Tensor self, *, Tensor? atol=None, Tensor? rtol=None, bool hermitian=False) -> Tensor"""
    if hermitian:
        values, vectors = jnp.linalg.eigh(self)
        s = jnp.abs(values)
    else:
        u, s, vh = jnp.linalg.svd(self, full_matrices=False)
    smax = jnp.max(s, axis=-1, keepdims=True, initial=0.0)
    if rtol is None:  # PyTorch: eps * max(m, n) when no atol is given, else 0
        rtol = max(self.shape[-2:]) * np.finfo(s.dtype).eps if atol is None else 0.0
    atol = jnp.zeros((), s.dtype) if atol is None else jnp.asarray(atol, s.dtype)
    rtol = jnp.asarray(rtol, s.dtype)
    cutoff = jnp.maximum(atol[..., None] if atol.ndim else atol, (rtol[..., None] if rtol.ndim else rtol) * smax)
    keep = s > cutoff
    s_inv = jnp.where(keep, 1 / jnp.where(keep, s, 1), 0)
    if hermitian:
        s_inv = jnp.where(keep, 1 / jnp.where(keep, values, 1), 0)
        return jnp.matmul(vectors * s_inv[..., None, :], jnp.conj(jnp.swapaxes(vectors, -1, -2)))
    return jnp.matmul(jnp.conj(jnp.swapaxes(vh, -1, -2)) * s_inv[..., None, :], jnp.conj(jnp.swapaxes(u, -1, -2)))


@aten("linalg_qr.default")
def aten_linalg_qr(A, mode="reduced"):
    """linalg_qr(Tensor A, str mode="reduced") -> (Tensor Q, Tensor R)"""
    if mode == "r":
        return jnp.zeros((0,), A.dtype), jnp.linalg.qr(A, mode="r")
    return tuple(jnp.linalg.qr(A, mode=mode))


@aten("linear.default")
def aten_linear(input, weight, bias=None):
    """linear(Tensor input, Tensor weight, Tensor? bias=None) -> Tensor"""
    dtype = np.dtype(input.dtype)
    out = lax.dot_general(
        input, weight.astype(dtype), (((input.ndim - 1,), (weight.ndim - 1,)), ((), ())),
        preferred_element_type=opmath_type(dtype),
    )
    if bias is not None:
        out = out + bias.astype(out.dtype)
    return out.astype(dtype)


@aten("tensordot.default")
def aten_tensordot(self, other, dims_self, dims_other):
    """tensordot(Tensor self, Tensor other, int[] dims_self, int[] dims_other) -> Tensor"""
    # A contracted pair may differ in size when one side is 1: PyTorch sums the other side over it.
    for a, b in zip(dims_self, dims_other):
        if self.shape[a] == 1 and other.shape[b] != 1:
            other = jnp.sum(other, axis=b, keepdims=True, dtype=other.dtype)
        elif other.shape[b] == 1 and self.shape[a] != 1:
            self = jnp.sum(self, axis=a, keepdims=True, dtype=self.dtype)
    out, dtype = _product(
        lambda a, b, **kw: jnp.tensordot(a, b, axes=(tuple(dims_self), tuple(dims_other)), **kw), self, other
    )
    return out.astype(dtype)
