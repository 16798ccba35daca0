"""ONNX indexing ops: Gather*, Scatter*, OneHot, Compress, NonZero, ...

ONNX indices may be negative (counting from the end of their dim). The ops are plain jnp: on
concrete operands (Gather on a Shape) the interpreter evaluates them at once, even under
`jax.jit`, so shape arithmetic stays concrete. NonZero works in NumPy on its concrete input.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from ..registry import onnx
from ._helpers import index_dtype, normalize_axis, static_array

#: ScatterElements/ScatterND reductions, as methods of `x.at[index]`.
_REDUCTIONS = {"none": "set", "add": "add", "mul": "multiply", "max": "max", "min": "min"}


def _element_index(indices, axis: int, dim: int, from_end: bool = True) -> tuple:
    """The full index of ScatterElements/GatherElements: `indices` on `axis` (negative ones
    counted from the end unless `from_end` is False), position elsewhere."""
    ndim = jnp.ndim(indices)
    index = []
    for d, n in enumerate(jnp.shape(indices)):
        if d == axis:
            index.append(_from_end(indices, dim) if from_end else indices)
        else:
            index.append(jnp.arange(n, dtype=indices.dtype).reshape((1,) * d + (n,) + (1,) * (ndim - d - 1)))
    return tuple(index)


def _from_end(indices, dim: int):
    """Negative indices counted from the end of a dim of size `dim`."""
    if jnp.dtype(indices.dtype).kind == "u":
        return indices
    return jnp.where(indices < 0, indices + dim, indices)


def _check_in_range(indices, dim: int, what: str) -> None:
    """Refuse an index outside [-dim, dim - 1] when its value is known (a constant, or a model run
    op by op), as onnxruntime refuses it. Indices computed under `jax.jit` cannot raise; an
    out-of-range one there reads the fill value of `jnp.take(mode="fill")`: NaN for floats, the
    minimum of a signed integer type, the maximum of an unsigned one, True for booleans."""
    if isinstance(indices, jax.core.Tracer):
        return
    values = np.asarray(indices)
    bad = (values < -dim) | (values >= dim)
    if bad.any():
        raise IndexError(f"{what} index {values[bad].reshape(-1)[0]} is out of range for a dim of size {dim} "
                         f"(valid: {-dim} to {dim - 1}; onnxruntime refuses it too)")


def _scatter(data, index: tuple, updates, reduction: str):
    """`data` with `updates` written (or combined by `reduction`) at `index`."""
    if reduction not in _REDUCTIONS:
        raise ValueError(f"scatter reduction '{reduction}' is not one of none, add, mul, max, min")
    return getattr(jnp.asarray(data).at[index], _REDUCTIONS[reduction])(updates)


@onnx("Compress", since=9, value_dependent=True)
def compress(input, condition, *, axis=None):
    """Compress(T input, bool condition) -> T output; keeps the slices where condition holds."""
    keep = np.flatnonzero(static_array(condition, "Compress condition").reshape(-1))
    if axis is None:
        return jnp.take(jnp.reshape(input, (-1,)), keep)
    return jnp.take(input, keep, axis=normalize_axis(axis, jnp.ndim(input)))


@onnx("Gather", since=1)
def gather(data, indices, *, axis=0):
    """Gather(T data, Tind indices) -> T output; picks entries of `axis`. An index out of range
    is refused where known, and reads a fill value under `jax.jit` (`_check_in_range`)."""
    axis = normalize_axis(axis, jnp.ndim(data))
    dim = jnp.shape(data)[axis]
    _check_in_range(indices, dim, "Gather")
    # jnp's "fill" mode counts negative indices from the end itself, and fills below -dim.
    return jnp.take(data, jnp.asarray(indices), axis=axis, mode="fill")


@onnx("GatherElements", since=11)
def gather_elements(data, indices, *, axis=0):
    """GatherElements(T data, Tind indices) -> T output, shaped like indices. An index out of
    range is refused where known, and reads a fill value under `jax.jit` (`_check_in_range`)."""
    axis = normalize_axis(axis, jnp.ndim(data))
    _check_in_range(indices, jnp.shape(data)[axis], "GatherElements")
    index = _element_index(jnp.asarray(indices), axis, jnp.shape(data)[axis], from_end=False)
    return jnp.asarray(data).at[index].get(mode="fill")  # counts negative indices from the end


@onnx("GatherND", since=11)
def gather_nd(data, indices, *, batch_dims=0):
    """GatherND(T data, int64 indices) -> T output; the first batch_dims dims are shared. An
    index out of range is refused where known, and reads a fill value under `jax.jit`
    (`_check_in_range`)."""
    shape, ishape, depth = jnp.shape(data), jnp.shape(indices), jnp.shape(indices)[-1]
    if not isinstance(indices, jax.core.Tracer):
        for i in range(depth):
            _check_in_range(np.asarray(indices)[..., i], shape[batch_dims + i], "GatherND")
    data, indices = jnp.asarray(data), jnp.asarray(indices)
    batch = math.prod(shape[:batch_dims])
    middle = math.prod(ishape[batch_dims:-1])
    flat_data = jnp.reshape(data, (batch, *shape[batch_dims:]))
    flat_indices = jnp.reshape(indices, (batch, middle, depth))
    rows = jnp.broadcast_to(jnp.arange(batch, dtype=indices.dtype)[:, None], (batch, middle))
    cols = [flat_indices[..., i] for i in range(depth)]  # "fill" counts negative ones from the end
    return jnp.reshape(flat_data.at[(rows, *cols)].get(mode="fill"), ishape[:-1] + shape[batch_dims + depth:])


@onnx("NonZero", since=9, value_dependent=True)
def non_zero(X):
    """NonZero(T X) -> int64 Y, shaped (rank, count): the indices of the nonzero entries."""
    x = np.atleast_1d(static_array(X, "NonZero input"))
    return np.array(np.nonzero(x), index_dtype()).reshape(x.ndim, -1)


@onnx("OneHot", since=9, static=(1,))
def one_hot(indices, depth, values, *, axis=-1):
    """OneHot(T1 indices, T2 depth, T3 values=[off, on]) -> T3 output; axis of the new dim."""
    count = int(static_array(depth, "OneHot depth").reshape(-1)[0])
    # Non-integer indices are truncated to int64, as ONNX says.
    indices, values = jnp.asarray(indices).astype(index_dtype()), jnp.asarray(values)
    axis = normalize_axis(axis, indices.ndim + 1)
    indices = jnp.expand_dims(_from_end(indices, count), axis)
    positions = jnp.arange(count, dtype=indices.dtype)
    positions = positions.reshape((1,) * axis + (count,) + (1,) * (indices.ndim - axis - 1))
    return jnp.where(indices == positions, values[1], values[0])


@onnx("ReverseSequence", since=10)
def reverse_sequence(input, sequence_lens, *, batch_axis=1, time_axis=0):
    """ReverseSequence(T input, int64 sequence_lens) -> T Y; batch_axis, time_axis."""
    ndim = jnp.ndim(input)
    lens = jnp.asarray(sequence_lens)
    steps = jnp.arange(jnp.shape(input)[time_axis], dtype=lens.dtype)
    steps = steps.reshape([-1 if d == time_axis else 1 for d in range(ndim)])
    lens = lens.reshape([-1 if d == batch_axis else 1 for d in range(ndim)])
    source = jnp.broadcast_to(jnp.where(steps < lens, lens - 1 - steps, steps), jnp.shape(input))
    return jnp.take_along_axis(input, source, axis=time_axis)


@onnx("Scatter", since=9)
def scatter(data, indices, updates, *, axis=0):
    """Scatter(T data, Tind indices, T updates) -> T output; ScatterElements' old name."""
    return scatter_elements(data, indices, updates, axis=axis)


@onnx("ScatterElements", since=11)
def scatter_elements(data, indices, updates, *, axis=0, reduction="none"):
    """ScatterElements(T data, Tind indices, T updates) -> T; reduction none/add/mul/max/min."""
    axis = normalize_axis(axis, jnp.ndim(data))
    index = _element_index(jnp.asarray(indices), axis, jnp.shape(data)[axis])
    return _scatter(data, index, updates, reduction)


@onnx("ScatterND", since=11)
def scatter_nd(data, indices, updates, *, reduction="none"):
    """ScatterND(T data, int64 indices, T updates) -> T; reduction none/add/mul/max/min."""
    indices = jnp.asarray(indices)
    shape = jnp.shape(data)
    index = tuple(_from_end(indices[..., i], shape[i]) for i in range(indices.shape[-1]))
    return _scatter(data, index, updates, reduction)


@onnx("TensorScatter", since=24)
def tensor_scatter(past_cache, update, write_indices=None, *, mode="linear", axis=-2):
    """TensorScatter(T past_cache, T update, int64 write_indices?) -> T; mode linear/circular, axis."""
    shape = jnp.shape(past_cache)
    axis = normalize_axis(axis, len(shape))
    if axis == 0:
        raise ValueError("TensorScatter: axis cannot be the batch axis")
    dtype = index_dtype()
    starts = jnp.zeros(shape[0], dtype) if write_indices is None else jnp.asarray(write_indices).astype(dtype)
    length = jnp.shape(update)[axis]
    where = starts.reshape((-1,) + (1,) * axis) + jnp.arange(length, dtype=dtype).reshape((1,) * axis + (-1,))
    if mode == "circular":
        where = where % shape[axis]
    elif mode != "linear":
        raise ValueError(f"TensorScatter mode '{mode}' is not linear or circular")
    index = [jnp.arange(n, dtype=dtype).reshape((1,) * d + (n,) + (1,) * (axis - d)) for d, n in enumerate(shape[:axis])]
    return _scatter(past_cache, (*index, where), update, "none")
