"""ATen lowerings: diagonals and triangles of matrices (diag, diag_embed, diagflat, diagonal,
linalg_diagonal, tril, triu) and block_diag.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax

from ..registry import aten
from ._promotion import canonical_dim, result_type


def _diag_indices(rows: int, cols: int, offset: int):
    """Row and column indices of the `offset` diagonal of a rows x cols matrix."""
    n = max(min(rows + min(offset, 0), cols - max(offset, 0)), 0)
    r = np.arange(n) + max(-offset, 0)
    c = np.arange(n) + max(offset, 0)
    return r, c


@aten("block_diag.default")
def aten_block_diag(tensors):
    """block_diag(Tensor[] tensors) -> Tensor"""
    dtype = result_type(*tensors)
    blocks = [jnp.reshape(t, (1, -1)) if t.ndim < 2 else t for t in tensors]
    rows = sum(b.shape[0] for b in blocks)
    cols = sum(b.shape[1] for b in blocks)
    out = jnp.zeros((rows, cols), dtype)
    r = c = 0
    for b in blocks:
        out = lax.dynamic_update_slice(out, b.astype(dtype), (r, c)) if b.size else out
        r, c = r + b.shape[0], c + b.shape[1]
    return out


@aten("diag.default")
def aten_diag(self, diagonal=0):
    """diag(Tensor self, int diagonal=0) -> Tensor"""
    if self.ndim == 1:
        return aten_diag_embed(self, diagonal, 0, 1)
    return aten_diagonal(self, diagonal, 0, 1)


@aten("diag_embed.default")
def aten_diag_embed(self, offset=0, dim1=-2, dim2=-1):
    """diag_embed(Tensor self, int offset=0, int dim1=-2, int dim2=-1) -> Tensor"""
    ndim = self.ndim + 1
    dim1, dim2 = canonical_dim(dim1, ndim), canonical_dim(dim2, ndim)
    n = self.shape[-1] + abs(offset)
    rows, cols = _diag_indices(n, n, offset)
    out = jnp.zeros((*self.shape[:-1], n, n), self.dtype).at[..., rows, cols].set(self)
    # dims other than dim1/dim2 keep their order; place the two diagonal dims.
    order = [d for d in range(ndim) if d not in (dim1, dim2)]
    perm = [0] * ndim
    for src, dst in enumerate(order):
        perm[dst] = src
    perm[dim1], perm[dim2] = ndim - 2, ndim - 1
    return jnp.transpose(out, perm)


@aten("diagflat.default")
def aten_diagflat(self, offset=0):
    """diagflat(Tensor self, int offset=0) -> Tensor"""
    return aten_diag_embed(jnp.ravel(self), offset, 0, 1)


@aten("diagonal.default", "diagonal_copy.default")
def aten_diagonal(self, offset=0, dim1=0, dim2=1):
    """diagonal(Tensor(a) self, int offset=0, int dim1=0, int dim2=1) -> Tensor(a)"""
    dim1, dim2 = canonical_dim(dim1, self.ndim), canonical_dim(dim2, self.ndim)
    rows, cols = _diag_indices(self.shape[dim1], self.shape[dim2], offset)
    x = jnp.moveaxis(self, (dim1, dim2), (-2, -1))
    return x[..., rows, cols]


@aten("linalg_diagonal.default")
def aten_linalg_diagonal(A, *, offset=0, dim1=-2, dim2=-1):
    """linalg_diagonal(Tensor(a) A, *, int offset=0, int dim1=-2, int dim2=-1) -> Tensor(a)"""
    return aten_diagonal(A, offset, dim1, dim2)


@aten("tril.default")
def aten_tril(self, diagonal=0):
    """tril(Tensor self, SymInt diagonal=0) -> Tensor"""
    return jnp.tril(self, int(diagonal))


@aten("triu.default")
def aten_triu(self, diagonal=0):
    """triu(Tensor self, SymInt diagonal=0) -> Tensor"""
    return jnp.triu(self, int(diagonal))
