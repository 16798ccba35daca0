"""ATen lowerings: vector norms and distances (norm, linalg_vector_norm, dist, renorm, cdist,
pdist); matrix norms are `linalg`'s.

`p_norm` is PyTorch's vector p-norm, differentiated as PyTorch's norm backward; `linalg` and
`loss` use it too.
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np

from ..registry import aten
from ._promotion import as_array, canonical_dim, norm_dtypes, opmath_type, result_type
from .reduction import _axes


def p_norm(x, p, axes, keepdims):
    """PyTorch's vector p-norm of `x` (already in its computation dtype) over `axes` (None: all),
    p=0 counting nonzeros, an empty max-norm 0.

    Differentiated as PyTorch's norm backward: where the norm is 0 its gradient is 0 (a
    subgradient, not 0/0), and so is a zero element's for 0 < p < 1 (not 0 * inf) and a complex
    zero's (whose modulus has no derivative).
    """
    zero = x == 0
    a = jnp.where(zero, 0, jnp.abs(jnp.where(zero, 1, x))) if jnp.iscomplexobj(x) else jnp.abs(x)
    p = 2.0 if p is None else float(p)
    if p == math.inf:
        return jnp.max(a, axis=axes, keepdims=keepdims, initial=0)  # moduli are >= 0
    if p == -math.inf:
        return jnp.min(a, axis=axes, keepdims=keepdims)
    if p == 0:
        return jnp.sum((a != 0).astype(a.dtype), axis=axes, keepdims=keepdims)
    if p == 1:
        return jnp.sum(a, axis=axes, keepdims=keepdims)
    powers = a * a if p == 2 else jnp.where(zero, 0, jnp.where(zero, 1, a) ** p) if 0 < p < 1 else a**p
    total = jnp.sum(powers, axis=axes, keepdims=keepdims)
    if p < 0:  # a zero sum is an infinite norm here (every element infinite), nothing to guard
        return total ** (1.0 / p)
    vanishes = total == 0
    safe = jnp.where(vanishes, 1, total)
    return jnp.where(vanishes, 0, jnp.sqrt(safe) if p == 2 else safe ** (1.0 / p))


def _vector_norm(self, ord, dim, keepdim, dtype):
    compute, out_dtype = norm_dtypes(self.dtype, dtype)
    axes = _axes(dim, self.ndim)
    return p_norm(self.astype(compute), ord, axes, keepdim).astype(out_dtype)


def _pnorm_dist(diff, p, axis=-1):
    """The p-norm of `diff` along `axis`, PyTorch's cdist/pdist definition (p=0 counts nonzeros)."""
    return p_norm(diff, p, axis, False)


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


@aten("_pdist_forward.default")
def aten__pdist_forward(self, p=2.0):
    """_pdist_forward(Tensor self, float p=2.) -> Tensor"""
    dtype = np.dtype(self.dtype)
    rows, cols = np.triu_indices(self.shape[0], 1)
    x = self.astype(opmath_type(dtype))
    return _pnorm_dist(x[rows] - x[cols], p).astype(dtype)


@aten("dist.default")
def aten_dist(self, other, p=2):
    """dist(Tensor self, Tensor other, Scalar p=2) -> Tensor"""
    dtype = result_type(self, other)
    diff = as_array(self, dtype) - as_array(other, dtype)
    real = np.dtype(jnp.finfo(dtype).dtype)
    return p_norm(diff.astype(opmath_type(dtype)), p, None, False).astype(real)


@aten("linalg_vector_norm.default")
def aten_linalg_vector_norm(self, ord=2, dim=None, keepdim=False, *, dtype=None):
    """linalg_vector_norm(Tensor self, Scalar ord=2, int[1]? dim=None, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor"""
    return _vector_norm(self, ord, dim, keepdim, dtype)


@aten("norm.Scalar", "norm.ScalarOpt_dim", "norm.ScalarOpt_dim_dtype", "norm.ScalarOpt_dtype")
def aten_norm(self, p=2, dim=None, keepdim=False, *, dtype=None):
    """norm.ScalarOpt_dim_dtype(Tensor self, Scalar? p, int[1] dim, bool keepdim, *, ScalarType dtype) -> Tensor"""
    return _vector_norm(self, p, dim, keepdim, dtype)


@aten("renorm.default")
def aten_renorm(self, p, dim, maxnorm):
    """renorm(Tensor self, Scalar p, int dim, Scalar maxnorm) -> Tensor"""
    dim = canonical_dim(dim, self.ndim)
    axes = tuple(a for a in range(self.ndim) if a != dim)
    real = np.dtype(jnp.finfo(self.dtype).dtype)
    norm = p_norm(self.astype(opmath_type(self.dtype)), p, axes, True)
    maxnorm = jnp.asarray(maxnorm, real).astype(norm.dtype)
    factor = jnp.where(norm > maxnorm, maxnorm / (norm + 1e-7), jnp.ones_like(norm)).astype(real)
    return self * factor.astype(self.dtype)
