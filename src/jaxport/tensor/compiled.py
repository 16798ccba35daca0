"""Compiled eager calls: a call signature seen twice runs as one `jax.jit` function from then on.

The signature is the overload, each tensor's window, dtype and storage shape, every other
argument's value, and JAX's x64 mode. The compiled function takes JaxTensors' storages and
reads each at its window inside (views cost nothing); an in-place call returns the written
tensor's new storage. Calls traced by an outer `jax.jit` (through `jax_fn`) are not compiled
on their own: the lowering is traced into the caller's program.

A Python float is part of the signature until the same call is seen with another value (an
optimizer's bias correction, a scheduler's learning rate: new every step); from then on that
call's floats are arguments of its compiled function, traced and weakly typed as Python
scalars are, so the values that change make no new programs. A lowering that needs a float's
value (an output shape, a Python decision) keeps it in the signature. The signatures kept are
bounded; the least recently used is dropped first.
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import torch

from .. import dtypes
from ..ops import registry
from .arguments import Lowered, Slot, lowering_arguments, unwrap
from .jax_tensor import JaxTensor, Storage, _contiguous_strides, read_window, write_window

#: Sightings of a call signature before it is compiled: once is a one-off (a test sample,
#: a shape seen at start-up), twice is a loop.
_COMPILE_ON_SIGHTING = 2
_MAX_CALLS = 8192


def _signature(value, tensors: list, floats: list):
    """A hashable description of a dispatcher argument. Tensors are described by geometry and
    dtype and appended to `tensors` (their arrays are the compiled call's inputs), floats
    appended to `floats` (`_keyed`: their values join the key unless traced); everything else
    by type and value, since it is baked into the compiled call."""
    kind = type(value)
    if kind is JaxTensor or (kind not in _STATIC_TYPES and isinstance(value, JaxTensor)):
        # The compiled call reads a JaxTensor from its storage, so views cost nothing extra.
        tensors.append(value)
        storage = value._box.array
        return (JaxTensor, value.shape, value.stride(), value.storage_offset(), value.dtype,
                storage.shape, storage.dtype)
    if kind in _STATIC_TYPES:
        return (kind, value)
    if kind is float:
        floats.append(value)
        return float
    if kind is complex:
        return (complex, repr(value))
    if kind in (list, tuple):
        return (kind, tuple(_signature(v, tensors, floats) for v in value))
    if isinstance(value, torch.Tensor):
        tensors.append(value)
        return (torch.Tensor, tuple(value.shape), value.dtype)
    raise TypeError(kind)  # a generator, a SymInt, ...: not compiled


_STATIC_TYPES = frozenset({int, bool, str, type(None), torch.dtype, torch.device, torch.layout,
                           torch.memory_format})


def _call_key(func, args, kwargs, tensors: list, floats: list):
    """The dispatcher call's signature (its tensors appended to `tensors`, its floats to
    `floats`), or None if it has arguments that cannot be baked into a compiled call."""
    try:
        # id(func): OpOverload hashes in Python, and overloads live as long as the process.
        # The default dtype decides factories' output dtypes (torch.arange(0.5, 3)).
        # So does torch's float32 matmul precision, traced into the compiled call.
        key = [id(func), jax.config.jax_enable_x64, torch.get_default_dtype(), dtypes.matmul_precision()]
        for value in args:
            key.append(_signature(value, tensors, floats))
        for name, value in kwargs.items():
            key.append(name)
            key.append(_signature(value, tensors, floats))
        return tuple(key)
    except TypeError:
        tensors.clear()
        return None


@dataclasses.dataclass
class _Floats:
    """What is known of one signature's floats: the values first seen, whether they have
    varied (then they are traced), whether the lowering needs them as values (never traced)."""

    first: tuple
    traced: bool = False
    static: bool = False


_FLOATS: collections.OrderedDict[tuple, _Floats] = collections.OrderedDict()


def _keyed(key: tuple, floats: list) -> tuple[tuple, bool]:
    """(The key a call with these floats is compiled under, whether its floats are traced)."""
    values = tuple(map(repr, floats))  # repr tells -0.0 from 0.0 and keeps nan equal to itself
    known = _FLOATS.get(key)
    if known is None:
        _bounded(_FLOATS)
        _FLOATS[key] = _Floats(values)
        return (key, values), False
    try:
        _FLOATS.move_to_end(key)
    except KeyError:  # another thread dropped it meanwhile
        pass
    if not known.traced and not known.static and values != known.first:
        known.traced = True
    return ((key, "traced"), True) if known.traced and not known.static else ((key, values), False)


def _bounded(table: collections.OrderedDict) -> None:
    while len(table) >= _MAX_CALLS:
        table.popitem(last=False)  # the least recently used


@dataclasses.dataclass(frozen=True)
class Sighting:
    """A dispatcher call being computed: the overload called, its signature, its tensor
    arguments, and for an in-place op the position among them of the tensor it writes."""

    func: Any
    key: tuple
    tensors: list
    floats: list | None = None  # the call's floats, where its compiled function takes them
    written: int | None = None


@dataclasses.dataclass
class _Call:
    """One call signature: how often it was seen, and once hot, its compiled form
    (`run(arrays, tensors)`, given the tensor arguments and their arrays)."""

    func: Any  # the overload itself: its id in the key could be reused once it is freed
    sightings: int = 0
    run: Any = None


_CALLS: collections.OrderedDict[tuple, _Call] = collections.OrderedDict()
#: Calls that ran compiled, and lowerings that ran op by op with a signature that could be
#: compiled (not yet hot, or kept out: a float its lowering needs as a value, an output that is
#: not a tensor). Decompositions, random and value-dependent ops are in neither.
counts = collections.Counter()
#: `registry.user_version()` when `_CALLS` was last emptied.
_lowerings_version = 0


def _input_array(tensor: torch.Tensor) -> jax.Array:
    """What a compiled call takes for a tensor argument: a JaxTensor's storage, a CPU tensor's
    values."""
    return tensor._box.array if isinstance(tensor, JaxTensor) else unwrap(tensor)


def compiled_call(func, args, kwargs):
    """(The call's result, None) if its signature is compiled, else (None, its signature)."""
    global _lowerings_version
    if registry.lowerings_in_force():
        return None, None  # a `jaxport.lowerings` scope: compiled calls hold the lowerings they traced
    if registry.user_version() != _lowerings_version:
        _CALLS.clear()  # a user's lowering came since they were compiled
        _lowerings_version = registry.user_version()
    tensors: list[torch.Tensor] = []
    floats: list[float] = []
    key = _call_key(func, args, kwargs, tensors, floats)
    if key is None:
        return None, None
    traced = False
    if floats:
        key, traced = _keyed(key, floats)
    call = _CALLS.get(key)
    if call is not None and call.run is not None and call.func is func:
        try:
            _CALLS.move_to_end(key)
        except KeyError:  # another thread dropped it meanwhile: this call still runs
            pass
        arrays = [_input_array(t) for t in tensors]
        # Under jax.jit (jax_fn) the op is traced into the caller's program instead.
        for array in arrays:
            if isinstance(array, jax.core.Tracer):
                return None, (func, key, tensors, floats if traced else None)
        if traced:
            arrays += floats
        counts["compiled"] += 1
        return call.run(arrays, tensors), None
    return None, (func, key, tensors, floats if traced else None)


def seen(sighting: Sighting, plan: Lowered, args, kwargs, meta) -> None:
    """Count a sighting of a call signature; on the one that makes it hot, compile it."""
    counts["op by op"] += 1
    call = _CALLS.get(sighting.key)
    if call is None:
        _bounded(_CALLS)
        call = _CALLS[sighting.key] = _Call(sighting.func)
    call.sightings += 1
    if call.sightings < _COMPILE_ON_SIGHTING or call.run is not None:
        return
    outputs = list(meta) if isinstance(meta, (list, tuple)) else [meta]
    if not all(isinstance(m, torch.Tensor) for m in outputs):
        return
    arrays = [_input_array(t) for t in sighting.tensors]
    if any(isinstance(a, jax.core.Tracer) for a in arrays):
        return
    function = _traceable(plan, args, kwargs, meta, sighting.written, traced_floats=sighting.floats is not None)
    if sighting.floats is not None:
        try:  # a trace, not a compile: does the lowering take its floats as traced values?
            jax.eval_shape(function, *arrays, *sighting.floats)
        except Exception:  # it needs their values (a shape, a Python decision): keep them in the key
            known = _FLOATS.get(sighting.key[0])
            if known is not None:
                known.static = True
            _CALLS.pop(sighting.key, None)
            return
    compiled = jax.jit(function)
    if sighting.written is None:
        wrap = _wrapper_for(meta)
        call.run = lambda arrays, tensors: wrap(compiled(*arrays))
    else:
        written = sighting.written

        def write(arrays, tensors):
            target = tensors[written]
            target._box.array = compiled(*arrays)
            return target

        call.run = write


class _Float:
    """Stands for a float a compiled call takes as an argument."""


_FLOAT = _Float()


def _template(value, traced_floats: bool = False):
    """A dispatcher argument with its tensors replaced by slots (a compiled call must not keep
    the tensors of the call it was compiled from alive), and its floats by `_FLOAT` where
    they are traced."""
    if isinstance(value, JaxTensor):
        return Slot(value.window())
    if isinstance(value, torch.Tensor):
        return Slot(None)
    if traced_floats and type(value) is float:
        return _FLOAT
    if isinstance(value, (list, tuple)):
        return type(value)(_template(v, traced_floats) for v in value)
    return value


def _filled(value, floats):
    """`value` with each `_FLOAT` replaced by the next of `floats`, in `_call_key`'s order."""
    if value is _FLOAT:
        return next(floats)
    if isinstance(value, (list, tuple)):
        return type(value)(_filled(v, floats) for v in value)
    return value


def _slots(value) -> list[Slot]:
    if isinstance(value, Slot):
        return [value]
    if isinstance(value, (list, tuple)):
        return [slot for v in value for slot in _slots(v)]
    return []


def _traceable(plan: Lowered, args, kwargs, meta, written: int | None, traced_floats: bool = False):
    """The call as a function of its tensor arguments' arrays (then, with `traced_floats`, its
    floats), casting to PyTorch's dtypes.

    For an in-place call (`written` is the position of the tensor it writes) the function
    returns that tensor's new storage instead.
    """
    args = _template(tuple(args), traced_floats)
    kwargs = {k: _template(v, traced_floats) for k, v in kwargs.items()}
    slots = _slots((args, tuple(kwargs.values())))  # in _call_key's order
    metas = list(meta) if isinstance(meta, (list, tuple)) else [meta]
    wanted = [dtypes.jax_dtype(m.dtype) for m in metas]
    precision = dtypes.matmul_precision()
    count = len(slots)

    def run(*arrays):
        inputs = iter(arrays[:count])

        def value(slot: Slot):
            array = next(inputs)
            return array if slot.window is None else read_window(array, slot.window)

        call_args, call_kwargs = args, kwargs
        if traced_floats:
            floats = iter(arrays[count:])
            call_args = _filled(args, floats)
            call_kwargs = {k: _filled(v, floats) for k, v in kwargs.items()}
        positional, keywords = lowering_arguments(plan, call_args, call_kwargs, meta, value)
        with jax.default_matmul_precision(precision):
            result = plan.lowering(*positional, **keywords)
        results = list(result) if isinstance(meta, (list, tuple)) else [result]
        results = [jnp.asarray(r).astype(w) for r, w in zip(results, wanted)]
        if written is None:
            # One array, not a list of one: the compiled call's output pytree costs per call.
            return results if isinstance(meta, (list, tuple)) else results[0]
        return write_window(arrays[written], slots[written].window, results[0])

    return run


def _wrapper_for(meta):
    """Turns the compiled call's output (an array, or a list of them) into JaxTensors shaped
    like `meta`."""
    if not isinstance(meta, (list, tuple)):
        size, dtype = tuple(meta.shape), meta.dtype
        return lambda array: JaxTensor._dense(Storage(array), size, dtype)
    layouts = [(tuple(m.shape), _contiguous_strides(tuple(m.shape)), m.dtype) for m in meta]

    def wrap(arrays):
        return type(meta)([JaxTensor(Storage(a), size, stride, 0, dtype)
                           for a, (size, stride, dtype) in zip(arrays, layouts)])

    return wrap
