"""ONNX indexing ops: Gather*, Scatter*, OneHot, Compress, NonZero, ...

ONNX indices may be negative (counting from the end of their dim). Like the shape ops,
these run in NumPy when every operand is a NumPy value (Gather on a Shape), so shape
arithmetic stays concrete under `jax.jit`.
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np

from ..registry import onnx
from ._helpers import index_dtype, normalize_axis, static_array


def _xp(*values):
    """NumPy when every operand is a host value (so the result stays concrete), else jnp."""
    host = all(v is None or isinstance(v, (np.ndarray, np.generic, int, float, bool)) for v in values)
    return np if host else jnp


def _out(xp, value):
    # NumPy indexing can give NumPy scalars; keep them arrays.
    return np.asarray(value) if xp is np else value


def _from_end(xp, indices, dim: int):
    """Negative indices counted from the end of a dim of size `dim`."""
    if np.dtype(indices.dtype).kind == "u":
        return indices
    return xp.where(indices < 0, indices + dim, indices)


def _element_index(xp, indices, axis: int, dim: int) -> tuple:
    """The full index of ScatterElements/GatherElements: `indices` on `axis`, position elsewhere."""
    ndim = np.ndim(indices)
    index = []
    for d, n in enumerate(np.shape(indices)):
        if d == axis:
            index.append(_from_end(xp, indices, dim))
        else:
            index.append(xp.arange(n, dtype=indices.dtype).reshape((1,) * d + (n,) + (1,) * (ndim - d - 1)))
    return tuple(index)


def _scatter(xp, data, index: tuple, updates, reduction: str):
    """`data` with `updates` written (or combined by `reduction`) at `index`."""
    if xp is np:
        out = np.array(data, copy=True)
        if reduction == "none":
            out[index] = updates
        else:
            ufunc = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}[reduction]
            ufunc.at(out, index, updates)
        return out
    at = jnp.asarray(data).at[index]
    if reduction == "none":
        return at.set(updates)
    if reduction == "add":
        return at.add(updates)
    if reduction == "mul":
        return at.multiply(updates)
    if reduction == "max":
        return at.max(updates)
    if reduction == "min":
        return at.min(updates)
    raise ValueError(f"scatter reduction '{reduction}' is not one of none, add, mul, max, min")


@onnx("Compress", since=9, value_dependent=True)
def compress(input, condition, *, axis=None):
    """Compress(T input, bool condition) -> T output; keeps the slices where condition holds."""
    keep = np.flatnonzero(static_array(condition, "Compress condition").reshape(-1))
    xp = _xp(input)
    if axis is None:
        return _out(xp, xp.take(xp.reshape(input, (-1,)), keep))
    return _out(xp, xp.take(input, keep, axis=normalize_axis(axis, np.ndim(input))))


@onnx("Gather", since=1)
def gather(data, indices, *, axis=0):
    """Gather(T data, Tind indices) -> T output; picks entries of `axis`."""
    xp = _xp(data, indices)
    axis = normalize_axis(axis, np.ndim(data))
    indices = _from_end(xp, xp.asarray(indices), np.shape(data)[axis])
    return _out(xp, xp.take(data, indices, axis=axis))


@onnx("GatherElements", since=11)
def gather_elements(data, indices, *, axis=0):
    """GatherElements(T data, Tind indices) -> T output, shaped like indices."""
    xp = _xp(data, indices)
    axis = normalize_axis(axis, np.ndim(data))
    index = _element_index(xp, xp.asarray(indices), axis, np.shape(data)[axis])
    return _out(xp, xp.asarray(data)[index])


@onnx("GatherND", since=11)
def gather_nd(data, indices, *, batch_dims=0):
    """GatherND(T data, int64 indices) -> T output; the first batch_dims dims are shared."""
    xp = _xp(data, indices)
    data, indices = xp.asarray(data), xp.asarray(indices)
    shape, ishape = np.shape(data), np.shape(indices)
    depth = ishape[-1]
    batch = math.prod(shape[:batch_dims])
    middle = math.prod(ishape[batch_dims:-1])
    flat_data = xp.reshape(data, (batch, *shape[batch_dims:]))
    flat_indices = xp.reshape(indices, (batch, middle, depth))
    rows = xp.broadcast_to(xp.arange(batch, dtype=indices.dtype)[:, None], (batch, middle))
    cols = [_from_end(xp, flat_indices[..., i], shape[batch_dims + i]) for i in range(depth)]
    out = flat_data[(rows, *cols)]
    return _out(xp, xp.reshape(out, ishape[:-1] + shape[batch_dims + depth:]))


@onnx("NonZero", since=9, value_dependent=True)
def non_zero(X):
    """NonZero(T X) -> int64 Y, shaped (rank, count): the indices of the nonzero entries."""
    x = np.atleast_1d(static_array(X, "NonZero input"))
    return np.array(np.nonzero(x), index_dtype()).reshape(x.ndim, -1)


@onnx("OneHot", since=9, static=(1,))
def one_hot(indices, depth, values, *, axis=-1):
    """OneHot(T1 indices, T2 depth, T3 values=[off, on]) -> T3 output; axis of the new dim."""
    count = int(static_array(depth, "OneHot depth").reshape(-1)[0])
    xp = _xp(indices, values)
    # Non-integer indices are truncated to int64, as ONNX says.
    indices, values = xp.asarray(indices).astype(index_dtype()), xp.asarray(values)
    axis = normalize_axis(axis, np.ndim(indices) + 1)
    indices = xp.expand_dims(_from_end(xp, indices, count), axis)
    positions = xp.arange(count).astype(indices.dtype)
    positions = positions.reshape((1,) * axis + (count,) + (1,) * (indices.ndim - axis - 1))
    return _out(xp, xp.where(indices == positions, values[1], values[0]))


@onnx("ReverseSequence", since=10)
def reverse_sequence(input, sequence_lens, *, batch_axis=1, time_axis=0):
    """ReverseSequence(T input, int64 sequence_lens) -> T Y; batch_axis, time_axis."""
    xp = _xp(input, sequence_lens)
    ndim = np.ndim(input)
    lens = xp.asarray(sequence_lens)
    steps = xp.arange(np.shape(input)[time_axis], dtype=lens.dtype)
    steps = steps.reshape([-1 if d == time_axis else 1 for d in range(ndim)])
    lens = lens.reshape([-1 if d == batch_axis else 1 for d in range(ndim)])
    source = xp.broadcast_to(xp.where(steps < lens, lens - 1 - steps, steps), np.shape(input))
    return _out(xp, xp.take_along_axis(input, source, axis=time_axis))


@onnx("Scatter", since=9)
def scatter(data, indices, updates, *, axis=0):
    """Scatter(T data, Tind indices, T updates) -> T output; ScatterElements' old name."""
    return scatter_elements(data, indices, updates, axis=axis)


@onnx("ScatterElements", since=11)
def scatter_elements(data, indices, updates, *, axis=0, reduction="none"):
    """ScatterElements(T data, Tind indices, T updates) -> T; reduction none/add/mul/max/min."""
    xp = _xp(data, indices, updates)
    axis = normalize_axis(axis, np.ndim(data))
    index = _element_index(xp, xp.asarray(indices), axis, np.shape(data)[axis])
    return _scatter(xp, data, index, updates, reduction)


@onnx("ScatterND", since=11)
def scatter_nd(data, indices, updates, *, reduction="none"):
    """ScatterND(T data, int64 indices, T updates) -> T; reduction none/add/mul/max/min."""
    xp = _xp(data, indices, updates)
    indices = xp.asarray(indices)
    shape = np.shape(data)
    index = tuple(_from_end(xp, indices[..., i], shape[i]) for i in range(np.shape(indices)[-1]))
    return _scatter(xp, data, index, updates, reduction)


@onnx("TensorScatter", since=24)
def tensor_scatter(past_cache, update, write_indices=None, *, mode="linear", axis=-2):
    """TensorScatter(T past_cache, T update, int64 write_indices?) -> T; mode linear/circular, axis."""
    xp = _xp(past_cache, update, write_indices)
    shape = np.shape(past_cache)
    axis = normalize_axis(axis, len(shape))
    if axis == 0:
        raise ValueError("TensorScatter: axis cannot be the batch axis")
    dtype = index_dtype()
    starts = xp.zeros(shape[0], dtype) if write_indices is None else xp.asarray(write_indices).astype(dtype)
    length = np.shape(update)[axis]
    where = starts.reshape((-1,) + (1,) * axis) + xp.arange(length, dtype=dtype).reshape((1,) * axis + (-1,))
    if mode == "circular":
        where = where % shape[axis]
    elif mode != "linear":
        raise ValueError(f"TensorScatter mode '{mode}' is not linear or circular")
    index = [xp.arange(n, dtype=dtype).reshape((1,) * d + (n,) + (1,) * (axis - d)) for d, n in enumerate(shape[:axis])]
    return _scatter(xp, past_cache, (*index, where), update, "none")
