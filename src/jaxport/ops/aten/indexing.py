"""ATen lowerings: indexing, gathering, scattering, searching and counting.

`Tensor?[]` index lists become NumPy-style index tuples (None is a full slice),
so JAX applies the same advanced-indexing rules PyTorch does, including where
the indexed dims go when index tensors are separated by slices.

Ops whose output shape depends on tensor values (nonzero, masked_select,
unique, boolean-mask indexing, bincount) work eagerly only; under `jax.jit`
they raise JAX's concretization error. `index_put` with a single boolean mask
and a broadcastable value (`x[mask] = v`) has a static form and works under jit.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ..registry import aten
from ._promotion import canonical, fill_value, opmath_type, result_type, rounded_as

_REDUCE = {"sum": "add", "add": "add", "mean": "add", "prod": "multiply", "multiply": "multiply",
           "amax": "max", "amin": "min"}


def _int64():
    return canonical(np.int64)


def _is_mask(index) -> bool:
    return index is not None and index.dtype in (np.bool_, np.uint8)


def _index_key(indices) -> tuple:
    """A `Tensor?[]` index list as a NumPy index tuple; uint8 masks count as boolean masks."""
    return tuple(
        slice(None) if i is None else i.astype(np.bool_) if _is_mask(i) else i for i in indices
    )


def _at_least_1d(x):
    return x.reshape(x.shape or (1,))


def _update(ref, how, values, dtype):
    """`ref.<how>(values)` for an `x.at[...]` reference; bool add/multiply are or/and."""
    if dtype == np.bool_:
        how = {"add": "max", "multiply": "min"}.get(how, how)
    return getattr(ref, how)(values)


def _scatter(self, dim, index, src, how):
    """Torch's scatter: self[..., index[i][j], ...] (along dim) <- src[i][j], combined by `how`."""
    x, idx = _at_least_1d(self), _at_least_1d(index)
    dim = dim % x.ndim
    key = tuple(
        idx if d == dim else lax.broadcasted_iota(idx.dtype, idx.shape, d) for d in range(idx.ndim)
    )
    if jnp.ndim(src):
        src = _at_least_1d(src)[tuple(slice(0, n) for n in idx.shape)].astype(x.dtype)
        if how == "multiply" and jnp.issubdtype(x.dtype, jnp.inexact):
            return _scatter_product(x, src, *key).reshape(self.shape)
    else:
        src = fill_value(src, x.dtype)
    return _update(x.at[key], how, src, x.dtype).reshape(self.shape)


@jax.custom_jvp
def _scatter_product(x, src, *key):
    """x with src multiplied in at `key` (repeated positions take every factor)."""
    return x.at[key].multiply(src)


@_scatter_product.defjvp
def _scatter_product_jvp(primals, tangents):
    # JAX differentiates a multiplying scatter only at unique indices. As PyTorch's backward: a
    # factor's derivative is the product of the others at its position, taken without dividing
    # by a zero (one zero there: the others' product for it, 0 for the rest; two: 0 for all).
    x, src, *key = primals
    dx, dsrc = tangents[:2]
    key = tuple(key)
    zero = src == 0
    zeros = jnp.zeros(x.shape, np.int32).at[key].add(zero.astype(np.int32))
    nonzero_product = jnp.ones_like(x).at[key].multiply(jnp.where(zero, jnp.ones((), src.dtype), src))
    product = jnp.where(zeros > 0, jnp.zeros((), x.dtype), nonzero_product)
    zeros_at, nonzero_at = zeros[key], nonzero_product[key]
    others = jnp.where(zeros_at == 0, nonzero_at / jnp.where(zero, jnp.ones((), src.dtype), src),
                       jnp.where((zeros_at == 1) & zero, nonzero_at, jnp.zeros((), src.dtype)))
    return _scatter_product(x, src, *key), dx * product + x * jnp.zeros_like(x).at[key].add(dsrc * others)


def _scatter_reduce(self, dim, index, src, reduce, include_self=True):
    how = _REDUCE[reduce]
    if not include_self:  # scattered-to positions start from the reduction's identity
        dtype = self.dtype
        if dtype == np.bool_:
            identity = how == "min" or how == "multiply"
        elif how == "max":
            identity = -np.inf if jnp.issubdtype(dtype, jnp.floating) else jnp.iinfo(dtype).min
        elif how == "min":
            identity = np.inf if jnp.issubdtype(dtype, jnp.floating) else jnp.iinfo(dtype).max
        else:
            identity = 1 if how == "multiply" else 0
        self = _scatter(self, dim, index, jnp.asarray(identity, dtype), "set")
    out = _scatter(self, dim, index, src, how)
    if reduce == "mean":
        count = jnp.full(self.shape, 1 if include_self else 0, self.dtype)
        count = _scatter(count, dim, index, jnp.asarray(1, self.dtype), "add")
        count = jnp.where(count == 0, jnp.ones_like(count), count)
        if jnp.issubdtype(self.dtype, jnp.floating):
            out = out / count
        else:
            out = jnp.floor_divide(out, count)
    return out


def _index_as_scatter(self, dim, index, source):
    """index_add-style (dim, 1-D index, source) as a scatter index of source's shape."""
    src = _at_least_1d(source)
    d = dim % max(self.ndim, 1)
    shape = [1] * src.ndim
    shape[d] = -1
    return d, jnp.broadcast_to(index.reshape(shape), src.shape), src


def _masked_put(self, indices, values, accumulate):
    """`x[mask] = v` with one boolean mask and a value that does not depend on the mask's count."""
    positions = [p for p, i in enumerate(indices) if i is not None]
    if len(positions) != 1 or not _is_mask(indices[positions[0]]):
        return None
    p = positions[0]
    mask = indices[p].astype(np.bool_)
    k = mask.ndim
    if k == 0 or p + k > self.ndim:
        return None
    rank = self.ndim - k + 1  # the indexed result: self.shape[:p] + (count,) + self.shape[p + k:]
    if values.ndim > rank:
        return None
    v = values.reshape((1,) * (rank - values.ndim) + values.shape)
    if v.shape[p] != 1:
        return None
    v = v.reshape(v.shape[:p] + (1,) * k + v.shape[p + 1:]).astype(self.dtype)
    v = jnp.broadcast_to(v, self.shape)
    if accumulate:
        v = (self | v) if self.dtype == np.bool_ else self + v
    m = mask.reshape((1,) * p + mask.shape + (1,) * (self.ndim - p - k))
    return jnp.where(m, v, self)


def _searchsorted(sorted_sequence, values, side, sorter, out_int32):
    dtype = np.dtype(np.int32) if out_int32 else _int64()
    if sorter is not None:
        sorted_sequence = jnp.take_along_axis(sorted_sequence, sorter, axis=-1)
    common = result_type(sorted_sequence, values)
    seq, vals = sorted_sequence.astype(common), jnp.asarray(values).astype(common)
    if seq.size == 0 or vals.size == 0:
        out = jnp.zeros(vals.shape, dtype)
    elif seq.ndim <= 1:
        out = jnp.searchsorted(seq, vals, side=side)
    else:
        batch = seq.shape[:-1]
        out = jax.vmap(lambda s, v: jnp.searchsorted(s, v, side=side))(
            seq.reshape(-1, seq.shape[-1]), vals.reshape(-1, vals.shape[-1])
        ).reshape(batch + vals.shape[-1:])
    return out.astype(dtype)


def _coordinates(x):
    """The coordinates of x's nonzero elements, [n, ndim]; an empty x has none, statically, so
    that case also runs under jit (torch.export records its shape as fixed)."""
    if x.size == 0:
        return jnp.zeros((0, x.ndim), _int64())
    return jnp.argwhere(x).astype(_int64())


@aten("_embedding_bag.default")
def aten__embedding_bag(
    weight, indices, offsets, scale_grad_by_freq=False, mode=0, sparse=False,
    per_sample_weights=None, include_last_offset=False, padding_idx=-1,
):
    """_embedding_bag(Tensor weight, Tensor indices, Tensor offsets, bool scale_grad_by_freq=False, int mode=0, bool sparse=False, Tensor? per_sample_weights=None, bool include_last_offset=False, int padding_idx=-1) -> (Tensor, Tensor, Tensor, Tensor)"""
    n, width = indices.shape[0], weight.shape[1]
    num_bags = offsets.shape[0] - (1 if include_last_offset else 0)
    position = jnp.arange(n, dtype=offsets.dtype)
    bag = (jnp.searchsorted(offsets, position, side="right") - 1).astype(offsets.dtype)
    valid = indices != padding_idx
    compute = opmath_type(weight.dtype)
    rows = weight[indices].astype(compute)
    if per_sample_weights is not None:
        rows = rows * per_sample_weights.astype(compute)[:, None]
    count = jax.ops.segment_sum(valid.astype(offsets.dtype), bag, num_bags)
    if mode == 2:  # max; the first maximal row wins, as in PyTorch's kernel
        rows = jnp.where(valid[:, None], rows, -jnp.inf)
        best = jax.ops.segment_max(rows, bag, num_bags)
        first = jnp.where((rows == best[bag]) & valid[:, None], position[:, None], n)
        first = jax.ops.segment_min(first, bag, num_bags)
        max_indices = jnp.where(count[:, None] > 0, indices[jnp.minimum(first, n - 1)], 0)
        output = jnp.where(count[:, None] > 0, best, 0)
        max_indices = max_indices.astype(offsets.dtype) if n else jnp.zeros((num_bags, width), offsets.dtype)
    else:
        output = jax.ops.segment_sum(jnp.where(valid[:, None], rows, 0), bag, num_bags)
        if mode == 1:
            output = output / jnp.maximum(count, 1).astype(compute)[:, None]
        else:  # PyTorch zeroes the sum mode's bag sizes "to make them deterministic"
            count = jnp.zeros_like(count)
        max_indices = count
    fast_sum = (
        mode == 0 and weight.dtype in (np.dtype(np.float32), np.dtype(jnp.float16)) and padding_idx < 0
    )
    offset2bag = jnp.zeros((0,), offsets.dtype) if fast_sum else bag
    return output.astype(weight.dtype), offset2bag, count, max_indices


@aten("_embedding_bag_forward_only.default")
def aten__embedding_bag_forward_only(
    weight, indices, offsets, scale_grad_by_freq=False, mode=0, sparse=False,
    per_sample_weights=None, include_last_offset=False, padding_idx=-1,
):
    """_embedding_bag_forward_only(Tensor weight, Tensor indices, Tensor offsets, bool scale_grad_by_freq=False, int mode=0, bool sparse=False, Tensor? per_sample_weights=None, bool include_last_offset=False, int padding_idx=-1) -> (Tensor, Tensor, Tensor, Tensor)"""
    output, offset2bag, bag_size, max_indices = aten__embedding_bag(
        weight, indices, offsets, scale_grad_by_freq, mode, sparse,
        per_sample_weights, include_last_offset, padding_idx,
    )
    # PyTorch sizes bag_size here by the offsets, one more than the bags with include_last_offset.
    bag_size = jnp.pad(bag_size, (0, offsets.shape[0] - bag_size.shape[0]))
    return output, offset2bag, bag_size, max_indices


@aten("_unsafe_masked_index.default")
def aten__unsafe_masked_index(self, mask, indices, fill):
    """_unsafe_masked_index(Tensor self, Tensor mask, Tensor?[] indices, Scalar fill) -> Tensor"""
    return jnp.where(mask, self[_index_key(indices)], fill_value(fill, self.dtype))


@aten("_unsafe_masked_index_put_accumulate.default")
def aten__unsafe_masked_index_put_accumulate(self, mask, indices, values):
    """_unsafe_masked_index_put_accumulate(Tensor self, Tensor mask, Tensor?[] indices, Tensor values) -> Tensor"""
    values = jnp.where(mask, values, jnp.zeros((), values.dtype))
    return aten_index_put(self, indices, values, True)


@aten("_unique2.default")
def aten__unique2(self, sorted=True, return_inverse=False, return_counts=False):
    """_unique2(Tensor self, bool sorted=True, bool return_inverse=False, bool return_counts=False) -> (Tensor, Tensor, Tensor)"""
    if self.size == 0:  # static shapes, so it also runs under jit
        values, inverse, counts = self.reshape(-1), jnp.zeros(self.shape, _int64()), jnp.zeros((0,), _int64())
    else:
        values, inverse, counts = jnp.unique(self.reshape(-1), return_inverse=True, return_counts=True)
    inverse = inverse.reshape(self.shape) if return_inverse else jnp.zeros((0,), inverse.dtype)
    counts = counts if return_counts else jnp.zeros((0,), counts.dtype)
    return values, inverse.astype(_int64()), counts.astype(_int64())


@aten("argwhere.default")
def aten_argwhere(self):
    """argwhere(Tensor self) -> Tensor"""
    return _coordinates(self)


@aten("bincount.default")
def aten_bincount(self, weights=None, minlength=0):
    """bincount(Tensor self, Tensor? weights=None, SymInt minlength=0) -> Tensor"""
    length = max(int(jnp.max(self)) + 1 if self.size else 0, minlength)  # value-dependent: eager only
    if weights is None:
        return jnp.zeros(length, _int64()).at[self].add(1)
    dtype = weights.dtype if weights.dtype == np.float32 else canonical(np.float64)
    return jnp.zeros(length, dtype).at[self].add(weights.astype(dtype))


@aten("bucketize.Tensor", "bucketize.Scalar")
def aten_bucketize(self, boundaries, *, out_int32=False, right=False):
    """bucketize.Tensor(Tensor self, Tensor boundaries, *, bool out_int32=False, bool right=False) -> Tensor"""
    return _searchsorted(boundaries, self, "right" if right else "left", None, out_int32)


@aten("embedding.default")
def aten_embedding(weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    """embedding(Tensor weight, Tensor indices, SymInt padding_idx=-1, bool scale_grad_by_freq=False, bool sparse=False) -> Tensor"""
    return weight[indices]


@aten("embedding_dense_backward.default")
def aten_embedding_dense_backward(grad_output, indices, num_weights, padding_idx, scale_grad_by_freq):
    """embedding_dense_backward(Tensor grad_output, Tensor indices, SymInt num_weights, SymInt padding_idx, bool scale_grad_by_freq) -> Tensor"""
    index = indices.reshape(-1)
    width = grad_output.shape[-1]
    compute = opmath_type(grad_output.dtype)
    grad = grad_output.reshape(index.shape[0], width).astype(compute)
    grad = jnp.where((index != padding_idx)[:, None], grad, jnp.zeros((), compute))
    if scale_grad_by_freq:
        counts = jnp.zeros(num_weights, compute).at[index].add(1)
        grad = grad / counts[index][:, None]
    return jnp.zeros((num_weights, width), compute).at[index].add(grad).astype(grad_output.dtype)


@aten("embedding_renorm.default")
def aten_embedding_renorm(self, indices, max_norm, norm_type):
    """embedding_renorm(Tensor self, Tensor indices, float max_norm, float norm_type) -> Tensor"""
    compute = opmath_type(self.dtype)
    rows = self.astype(compute)
    # PyTorch rounds the row norm and the scale to the weight's dtype (float16 stays float16).
    norm = jnp.linalg.norm(rows, ord=norm_type, axis=1).astype(self.dtype).astype(compute)
    used = jnp.zeros(self.shape[0], np.bool_).at[indices.reshape(-1)].set(True)
    scale = (max_norm / (norm + 1e-7)).astype(self.dtype).astype(compute)
    scale = jnp.where(used & (norm > max_norm), scale, 1)
    return (rows * scale[:, None]).astype(self.dtype)


@aten("gather.default")
def aten_gather(self, dim, index, *, sparse_grad=False):
    """gather(Tensor self, int dim, Tensor index, *, bool sparse_grad=False) -> Tensor"""
    if index.size == 0:  # PyTorch accepts any empty index
        return jnp.zeros(index.shape, self.dtype)
    x, idx = _at_least_1d(self), _at_least_1d(index)
    dim = dim % x.ndim
    x = x[tuple(slice(None) if d == dim else slice(0, n) for d, n in enumerate(idx.shape))]
    return jnp.take_along_axis(x, idx, axis=dim).reshape(index.shape)


@aten("histc.default")
def aten_histc(self, bins=100, min=0, max=0):
    """histc(Tensor self, int bins=100, Scalar min=0, Scalar max=0) -> Tensor"""
    dtype = self.dtype
    x = self.reshape(-1)
    if min == max and x.size:
        low, high = jnp.min(x), jnp.max(x)
    else:
        low, high = jnp.asarray(min, dtype), jnp.asarray(max, dtype)
    low, high = jnp.where(low == high, low - 1, low), jnp.where(low == high, high + 1, high)
    compute = opmath_type(dtype)
    x, low, high = x.astype(compute), low.astype(compute), high.astype(compute)
    inside = (x >= low) & (x <= high)  # NaN is outside
    # PyTorch's linear interpolation, in the same order of operations; the last bin is closed.
    # Its CPU kernel does this arithmetic in the input's dtype, so a half input rounds after each
    # step (`rounded_as`).
    def rounded(v):
        return rounded_as(v, dtype)

    offset = rounded(rounded(x - low) * np.asarray(bins, compute))
    pos = rounded(offset / rounded(high - low)).astype(np.int32)
    pos = jnp.where(inside, jnp.minimum(pos, bins - 1), bins)
    return jnp.zeros(bins, compute).at[pos].add(1, mode="drop").astype(dtype)


@aten("index.Tensor", "_unsafe_index.Tensor")
def aten_index(self, indices):
    """index.Tensor(Tensor self, Tensor?[] indices) -> Tensor"""
    return self[_index_key(indices)]


@aten("index_add.default")
def aten_index_add(self, dim, index, source, *, alpha=1):
    """index_add(Tensor self, int dim, Tensor index, Tensor source, *, Scalar alpha=1) -> Tensor"""
    dim, index, source = _index_as_scatter(self, dim, index, source)
    if alpha != 1:
        source = source * fill_value(alpha, source.dtype)
    return _scatter(self, dim, index, source, "add")


@aten("index_copy.default")
def aten_index_copy(self, dim, index, source):
    """index_copy(Tensor self, int dim, Tensor index, Tensor source) -> Tensor"""
    dim, index, source = _index_as_scatter(self, dim, index, source)
    return _scatter(self, dim, index, source, "set")


@aten("index_fill.int_Scalar", "index_fill.int_Tensor")
def aten_index_fill(self, dim, index, value):
    """index_fill.int_Scalar(Tensor self, int dim, Tensor index, Scalar value) -> Tensor"""
    x = _at_least_1d(self)
    key = (slice(None),) * (dim % x.ndim) + (index.reshape(-1),)
    return x.at[key].set(fill_value(value, x.dtype)).reshape(self.shape)


@aten("index_put.default", "_unsafe_index_put.default")
def aten_index_put(self, indices, values, accumulate=False):
    """index_put(Tensor self, Tensor?[] indices, Tensor values, bool accumulate=False) -> Tensor"""
    static = _masked_put(self, indices, values, accumulate)
    if static is not None:
        return static
    ref = self.at[_index_key(indices)]
    return _update(ref, "add" if accumulate else "set", values.astype(self.dtype), self.dtype)


@aten("index_reduce.default")
def aten_index_reduce(self, dim, index, source, reduce, *, include_self=True):
    """index_reduce(Tensor self, int dim, Tensor index, Tensor source, str reduce, *, bool include_self=True) -> Tensor"""
    dim, index, source = _index_as_scatter(self, dim, index, source)
    return _scatter_reduce(self, dim, index, source, reduce, include_self)


@aten("index_select.default")
def aten_index_select(self, dim, index):
    """index_select(Tensor self, int dim, Tensor index) -> Tensor"""
    if self.ndim == 0:
        return self.reshape(1)[index.reshape(-1)].reshape(())
    return jnp.take(self, index.reshape(-1), axis=dim)


@aten("masked_fill.Scalar", "masked_fill.Tensor")
def aten_masked_fill(self, mask, value):
    """masked_fill.Scalar(Tensor self, Tensor mask, Scalar value) -> Tensor"""
    return jnp.where(mask, fill_value(value, self.dtype), self)


@aten("masked_scatter.default")
def aten_masked_scatter(self, mask, source):
    """masked_scatter(Tensor self, Tensor mask, Tensor source) -> Tensor"""
    mask, base = jnp.broadcast_arrays(mask.astype(np.bool_), self)
    flat = mask.reshape(-1)
    if source.size == 0:
        return base
    position = jnp.clip(jnp.cumsum(flat.astype(np.int32)) - 1, 0, source.size - 1)
    values = source.reshape(-1)[position].astype(self.dtype)
    return jnp.where(flat, values, base.reshape(-1)).reshape(base.shape)


@aten("masked_select.default")
def aten_masked_select(self, mask):
    """masked_select(Tensor self, Tensor mask) -> Tensor"""
    mask, base = jnp.broadcast_arrays(mask.astype(np.bool_), self)
    return base[mask]  # value-dependent shape: eager only


@aten("nonzero.default")
def aten_nonzero(self):
    """nonzero(Tensor self) -> Tensor"""
    return _coordinates(self)


@aten("nonzero_static.default")
def aten_nonzero_static(self, *, size, fill_value=-1):
    """nonzero_static(Tensor self, *, SymInt size, int fill_value=-1) -> Tensor"""
    if self.ndim == 0 or self.size == 0:
        return jnp.full((size, self.ndim), fill_value, _int64())
    coords = jnp.nonzero(self, size=size, fill_value=fill_value)
    return jnp.stack(coords, axis=1).astype(_int64()).reshape(size, self.ndim)


@aten("one_hot.default")
def aten_one_hot(self, num_classes=-1):
    """one_hot(Tensor self, int num_classes=-1) -> Tensor"""
    if num_classes == -1:
        num_classes = int(jnp.max(self)) + 1 if self.size else 0  # value-dependent: eager only
    return (self[..., None] == jnp.arange(num_classes, dtype=self.dtype)).astype(_int64())


@aten("put.default")
def aten_put(self, index, source, accumulate=False):
    """put(Tensor self, Tensor index, Tensor source, bool accumulate=False) -> Tensor"""
    ref = self.reshape(-1).at[index.reshape(-1)]
    out = _update(ref, "add" if accumulate else "set", source.reshape(-1).astype(self.dtype), self.dtype)
    return out.reshape(self.shape)


@aten("scatter.src", "scatter.value")
def aten_scatter(self, dim, index, src):
    """scatter.src(Tensor self, int dim, Tensor index, Tensor src) -> Tensor"""
    return _scatter(self, dim, index, src, "set")


@aten("scatter.reduce", "scatter.value_reduce")
def aten_scatter_reduce(self, dim, index, src, *, reduce):
    """scatter.reduce(Tensor self, int dim, Tensor index, Tensor src, *, str reduce) -> Tensor"""
    return _scatter(self, dim, index, src, _REDUCE[reduce])


@aten("scatter_add.default")
def aten_scatter_add(self, dim, index, src):
    """scatter_add(Tensor self, int dim, Tensor index, Tensor src) -> Tensor"""
    return _scatter(self, dim, index, src, "add")


@aten("scatter_reduce.two")
def aten_scatter_reduce_two(self, dim, index, src, reduce, *, include_self=True):
    """scatter_reduce.two(Tensor self, int dim, Tensor index, Tensor src, str reduce, *, bool include_self=True) -> Tensor"""
    return _scatter_reduce(self, dim, index, src, reduce, include_self)


@aten("searchsorted.Tensor", "searchsorted.Scalar")
def aten_searchsorted(sorted_sequence, self, *, out_int32=False, right=False, side=None, sorter=None):
    """searchsorted.Tensor(Tensor sorted_sequence, Tensor self, *, bool out_int32=False, bool right=False, str? side=None, Tensor? sorter=None) -> Tensor"""
    side = side or ("right" if right else "left")
    return _searchsorted(sorted_sequence, self, side, sorter, out_int32)


@aten("take.default")
def aten_take(self, index):
    """take(Tensor self, Tensor index) -> Tensor"""
    return self.reshape(-1)[index]


@aten("take_along_dim.default")
def aten_take_along_dim(self, indices, dim=None):
    """take_along_dim(Tensor self, Tensor indices, int? dim=None) -> Tensor"""
    if dim is None:
        return jnp.take_along_axis(self.reshape(-1), indices.reshape(-1), axis=0)
    x, idx = _at_least_1d(self), _at_least_1d(indices)
    d = dim % x.ndim
    batch = jnp.broadcast_shapes(x.shape[:d] + (1,) + x.shape[d + 1:], idx.shape[:d] + (1,) + idx.shape[d + 1:])
    x = jnp.broadcast_to(x, batch[:d] + x.shape[d:d + 1] + batch[d + 1:])
    idx = jnp.broadcast_to(idx, batch[:d] + idx.shape[d:d + 1] + batch[d + 1:])
    out = jnp.take_along_axis(x, idx, axis=d)
    return out.reshape(()) if self.ndim == 0 and indices.ndim == 0 else out


@aten("unique_consecutive.default")
def aten_unique_consecutive(self, return_inverse=False, return_counts=False, dim=None):
    """unique_consecutive(Tensor self, bool return_inverse=False, bool return_counts=False, int? dim=None) -> (Tensor, Tensor, Tensor)"""
    if dim is None and self.size == 0:  # static shapes, so it also runs under jit
        return self.reshape(-1), jnp.zeros(self.shape if return_inverse else (0,), _int64()), jnp.zeros((0,), _int64())
    if dim is not None and self.shape[dim] == 0:
        return self, jnp.zeros((0,), _int64()), jnp.zeros((0,), _int64())
    x = self.reshape(-1) if dim is None else jnp.moveaxis(self, dim, 0)
    n = x.shape[0]
    rows = x.reshape(n, math.prod(x.shape[1:]))
    change = jnp.any(rows[1:] != rows[:-1], axis=1) if n else jnp.zeros((0,), np.bool_)
    starts = jnp.concatenate([jnp.ones((min(n, 1),), np.bool_), change])
    values = x[starts]  # value-dependent shape: eager only
    inverse = (jnp.cumsum(starts) - 1).astype(_int64())
    first = jnp.nonzero(starts)[0]
    counts = jnp.diff(jnp.append(first, n)).astype(_int64())
    if dim is None:
        inverse = inverse.reshape(self.shape) if return_inverse else jnp.zeros((0,), _int64())
        counts = counts if return_counts else jnp.zeros((0,), _int64())
        return values, inverse, counts
    return jnp.moveaxis(values, 0, dim), inverse, counts


@aten("unique_dim.default")
def aten_unique_dim(self, dim, sorted=True, return_inverse=False, return_counts=False):
    """unique_dim(Tensor self, int dim, bool sorted=True, bool return_inverse=False, bool return_counts=False) -> (Tensor, Tensor, Tensor)"""
    if self.shape[dim] == 0:  # static shapes, so it also runs under jit
        return self, jnp.zeros((0,), _int64()), jnp.zeros((0,), _int64())
    values, inverse, counts = jnp.unique(self, return_inverse=True, return_counts=True, axis=dim)
    return values, inverse.reshape(-1).astype(_int64()), counts.astype(_int64())


@aten("where.default", "nonzero_numpy.default")
def aten_where(condition):
    """where(Tensor condition) -> Tensor[]"""
    coordinates = _coordinates(_at_least_1d(condition))
    return [coordinates[:, d] for d in range(coordinates.shape[1])]
