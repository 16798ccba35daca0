"""ATen lowerings: the `*_scatter` ops (as_strided_scatter, diagonal_scatter, select_scatter,
slice_scatter): `self` with `src` written where the matching view of it lies, as
functionalization records a write through a view.
"""

from __future__ import annotations

import jax.numpy as jnp

from ..registry import aten
from ._promotion import canonical_dim
from .diagonal import _diag_indices
from .shape import _slice_bounds, _slice_index, _strided_indices


@aten("as_strided_scatter.default")
def aten_as_strided_scatter(self, src, size, stride, storage_offset=None):
    """as_strided_scatter(Tensor self, Tensor src, SymInt[] size, SymInt[] stride, SymInt? storage_offset=None) -> Tensor"""
    index = _strided_indices(size, stride, storage_offset)
    flat = jnp.ravel(self).at[index].set(src.astype(self.dtype))
    return flat.reshape(self.shape)


@aten("diagonal_scatter.default")
def aten_diagonal_scatter(self, src, offset=0, dim1=0, dim2=1):
    """diagonal_scatter(Tensor self, Tensor src, int offset=0, int dim1=0, int dim2=1) -> Tensor"""
    dim1, dim2 = canonical_dim(dim1, self.ndim), canonical_dim(dim2, self.ndim)
    rows, cols = _diag_indices(self.shape[dim1], self.shape[dim2], offset)
    x = jnp.moveaxis(self, (dim1, dim2), (-2, -1))
    x = x.at[..., rows, cols].set(src.astype(self.dtype))
    return jnp.moveaxis(x, (-2, -1), (dim1, dim2))


@aten("select_scatter.default")
def aten_select_scatter(self, src, dim, index):
    """select_scatter(Tensor self, Tensor src, int dim, SymInt index) -> Tensor"""
    dim = canonical_dim(dim, self.ndim)
    index = int(index)
    if index < 0:
        index += self.shape[dim]
    return self.at[_slice_index(self.ndim, dim, index)].set(src.astype(self.dtype))


@aten("slice_scatter.default")
def aten_slice_scatter(self, src, dim=0, start=None, end=None, step=1):
    """slice_scatter(Tensor self, Tensor src, int dim=0, SymInt? start=None, SymInt? end=None, SymInt step=1) -> Tensor"""
    if self.ndim == 0:
        return src.astype(self.dtype)
    dim = canonical_dim(dim, self.ndim)
    start, end, step = _slice_bounds(self.shape[dim], start, end, step)
    index = _slice_index(self.ndim, dim, slice(start, end, step))
    return self.at[index].set(src.astype(self.dtype))
