"""Compiled eager calls: a call signature seen twice runs as one `jax.jit` function from then on.

The signature is the overload, each tensor's window, dtype and storage shape, every other
argument's value, and JAX's x64 mode. The compiled function takes JaxTensors' storages and
reads each at its window inside (views cost nothing); an in-place call returns the written
tensor's new storage. Calls traced by an outer `jax.jit` (through `jax_fn`) are not compiled
on their own: the lowering is traced into the caller's program.
"""

from __future__ import annotations

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


def _signature(value, tensors: list):
    """A hashable description of a dispatcher argument. Tensors are described by geometry and
    dtype and appended to `tensors` (their arrays are the compiled call's inputs); everything
    else by type and value, since it is baked into the compiled call."""
    kind = type(value)
    if kind is JaxTensor or (kind not in _STATIC_TYPES and isinstance(value, JaxTensor)):
        # The compiled call reads a JaxTensor from its storage, so views cost nothing extra.
        tensors.append(value)
        storage = value._box.array
        return (JaxTensor, value.shape, value.stride(), value.storage_offset(), value.dtype,
                storage.shape, storage.dtype)
    if kind in _STATIC_TYPES:
        return (kind, value)
    if kind is float:  # repr tells -0.0 from 0.0 and keeps nan equal to itself
        return (float, repr(value))
    if kind is complex:
        return (complex, repr(value))
    if kind in (list, tuple):
        return (kind, tuple(_signature(v, tensors) for v in value))
    if isinstance(value, torch.Tensor):
        tensors.append(value)
        return (torch.Tensor, tuple(value.shape), value.dtype)
    raise TypeError(kind)  # a generator, a SymInt, ...: not compiled


_STATIC_TYPES = frozenset({int, bool, str, type(None), torch.dtype, torch.device, torch.layout,
                           torch.memory_format})


def _call_key(func, args, kwargs, tensors: list):
    """The dispatcher call's signature (its tensors appended to `tensors`), or None if it has
    arguments that cannot be baked into a compiled call."""
    try:
        # id(func): OpOverload hashes in Python, and overloads live as long as the process.
        # The default dtype decides factories' output dtypes (torch.arange(0.5, 3)).
        # So does torch's float32 matmul precision, traced into the compiled call.
        key = [id(func), jax.config.jax_enable_x64, torch.get_default_dtype(), dtypes.matmul_precision()]
        for value in args:
            key.append(_signature(value, tensors))
        for name, value in kwargs.items():
            key.append(name)
            key.append(_signature(value, tensors))
        return tuple(key)
    except TypeError:
        tensors.clear()
        return None


@dataclasses.dataclass(frozen=True)
class Sighting:
    """A dispatcher call being computed: the overload called, its signature, its tensor
    arguments, and for an in-place op the position among them of the tensor it writes."""

    func: Any
    key: tuple
    tensors: list
    written: int | None = None


@dataclasses.dataclass
class _Call:
    """One call signature: how often it was seen, and once hot, its compiled form
    (`run(arrays, tensors)`, given the tensor arguments and their arrays)."""

    func: Any  # the overload itself: its id in the key could be reused once it is freed
    sightings: int = 0
    run: Any = None


_CALLS: dict[tuple, _Call] = {}
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
    key = _call_key(func, args, kwargs, tensors)
    if key is None:
        return None, None
    call = _CALLS.get(key)
    if call is not None and call.run is not None and call.func is func:
        arrays = [_input_array(t) for t in tensors]
        # Under jax.jit (jax_fn) the op is traced into the caller's program instead.
        for array in arrays:
            if isinstance(array, jax.core.Tracer):
                return None, (func, key, tensors)
        return call.run(arrays, tensors), None
    return None, (func, key, tensors)


def seen(sighting: Sighting, plan: Lowered, args, kwargs, meta) -> None:
    """Count a sighting of a call signature; on the one that makes it hot, compile it."""
    call = _CALLS.get(sighting.key)
    if call is None:
        if len(_CALLS) >= _MAX_CALLS:
            _CALLS.clear()
        call = _CALLS[sighting.key] = _Call(sighting.func)
    call.sightings += 1
    if call.sightings < _COMPILE_ON_SIGHTING or call.run is not None:
        return
    outputs = list(meta) if isinstance(meta, (list, tuple)) else [meta]
    if not all(isinstance(m, torch.Tensor) for m in outputs):
        return
    if any(isinstance(_input_array(t), jax.core.Tracer) for t in sighting.tensors):
        return
    compiled = jax.jit(_traceable(plan, args, kwargs, meta, sighting.written))
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


def _template(value):
    """A dispatcher argument with its tensors replaced by slots (a compiled call must not keep
    the tensors of the call it was compiled from alive)."""
    if isinstance(value, JaxTensor):
        return Slot(value.window())
    if isinstance(value, torch.Tensor):
        return Slot(None)
    if isinstance(value, (list, tuple)):
        return type(value)(_template(v) for v in value)
    return value


def _slots(value) -> list[Slot]:
    if isinstance(value, Slot):
        return [value]
    if isinstance(value, (list, tuple)):
        return [slot for v in value for slot in _slots(v)]
    return []


def _traceable(plan: Lowered, args, kwargs, meta, written: int | None):
    """The call as a function of its tensor arguments' arrays, casting to PyTorch's dtypes.

    For an in-place call (`written` is the position of the tensor it writes) the function
    returns that tensor's new storage instead.
    """
    args, kwargs = _template(tuple(args)), {k: _template(v) for k, v in kwargs.items()}
    slots = _slots((args, tuple(kwargs.values())))  # in _call_key's order
    metas = list(meta) if isinstance(meta, (list, tuple)) else [meta]
    wanted = [dtypes.jax_dtype(m.dtype) for m in metas]
    precision = dtypes.matmul_precision()

    def run(*arrays):
        inputs = iter(arrays)

        def value(slot: Slot):
            array = next(inputs)
            return array if slot.window is None else read_window(array, slot.window)

        positional, keywords = lowering_arguments(plan, args, kwargs, meta, value)
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
