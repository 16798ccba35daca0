"""ATen lowerings: joining and splitting (cat, stack, hstack, vstack, dstack, column_stack, split,
chunk, tensor_split, hsplit, vsplit, dsplit, unbind, _chunk_cat).

`cat` promotes its inputs to one dtype and, as PyTorch, skips 1-d empty tensors; the pieces
of a split are views in PyTorch and new arrays here (see `shape`).
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax

from ..registry import aten
from ._promotion import canonical_dim, result_type
from .shape import _atleast, _slice


def _split_sizes(x, sizes, dim: int) -> list:
    if x.ndim == 0:
        return [x]
    dim = canonical_dim(dim, x.ndim)
    out, start = [], 0
    for size in sizes:
        out.append(lax.slice_in_dim(x, start, start + int(size), axis=dim))
        start += int(size)
    return out


def _split_at(x, indices, dim: int) -> list:
    """`x` cut before each of `indices` along `dim`, indices clamped as slices are."""
    dim = canonical_dim(dim, x.ndim)
    bounds = [0, *indices, x.shape[dim]]
    return [_slice(x, dim, a, b) for a, b in zip(bounds[:-1], bounds[1:])]


def _cat(tensors, dim: int):
    dtype = result_type(*tensors)
    kept = [t for t in tensors if not (t.ndim == 1 and t.shape[0] == 0)]
    if not kept:
        return jnp.zeros((0,), dtype)
    dim = canonical_dim(dim, kept[0].ndim)
    return jnp.concatenate([t.astype(dtype) for t in kept], axis=dim)


@aten("_chunk_cat.default")
def aten__chunk_cat(tensors, dim, num_chunks):
    """_chunk_cat(Tensor[] tensors, int dim, int num_chunks) -> Tensor"""
    dim = canonical_dim(dim, tensors[0].ndim) if len({t.ndim for t in tensors}) == 1 else dim
    pieces = []
    for t in tensors:
        size = t.shape[dim]
        padded = -(-size // num_chunks) * num_chunks
        widths = [(0, 0)] * t.ndim
        widths[dim] = (0, padded - size)
        t = jnp.pad(t, widths)
        pieces.append(t.reshape(*t.shape[:dim], num_chunks, -1))
    return jnp.concatenate(pieces, axis=dim + 1)


@aten("cat.default", "concatenate.default", "concat.default")
def aten_cat(tensors, dim=0):
    """cat(Tensor[] tensors, int dim=0) -> Tensor; concatenate and concat are its aliases."""
    return _cat(tensors, dim)


@aten("chunk.default", "unsafe_chunk.default")
def aten_chunk(self, chunks, dim=0):
    """chunk(Tensor(a -> *) self, int chunks, int dim=0) -> Tensor(a)[]"""
    size = self.shape[canonical_dim(dim, self.ndim)] if self.ndim else 1
    split_size = -(-size // chunks)
    if split_size == 0 and size == 0:
        return _split_sizes(self, [0] * chunks, dim)
    return aten_split(self, split_size, dim)


@aten("column_stack.default")
def aten_column_stack(tensors):
    """column_stack(Tensor[] tensors) -> Tensor"""
    return aten_hstack([t.reshape(-1, 1) if t.ndim <= 1 else t for t in tensors])


@aten("dsplit.int", "dsplit.array")
def aten_dsplit(self, sections):
    """dsplit.int(Tensor(a -> *) self, int sections) -> Tensor(a)[]"""
    return aten_tensor_split(self, sections, 2)


@aten("dstack.default")
def aten_dstack(tensors):
    """dstack(Tensor[] tensors) -> Tensor"""
    return _cat([_atleast(t, 3) for t in tensors], 2)


@aten("hsplit.int", "hsplit.array")
def aten_hsplit(self, sections):
    """hsplit.int(Tensor(a -> *) self, int sections) -> Tensor(a)[]"""
    return aten_tensor_split(self, sections, 0 if self.ndim == 1 else 1)


@aten("hstack.default")
def aten_hstack(tensors):
    """hstack(Tensor[] tensors) -> Tensor"""
    tensors = [_atleast(t, 1) for t in tensors]
    return _cat(tensors, 0 if tensors[0].ndim == 1 else 1)


@aten("split.Tensor", "split_copy.Tensor", "unsafe_split.Tensor")
def aten_split(self, split_size, dim=0):
    """split.Tensor(Tensor(a -> *) self, SymInt split_size, int dim=0) -> Tensor(a)[]"""
    size = self.shape[canonical_dim(dim, self.ndim)] if self.ndim else 1
    split_size = int(split_size)
    count = max(-(-size // split_size), 1) if split_size else 1
    sizes = [split_size] * (count - 1) + [size - split_size * (count - 1)]
    return _split_sizes(self, sizes, dim)


@aten("split_with_sizes.default", "split_with_sizes_copy.default", "unsafe_split_with_sizes.default")
def aten_split_with_sizes(self, split_sizes, dim=0):
    """split_with_sizes(Tensor(a -> *) self, SymInt[] split_sizes, int dim=0) -> Tensor(a)[]"""
    return _split_sizes(self, split_sizes, dim)


@aten("stack.default")
def aten_stack(tensors, dim=0):
    """stack(Tensor[] tensors, int dim=0) -> Tensor"""
    dtype = result_type(*tensors)
    dim = canonical_dim(dim, tensors[0].ndim + 1)
    return jnp.stack([t.astype(dtype) for t in tensors], axis=dim)


@aten("tensor_split.sections", "tensor_split.indices", "tensor_split.tensor_indices_or_sections")
def aten_tensor_split(self, sections, dim=0):
    """tensor_split.indices(Tensor(a -> *) self, SymInt[] indices, int dim=0) -> Tensor(a)[]"""
    if isinstance(sections, (list, tuple)):
        return _split_at(self, [int(i) for i in sections], dim)
    if not isinstance(sections, int):
        # A tensor of split points (1-D) or a section count (0-d): its values must be concrete.
        sections = np.asarray(sections)
        sections = [int(i) for i in sections] if sections.ndim else int(sections)
        return aten_tensor_split(self, sections, dim)
    size = self.shape[canonical_dim(dim, self.ndim)]
    base, extra = divmod(size, int(sections))
    return _split_sizes(self, [base + 1] * extra + [base] * (int(sections) - extra), dim)


@aten("unbind.int", "unbind_copy.int")
def aten_unbind(self, dim=0):
    """unbind.int(Tensor(a -> *) self, int dim=0) -> Tensor(a)[]"""
    dim = canonical_dim(dim, self.ndim)
    return [lax.index_in_dim(self, i, axis=dim, keepdims=False) for i in range(self.shape[dim])]


@aten("vsplit.int", "vsplit.array")
def aten_vsplit(self, sections):
    """vsplit.int(Tensor(a -> *) self, int sections) -> Tensor(a)[]"""
    return aten_tensor_split(self, sections, 0)


@aten("vstack.default")
def aten_vstack(tensors):
    """vstack(Tensor[] tensors) -> Tensor"""
    return _cat([_atleast(t, 2) for t in tensors], 0)
