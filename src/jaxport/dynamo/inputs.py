"""A compiled graph's tensor arguments as JAX arrays: how each crosses, and the imports kept.

Each tensor argument is imported through DLPack once and its array kept while the argument is the
same tensor object with the same data pointer, shape, strides and dtype (parameters and buffers,
an input passed again); a rebinding (`p.data = ...`, `.to()`) changes the pointer and imports
again. An array that shares the tensor's memory needs nothing more: a later in-place write
(`p.add_`, an optimizer's step, `load_state_dict`, AOTAutograd writing BatchNorm's statistics
back, even `p.data.add_`, which bypasses the version counter) shows through it. An import that had
to copy (a buffer XLA cannot take as it lies, such as weights loaded at unaligned offsets; a
non-contiguous tensor; another device; float64 narrowed) is kept while the tensor's version
counter is unchanged too, so every in-place write but one through `.data` (which PyTorch's
autograd does not see either) imports again. The cache holds each tensor weakly and drops its
array when the tensor dies, so it never keeps a model's memory alive.

Nothing waits to read tensor values on the host: bool and int64 cross by DLPack as their bytes
and words (`unpacked` turns them back inside the jitted function, with the range verdict
`ranges.RangeCheck` reads). Only float64, uint64 and complex128 with x64 off are still narrowed
and range-checked on the host (`dlpack.to_jax`) on every call.
"""

from __future__ import annotations

import functools
import sys
import weakref

import jax
import jax.numpy as jnp
import torch

from .. import dlpack, dtypes
from ..errors import InputError

#: How a tensor argument crosses to JAX, by its dtype (`crossing`): PLAIN as it is; BOOL as its
#: bytes (uint8, which every jaxlib's DLPack takes), made bool inside the jitted function; WORDS
#: (int64 with JAX's x64 mode off) as its two int32 words, the low one taken inside the jitted
#: function and the high one checked there to be the low one's sign (the value fits int32);
#: NARROWED (float64, uint64, complex128 with x64 off) copied, narrowed and checked by
#: `dlpack.to_jax`, on every call.
PLAIN, BOOL, WORDS, NARROWED = "plain", "bool", "words", "narrowed"


def crossing(dtype: torch.dtype) -> str:
    if dtype == torch.bool:
        return BOOL
    exact = dtypes.numpy_dtype(dtype)
    if dtypes.narrow_dtype(exact) == exact:
        return PLAIN
    if dtype == torch.int64 and sys.byteorder == "little":  # the low word first
        return WORDS
    return NARROWED


def unpacked(crossings: tuple[str, ...], arrays: list) -> tuple[list, jax.Array | None]:
    """Inside the jitted function: the arrays as the graph's inputs (bytes made bool, int64's low
    words taken), and one verdict per WORDS input, whether its values fit int32 (None if none)."""
    values, fits = [], []
    for kind, array in zip(crossings, arrays):
        if kind == BOOL:
            array = array != 0
        elif kind == WORDS:
            low, high = array[..., 0], array[..., 1]
            fits.append(jnp.all(high == jax.lax.shift_right_arithmetic(low, jnp.int32(31))))
            array = low
        values.append(array)
    return values, (jnp.stack(fits) if fits else None)


#: The version a kept import of an inference tensor (which has no version counter) records.
_UNVERSIONED = object()


class Kept:
    """One kept import: a weak reference to the tensor, its (data pointer, shape, strides, dtype)
    then, the array, the tensor's version (`_UNVERSIONED` for an inference tensor) and whether
    the array shares the tensor's memory."""

    __slots__ = ("tensor", "layout", "array", "version", "shared")

    def __init__(self, tensor: weakref.ref, layout: tuple, array: jax.Array, version, shared: bool):
        self.tensor, self.layout, self.array, self.version, self.shared = tensor, layout, array, version, shared


class InputCache:
    """The arrays of a graph's tensor arguments (at `positions` of its argument list, of `dtypes`,
    named `names` in messages), kept between calls as the module docstring says; `cache[slot]` is
    the `Kept` import of the slot-th tensor argument, or None."""

    __slots__ = ("positions", "names", "dtypes", "crossings", "device", "jax_device", "fenced", "_kept",
                 "__weakref__")

    def __init__(self, positions: tuple[int, ...], names: tuple[str, ...], dtypes: tuple[torch.dtype, ...],
                 device: torch.device):
        self.positions, self.names, self.dtypes = positions, names, dtypes
        self.crossings = tuple(crossing(dtype) for dtype in dtypes)
        self.device = device
        self.jax_device = dlpack.jax_device(device)
        #: On CUDA the arrays kept alias memory that PyTorch may write on its own stream between
        #: calls: each call adds a `fence`.
        self.fenced = device.type == "cuda" and self.jax_device is not None
        self._kept: list[Kept | None] = [None] * len(positions)

    def __len__(self) -> int:
        return len(self._kept)

    def __getitem__(self, slot: int) -> Kept | None:
        return self._kept[slot]

    def arrays(self, args: list) -> list[jax.Array]:
        """The array of each tensor argument in `args`: the one kept, or a new import."""
        kept = self._kept
        arrays = []
        for slot, position in enumerate(self.positions):
            tensor = args[position]
            entry = kept[slot]
            # The same tensor at the same address and version as when its array was kept: its
            # layout cannot have changed (every in-place op, metadata ones too, bumps the version).
            if (entry is not None and entry.version is not _UNVERSIONED and entry.version == tensor._version
                    and entry.tensor() is tensor and entry.layout[0] == tensor.data_ptr()):
                arrays.append(entry.array)
            else:
                arrays.append(self._written_or_new(slot, tensor))
        return arrays

    def fence(self) -> jax.Array:
        """A fresh one-element import on the graph's GPU, which the compiled program takes (it keeps
        unused arguments): DLPack's stream handshake makes JAX's work wait for what PyTorch queued
        before it, so JAX never reads a kept array before PyTorch's earlier writes land. Outputs
        cross back with the handshake the other way (PyTorch's stream waits for them), which also
        orders PyTorch's later writes after JAX's reads."""
        fence = torch.empty(1, device=self.device)
        array = dlpack.share(fence)
        return array if array is not None else self._placed(dlpack.to_jax(fence))

    def _written_or_new(self, slot: int, tensor: torch.Tensor) -> jax.Array:
        """The kept array of a tensor written in place since (an optimizer's step), where the
        array shares its memory and the layout held, its version noted; else a new import."""
        entry = self._kept[slot]
        if (entry is not None and entry.shared and entry.tensor() is tensor
                and entry.layout == (tensor.data_ptr(), tensor.shape, tensor.stride(), tensor.dtype)):
            if entry.version is not _UNVERSIONED:
                entry.version = tensor._version
            return entry.array
        return self._import(slot, tensor)

    def _import(self, slot: int, tensor: torch.Tensor) -> jax.Array:
        """`tensor` as the array the jitted function takes in its slot, kept for the next call:
        for as long as the tensor keeps its memory and layout where the array shares them, and
        its version too where the array is a copy."""
        name = self.names[slot]
        if tensor.dtype != self.dtypes[slot]:
            raise InputError(f"graph input {name!r} is {tensor.dtype}; the graph was compiled for "
                             f"{self.dtypes[slot]}")
        # Before reading it: a write meanwhile imports again next call. An inference tensor has
        # no version counter: its shared array is kept while its address and layout hold (writes
        # show through it), a copy of it is never kept.
        version = _UNVERSIONED if tensor.is_inference() else tensor._version
        kind = self.crossings[slot]
        shared = False
        if kind == NARROWED:
            array = self._placed(dlpack.to_jax(tensor, what=f"graph input {name!r}", error=InputError))
        else:
            view = tensor.detach()
            contiguous = view.is_contiguous()
            if not contiguous:
                view = view.contiguous()
            if kind == BOOL:
                view = view.view(torch.uint8)
            elif kind == WORDS:
                view = view.unsqueeze(-1).view(torch.int32)
            if view.numel() == 0:  # no values to share or go stale: made on the device
                array, shared = jnp.zeros(view.shape, dtypes.numpy_dtype(view.dtype), device=self.jax_device), True
            else:
                array = dlpack.share(view) if contiguous and view.device == self.device else None
                shared = array is not None
                if not shared:  # unaligned, non-contiguous, another device, JAX without the device
                    array = self._placed(dlpack.to_jax(view))
        ref = weakref.ref(tensor, functools.partial(_forget, weakref.ref(self), slot))
        layout = (tensor.data_ptr(), tensor.shape, tensor.stride(), tensor.dtype)
        self._kept[slot] = Kept(ref, layout, array, version, shared)
        return array

    def _placed(self, array: jax.Array) -> jax.Array:
        if self.jax_device is not None and array.devices() != {self.jax_device}:
            array = jax.device_put(array, self.jax_device)
        return array


def _forget(cache_ref: weakref.ref, slot: int, ref: weakref.ref) -> None:
    """A kept tensor died: drop its array (and the memory it holds), unless the slot moved on."""
    cache = cache_ref()
    if cache is not None and cache._kept[slot] is not None and cache._kept[slot].tensor is ref:
        cache._kept[slot] = None
