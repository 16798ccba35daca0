"""What `JaxModel.load_weights` reads weights from: a mapping of names to tensors or arrays, an
`nn.Module`, or a safetensors checkpoint on disk (`checkpoints.Checkpoint`).

Each source weight is a `Weight`: its shape and dtype (as JAX holds it, under the current x64
mode) known before any of its data is read, so that every name, shape and dtype is checked
against the model first, and `read` to fetch its values, whole or already placed on a sharding.
From a checkpoint, a sharded read takes each addressable device's slice of the tensor from the
file and nothing else (`jax.make_array_from_callback` asks for exactly those), so no device and
no host holds more than its share plus one slice in flight; each read is waited for before the
next starts, so at most one tensor's transient copy is alive.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import jax
import numpy as np
from jax.sharding import Sharding

from .. import dlpack, dtypes
from ..checkpoints import Checkpoint, is_checkpoint_path
from ..errors import InputError, ModelFileError
from .inputs import as_jax


@dataclasses.dataclass(frozen=True)
class Weight:
    """One weight a source holds: its shape and JAX dtype, and how to read it (placed on the
    sharding given, or as the source puts it: a torch tensor crosses by DLPack)."""

    shape: tuple[int, ...]
    dtype: np.dtype
    read: Callable[[Sharding | None], jax.Array]


def weights_of(source: Any, prefix: str = "") -> dict[str, Weight]:
    """`load_weights`' argument as {name: Weight}, `prefix` before every name."""
    if is_checkpoint_path(source):
        checkpoint = Checkpoint(source)
        return {prefix + name: _from_checkpoint(checkpoint, name) for name in checkpoint}
    return {prefix + name: _from_value(value, f"weight '{prefix + name}'") for name, value in _named(source).items()}


def _named(source: Any) -> Mapping[str, Any]:
    if isinstance(source, Mapping):
        return source
    named_parameters = getattr(source, "named_parameters", None)
    if callable(named_parameters):  # a torch.nn.Module
        named = dict(named_parameters(remove_duplicate=False))
        named.update(source.named_buffers(remove_duplicate=False))
        return named
    raise InputError("load_weights takes a mapping of names to tensors, an nn.Module, or the path of a "
                     f"safetensors checkpoint (a file or a directory), not {type(source).__name__}")


def _from_value(value: Any, what: str) -> Weight:
    if getattr(value, "is_meta", False):
        raise InputError(f"{what} is on the meta device: it has shape {tuple(value.shape)} but no values")
    kind = dtypes.numpy_dtype(value.dtype) if type(value).__module__.startswith("torch") else np.dtype(value.dtype)

    def read(sharding: Sharding | None) -> jax.Array:
        array = as_jax(value, what, release=True)
        return array if sharding is None else jax.device_put(array, sharding)

    return Weight(tuple(value.shape), dtypes.narrow_dtype(kind), read)


def _from_checkpoint(checkpoint: Checkpoint, name: str) -> Weight:
    shape, torch_dtype = checkpoint.spec(name)
    what = f"weight '{name}' of {checkpoint.path}"

    def part(index: tuple[slice, ...] | None):
        return dlpack.narrowed(checkpoint.read(name, index), what=what, error=ModelFileError)

    def read(sharding: Sharding | None) -> jax.Array:
        if sharding is None:
            array = dlpack.to_jax(part(None), what=what, error=ModelFileError, release=True)
        else:
            array = jax.make_array_from_callback(shape, sharding, lambda index: dlpack.to_numpy(part(index)))
        return array.block_until_ready()  # its copy made and the file's pages let go before the next

    return Weight(shape, dtypes.narrow_dtype(dtypes.numpy_dtype(torch_dtype)), read)
