"""ONNX sequences and optionals.

A sequence is a Python list of arrays and an empty optional is None: Python structure
around the arrays, so positions into a sequence are read as concrete values. Lengths and
has-element flags are NumPy values, so they stay concrete under `jax.jit` (a loop's trip
count or a branch condition may come from them).
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from ..registry import onnx
from ._helpers import index_dtype, normalize_axis, static_ints


def _position(position, length: int, what: str, *, inserting: bool = False) -> int:
    """A (possibly negative) sequence position as a list index, checked as ONNX does."""
    (index,) = static_ints(position, what)
    upper = length + 1 if inserting else length
    if not -length <= index < upper:
        raise IndexError(f"{what} {index} is out of range for a sequence of {length}")
    return index + length if index < 0 else index


@onnx("ConcatFromSequence", since=11)
def concat_from_sequence(input_sequence, *, axis, new_axis=0):
    """ConcatFromSequence(S input_sequence) -> T; axis, new_axis (stack instead)."""
    if new_axis:
        return jnp.stack(input_sequence, axis=axis)
    return jnp.concatenate(input_sequence, axis=axis)


@onnx("Optional", since=15)
def optional(input=None, *, type=None):
    """Optional(V input?) -> O; without an input, an empty optional of `type`."""
    return input


@onnx("OptionalGetElement", since=15)
def optional_get_element(input):
    """OptionalGetElement(O input) -> V; from 18 on a plain tensor or sequence passes through."""
    if input is None:
        raise ValueError("OptionalGetElement of an empty optional")
    return input


@onnx("OptionalHasElement", since=15)
def optional_has_element(input=None):
    """OptionalHasElement(O input?) -> B: whether the optional (or a missing input) holds a value."""
    return np.asarray(input is not None)


@onnx("SequenceAt", since=11, static=(1,))
def sequence_at(input_sequence, position):
    """SequenceAt(S input_sequence, I position) -> T; negative positions count from the back."""
    return input_sequence[_position(position, len(input_sequence), "SequenceAt position")]


@onnx("SequenceConstruct", since=11)
def sequence_construct(*inputs):
    """SequenceConstruct(T... inputs) -> S."""
    return list(inputs)


@onnx("SequenceEmpty", since=11)
def sequence_empty(*, dtype=None):
    """SequenceEmpty() -> S; dtype (float by default)."""
    return []


@onnx("SequenceErase", since=11, static=(1,))
def sequence_erase(input_sequence, position=None):
    """SequenceErase(S input_sequence, I position?) -> S; the last tensor by default."""
    values = list(input_sequence)
    index = len(values) - 1 if position is None else _position(position, len(values), "SequenceErase position")
    del values[index]
    return values


@onnx("SequenceInsert", since=11, static=(2,))
def sequence_insert(input_sequence, tensor, position=None):
    """SequenceInsert(S input_sequence, T tensor, I position?) -> S; at the back by default."""
    values = list(input_sequence)
    if position is None:
        values.append(tensor)
    else:
        values.insert(_position(position, len(values), "SequenceInsert position", inserting=True), tensor)
    return values


@onnx("SequenceLength", since=11)
def sequence_length(input_sequence):
    """SequenceLength(S input_sequence) -> int64 length (0-d)."""
    return np.asarray(len(input_sequence), index_dtype())


@onnx("SequenceMap", since=17)
def sequence_map(input_sequence, *additional_inputs, body):
    """SequenceMap(S input_sequence, V... additional_inputs) -> S...; body applied per element,
    with sequence inputs taken element by element and tensor inputs passed whole."""
    count = len(input_sequence)
    for extra in additional_inputs:
        if isinstance(extra, list) and len(extra) != count:
            raise ValueError(f"SequenceMap: sequences of {count} and {len(extra)} tensors")
    results = None
    for i in range(count):
        args = [input_sequence[i], *(v[i] if isinstance(v, list) else v for v in additional_inputs)]
        outputs = body(*args)
        if results is None:
            results = [[] for _ in outputs]
        for store, value in zip(results, outputs):
            store.append(value)
    if results is None:
        # No element to call the body on, so its output count is unknown: return plenty of
        # empty sequences; the interpreter keeps as many as the node names.
        return ([],) * 64
    return tuple(results)


def _split_sizes(length: int, split) -> list[int]:
    sizes = static_ints(split, "SplitToSequence split")
    if np.ndim(split) == 0:  # one size: equal chunks, the last one smaller
        (size,) = sizes
        return [size] * (length // size) + ([length % size] if length % size else [])
    return list(sizes)


@onnx("SplitToSequence", since=11, static=(1,))
def split_to_sequence(input, split=None, *, axis=0, keepdims=1):
    """SplitToSequence(T input, I split?) -> S; without split, pieces of 1 (keepdims applies)."""
    axis = normalize_axis(axis, jnp.ndim(input))
    length = jnp.shape(input)[axis]
    if split is None:
        pieces = jnp.split(input, length, axis=axis) if length else []
        return [jnp.squeeze(p, axis) for p in pieces] if not keepdims else list(pieces)
    sizes = _split_sizes(length, split)
    bounds = np.cumsum(sizes)[:-1].tolist()
    return list(jnp.split(input, bounds, axis=axis))
