"""ATen lowerings: shape, view and layout ops.

JAX arrays have no strides or storage, so every view op here returns a new
array holding the values the PyTorch view would show; aliasing ops (`alias`,
`detach`, `clone`, `contiguous`) are identities. `as_strided` reads its
input as a contiguous buffer. Dims follow PyTorch: negative dims wrap, and
0-d tensors accept dim 0 and -1. Joining and splitting are `joining`, padding `padding`,
diagonals and triangles `diagonal`, the `*_scatter` ops `view_scatter`.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ..registry import aten
from ._promotion import canonical_dim

# -- helpers -------------------------------------------------------------------------------------


def _dims(dims, ndim: int) -> list[int]:
    if isinstance(dims, int):
        dims = [dims]
    return [canonical_dim(d, ndim) for d in dims]


def _size(s):
    """A size or bound as a Python int; a symbolic size (`jax.export`) stays as it is."""
    return s if jax.export.is_symbolic_dim(s) else int(s)


def _infer_shape(shape, numel: int) -> tuple[int, ...]:
    """A view/reshape size with at most one -1 resolved against `numel`."""
    shape = [_size(s) for s in shape]
    if -1 in shape:
        i = shape.index(-1)
        rest = math.prod(s for j, s in enumerate(shape) if j != i)
        shape[i] = numel // rest if rest else 0
    return tuple(shape)


def _expand_shape(shape, size) -> tuple[int, ...]:
    """The shape `expand(size)` gives: -1 keeps the existing size, new dims lead."""
    lead = len(size) - len(shape)
    return tuple(
        shape[i - lead] if s == -1 and i >= lead else _size(s) for i, s in enumerate(size)
    )


#: Ends from here up mean "to the end" (PyTorch writes `x[a:]` as end=2**63-1), so a slice of
#: a symbolic size needs no undecidable min(2**63-1, size).
_TO_END = 2**62


def _slice_bounds(size: int, start, end, step: int = 1) -> tuple[int, int, int]:
    """PyTorch's slice bounds: None, negative and out-of-range starts and ends clamp."""
    start = 0 if start is None else _size(start)
    end = None if end is None else _size(end)
    if end is None or (not jax.export.is_symbolic_dim(end) and end >= _TO_END):
        end = size
    if start < 0:
        start += size
    if end < 0:
        end += size
    # jax.core.min_dim/max_dim are min/max for ints, and for symbolic sizes too (deferring
    # comparisons JAX cannot decide at trace time to the StableHLO).
    start = jax.core.min_dim(jax.core.max_dim(start, 0), size)
    end = jax.core.min_dim(jax.core.max_dim(end, start), size)
    return start, end, int(step)


def _slice(x, dim: int, start, end, step: int = 1):
    if x.ndim == 0:
        return x
    dim = canonical_dim(dim, x.ndim)
    start, end, step = _slice_bounds(x.shape[dim], start, end, step)
    return lax.slice_in_dim(x, start, end, step, axis=dim)


def _slice_index(ndim: int, dim: int, index) -> tuple:
    return (slice(None),) * dim + (index,)


def _atleast(self, ndim: int):
    if ndim == 1:
        return jnp.atleast_1d(self)
    if ndim == 2:
        return jnp.atleast_2d(self)
    return jnp.atleast_3d(self)


def _strided_indices(size, stride, storage_offset) -> np.ndarray:
    index = np.full(tuple(int(s) for s in size), 0 if storage_offset is None else int(storage_offset))
    for d, (n, s) in enumerate(zip(size, stride)):
        shape = [1] * len(size)
        shape[d] = int(n)
        index = index + np.arange(int(n)).reshape(shape) * int(s)
    return index


# -- lowerings -----------------------------------------------------------------------------------


@aten("_reshape_alias.default", "_reshape_alias_copy.default")
def aten__reshape_alias(self, size, stride):
    """_reshape_alias(Tensor(a) self, SymInt[] size, SymInt[] stride) -> Tensor(a)"""
    return jnp.reshape(self, tuple(int(s) for s in size))


@aten(
    "alias.default",
    "alias_copy.default",
    "clone.default",
    "contiguous.default",
    "detach.default",
    "detach_copy.default",
)
def aten_alias(self, memory_format=None):
    """alias(Tensor(a) self) -> Tensor(a)"""
    return self


@aten("as_strided.default", "as_strided_copy.default")
def aten_as_strided(self, size, stride, storage_offset=None):
    """as_strided(Tensor(a) self, SymInt[] size, SymInt[] stride, SymInt? storage_offset=None) -> Tensor(a)"""
    index = _strided_indices(size, stride, storage_offset)
    if index.size == 0:
        return jnp.zeros(index.shape, self.dtype)
    return jnp.ravel(self)[index]


@aten("atleast_1d.default")
def aten_atleast_1d(self):
    """atleast_1d(Tensor self) -> Tensor"""
    return _atleast(self, 1)


@aten("atleast_1d.Sequence")
def aten_atleast_1d_sequence(tensors):
    """atleast_1d.Sequence(Tensor[] tensors) -> Tensor[]"""
    return [_atleast(t, 1) for t in tensors]


@aten("atleast_2d.default")
def aten_atleast_2d(self):
    """atleast_2d(Tensor self) -> Tensor"""
    return _atleast(self, 2)


@aten("atleast_2d.Sequence")
def aten_atleast_2d_sequence(tensors):
    """atleast_2d.Sequence(Tensor[] tensors) -> Tensor[]"""
    return [_atleast(t, 2) for t in tensors]


@aten("atleast_3d.default")
def aten_atleast_3d(self):
    """atleast_3d(Tensor self) -> Tensor"""
    return _atleast(self, 3)


@aten("atleast_3d.Sequence")
def aten_atleast_3d_sequence(tensors):
    """atleast_3d.Sequence(Tensor[] tensors) -> Tensor[]"""
    return [_atleast(t, 3) for t in tensors]


@aten("broadcast_tensors.default")
def aten_broadcast_tensors(tensors):
    """broadcast_tensors(Tensor[] tensors) -> Tensor[]"""
    return list(jnp.broadcast_arrays(*tensors))


@aten("broadcast_to.default")
def aten_broadcast_to(self, size):
    """broadcast_to(Tensor(a) self, SymInt[] size) -> Tensor(a)"""
    return jnp.broadcast_to(self, _expand_shape(self.shape, size))


@aten("cartesian_prod.default")
def aten_cartesian_prod(tensors):
    """cartesian_prod(Tensor[] tensors) -> Tensor"""
    if len(tensors) == 1:
        return tensors[0]
    grids = jnp.meshgrid(*tensors, indexing="ij")
    return jnp.stack([g.reshape(-1) for g in grids], axis=1)


@aten("channel_shuffle.default", "native_channel_shuffle.default")
def aten_channel_shuffle(self, groups):
    """channel_shuffle(Tensor self, SymInt groups) -> Tensor"""
    n, c, *rest = self.shape
    x = self.reshape(n, groups, c // groups, *rest)
    return jnp.swapaxes(x, 1, 2).reshape(self.shape)


@aten("expand.default", "expand_copy.default")
def aten_expand(self, size, implicit=False):
    """expand(Tensor(a) self, SymInt[] size, *, bool implicit=False) -> Tensor(a)"""
    return jnp.broadcast_to(self, _expand_shape(self.shape, size))


@aten("expand_as.default")
def aten_expand_as(self, other):
    """expand_as(Tensor(a) self, Tensor other) -> Tensor(a)"""
    return jnp.broadcast_to(self, other.shape)


@aten("flatten.using_ints")
def aten_flatten(self, start_dim=0, end_dim=-1):
    """flatten.using_ints(Tensor(a) self, int start_dim=0, int end_dim=-1) -> Tensor(a)"""
    if self.ndim == 0:
        return self.reshape(1)
    start, end = canonical_dim(start_dim, self.ndim), canonical_dim(end_dim, self.ndim)
    shape = self.shape[:start] + (math.prod(self.shape[start : end + 1]),) + self.shape[end + 1 :]
    return self.reshape(shape)


@aten("flip.default")
def aten_flip(self, dims):
    """flip(Tensor self, int[] dims) -> Tensor"""
    if self.ndim == 0 or not dims:
        return self
    return jnp.flip(self, tuple(_dims(dims, self.ndim)))


@aten("fliplr.default")
def aten_fliplr(self):
    """fliplr(Tensor self) -> Tensor"""
    return jnp.flip(self, 1)


@aten("flipud.default")
def aten_flipud(self):
    """flipud(Tensor self) -> Tensor"""
    return jnp.flip(self, 0)


@aten("meshgrid.default", "meshgrid.indexing")
def aten_meshgrid(tensors, indexing="ij"):
    """meshgrid.indexing(Tensor[] tensors, *, str indexing) -> Tensor[]"""
    return list(jnp.meshgrid(*[t.reshape(-1) for t in tensors], indexing=indexing))


@aten("movedim.int", "movedim.intlist", "moveaxis.int", "moveaxis.intlist")
def aten_movedim(self, source, destination):
    """movedim.intlist(Tensor(a) self, int[] source, int[] destination) -> Tensor(a)"""
    if self.ndim == 0:
        return self
    return jnp.moveaxis(self, _dims(source, self.ndim), _dims(destination, self.ndim))


@aten("mT.default")
def aten_mT(self):
    """mT(Tensor(a) self) -> Tensor(a)"""
    return jnp.swapaxes(self, -2, -1)


@aten("mH.default", "adjoint.default", "matrix_H.default")
def aten_mH(self):
    """mH(Tensor(a) self) -> Tensor(a)"""
    # matrix_H (Tensor.H) is the same for the 2-D matrices it takes. The conjugate transpose: a complex matrix's adjoint conjugates too (a transpose for real dtypes)
    return jnp.conj(jnp.swapaxes(self, -2, -1)) if jnp.iscomplexobj(self) else jnp.swapaxes(self, -2, -1)


@aten("narrow.default", "narrow_copy.default")
def aten_narrow(self, dim, start, length):
    """narrow(Tensor(a) self, int dim, SymInt start, SymInt length) -> Tensor(a)"""
    dim = canonical_dim(dim, self.ndim)
    start = int(start)
    if start < 0:
        start += self.shape[dim]
    return lax.slice_in_dim(self, start, start + int(length), axis=dim)


@aten("numpy_T.default")
def aten_numpy_T(self):
    """numpy_T(Tensor(a) self) -> Tensor(a)"""
    return jnp.transpose(self)


@aten("permute.default", "permute_copy.default")
def aten_permute(self, dims):
    """permute(Tensor(a) self, int[] dims) -> Tensor(a)"""
    return jnp.transpose(self, _dims(dims, self.ndim))


@aten("pixel_shuffle.default")
def aten_pixel_shuffle(self, upscale_factor):
    """pixel_shuffle(Tensor self, int upscale_factor) -> Tensor"""
    r = upscale_factor
    *batch, c, h, w = self.shape
    n = len(batch)
    x = self.reshape(*batch, c // (r * r), r, r, h, w)
    x = jnp.transpose(x, (*range(n), n, n + 3, n + 1, n + 4, n + 2))
    return x.reshape(*batch, c // (r * r), h * r, w * r)


@aten("pixel_unshuffle.default")
def aten_pixel_unshuffle(self, downscale_factor):
    """pixel_unshuffle(Tensor self, int downscale_factor) -> Tensor"""
    r = downscale_factor
    *batch, c, h, w = self.shape
    n = len(batch)
    x = self.reshape(*batch, c, h // r, r, w // r, r)
    x = jnp.transpose(x, (*range(n), n, n + 2, n + 4, n + 1, n + 3))
    return x.reshape(*batch, c * r * r, h // r, w // r)


@aten("ravel.default")
def aten_ravel(self):
    """ravel(Tensor(a) self) -> Tensor(a)"""
    return jnp.ravel(self)


@aten("repeat.default")
def aten_repeat(self, repeats):
    """repeat(Tensor self, SymInt[] repeats) -> Tensor"""
    return jnp.tile(self, tuple(int(r) for r in repeats))


@aten("repeat_interleave.self_int", "repeat_interleave.self_Tensor")
def aten_repeat_interleave(self, repeats, dim=None, *, output_size=None):
    """repeat_interleave.self_Tensor(Tensor self, Tensor repeats, int? dim=None, *, SymInt? output_size=None) -> Tensor"""
    if dim is None:
        self, dim = self.reshape(-1), 0
    if hasattr(repeats, "shape") and repeats.ndim == 1 and repeats.shape[0] == 1:
        repeats = repeats.reshape(())  # one count for every element, as PyTorch broadcasts it
    # Tensor counts without output_size make the length value-dependent: eager only.
    return jnp.repeat(self, repeats, axis=dim, total_repeat_length=output_size)


@aten("repeat_interleave.Tensor")
def aten_repeat_interleave_tensor(repeats, *, output_size=None):
    """repeat_interleave.Tensor(Tensor repeats, *, SymInt? output_size=None) -> Tensor"""
    return jnp.repeat(jnp.arange(repeats.shape[0], dtype=repeats.dtype), repeats, total_repeat_length=output_size)


@aten("reshape.default", "view.default", "_unsafe_view.default", "view_copy.default")
def aten_reshape(self, shape):
    """reshape(Tensor(a) self, SymInt[] shape) -> Tensor(a)"""
    return jnp.reshape(self, _infer_shape(shape, self.size))


@aten("reshape_as.default", "view_as.default")
def aten_reshape_as(self, other):
    """reshape_as(Tensor(a) self, Tensor other) -> Tensor(a)"""
    return jnp.reshape(self, other.shape)


@aten("roll.default")
def aten_roll(self, shifts, dims=()):
    """roll(Tensor self, SymInt[1] shifts, int[1] dims=[]) -> Tensor"""
    if isinstance(shifts, int):
        shifts = [shifts]
    if not dims:
        return jnp.roll(jnp.ravel(self), int(shifts[0])).reshape(self.shape)
    if self.ndim == 0:
        return self
    return jnp.roll(self, tuple(int(s) for s in shifts), tuple(_dims(dims, self.ndim)))


@aten("rot90.default")
def aten_rot90(self, k=1, dims=(0, 1)):
    """rot90(Tensor self, int k=1, int[] dims=[0, 1]) -> Tensor"""
    return jnp.rot90(self, k, tuple(_dims(dims, self.ndim)))


@aten("select.int", "select_copy.int")
def aten_select(self, dim, index):
    """select.int(Tensor(a) self, int dim, SymInt index) -> Tensor(a)"""
    dim = canonical_dim(dim, self.ndim)
    index = int(index)
    if index < 0:
        index += self.shape[dim]
    return lax.index_in_dim(self, index, axis=dim, keepdims=False)


@aten("slice.Tensor", "slice_copy.Tensor")
def aten_slice(self, dim=0, start=None, end=None, step=1):
    """slice.Tensor(Tensor(a) self, int dim=0, SymInt? start=None, SymInt? end=None, SymInt step=1) -> Tensor(a)"""
    return _slice(self, dim, start, end, step)


@aten(
    "squeeze.default",
    "squeeze.dim",
    "squeeze.dims",
    "squeeze_copy.default",
    "squeeze_copy.dim",
    "squeeze_copy.dims",
)
def aten_squeeze(self, dim=None):
    """squeeze.dims(Tensor(a) self, int[] dim) -> Tensor(a)"""
    if self.ndim == 0:
        return self
    dims = range(self.ndim) if dim is None else _dims(dim, self.ndim)
    return jnp.squeeze(self, tuple(d for d in set(dims) if self.shape[d] == 1))


@aten("t.default", "t_copy.default")
def aten_t(self):
    """t(Tensor(a) self) -> Tensor(a)"""
    return self if self.ndim < 2 else self.T


@aten("tile.default")
def aten_tile(self, dims):
    """tile(Tensor self, SymInt[] dims) -> Tensor"""
    return jnp.tile(self, tuple(int(d) for d in dims))


@aten("transpose.int", "swapaxes.default", "swapdims.default", "transpose_copy.int")
def aten_transpose(self, dim0, dim1):
    """transpose.int(Tensor(a) self, int dim0, int dim1) -> Tensor(a)"""
    if self.ndim == 0:
        return self
    return jnp.swapaxes(self, canonical_dim(dim0, self.ndim), canonical_dim(dim1, self.ndim))


@aten("unflatten.int")
def aten_unflatten(self, dim, sizes):
    """unflatten.int(Tensor(a) self, int dim, SymInt[] sizes) -> Tensor(a)"""
    dim = canonical_dim(dim, self.ndim)
    sizes = _infer_shape(sizes, self.shape[dim] if self.ndim else 1)
    return self.reshape(self.shape[:dim] + sizes + self.shape[dim + 1 :])


@aten("unfold.default", "unfold_copy.default")
def aten_unfold(self, dimension, size, step):
    """unfold(Tensor(a) self, int dimension, int size, int step) -> Tensor(a)"""
    if self.ndim == 0:
        return jnp.zeros((0,), self.dtype) if size == 0 else self.reshape(1)
    dim = canonical_dim(dimension, self.ndim)
    count = (self.shape[dim] - size) // step + 1
    index = np.arange(count)[:, None] * step + np.arange(size)[None, :]
    x = jnp.take(self, index, axis=dim)
    return jnp.moveaxis(x, dim + 1, -1)


@aten("unsqueeze.default", "unsqueeze_copy.default")
def aten_unsqueeze(self, dim):
    """unsqueeze(Tensor(a) self, int dim) -> Tensor(a)"""
    return jnp.expand_dims(self, canonical_dim(dim, self.ndim + 1))


@aten("view.dtype")
def aten_view_dtype(self, dtype):
    """view.dtype(Tensor(a) self, ScalarType dtype) -> Tensor(a)"""
    dtype = np.dtype(dtype)
    if self.dtype == dtype:
        return self
    x = self.astype(np.uint8) if self.dtype == np.bool_ else self
    target = np.dtype(np.uint8) if dtype == np.bool_ else dtype
    ratio = x.dtype.itemsize / target.itemsize
    if ratio > 1:
        out = lax.bitcast_convert_type(x, target)
        out = out.reshape(*x.shape[:-1], x.shape[-1] * int(ratio))
    elif ratio < 1:
        k = int(1 / ratio)
        out = lax.bitcast_convert_type(x.reshape(*x.shape[:-1], x.shape[-1] // k, k), target)
    else:
        out = lax.bitcast_convert_type(x, target)
    return out != 0 if dtype == np.bool_ else out


@aten("view_as_complex.default")
def aten_view_as_complex(self):
    """view_as_complex(Tensor(a) self) -> Tensor(a)"""
    return lax.complex(self[..., 0], self[..., 1])


@aten("view_as_real.default")
def aten_view_as_real(self):
    """view_as_real(Tensor(a) self) -> Tensor(a)"""
    return jnp.stack([jnp.real(self), jnp.imag(self)], axis=-1)
