"""How the dispatcher's arguments reach a lowering: tensors as arrays, dtypes as NumPy dtypes,
placement arguments dropped, `dtype=` filled where PyTorch defaults it from the output."""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax.numpy as jnp
import torch

from .. import dlpack, dtypes
from ..frontends import aten_schema
from ..ops import registry
from .jax_tensor import JaxTensor


def unwrap(value):
    """A dispatcher argument as lowerings take it."""
    if isinstance(value, JaxTensor):
        return value.jax()
    if isinstance(value, torch.Tensor):  # a CPU tensor mixed in: copied, as results may alias it
        return jnp.array(dlpack.to_jax(value), copy=True)
    if isinstance(value, torch.dtype):
        return dtypes.jax_dtype(value)
    if isinstance(value, (torch.device, torch.layout, torch.memory_format)):
        return None
    if isinstance(value, (list, tuple)):
        return type(value)(unwrap(v) for v in value)
    return value


@dataclasses.dataclass(frozen=True)
class Lowered:
    """What running an op's lowering takes, worked out once per overload."""

    name: str
    fills_dtype: bool  # a kwarg-only `dtype=` PyTorch defaults from the output
    rng_keyword: str | None

    @property
    def lowering(self) -> Any:
        """Looked up at each call: a `jaxport.lowerings` scope may be in force, or a user's
        `register_lowering` may have come since."""
        return registry.lookup(self.name)


@functools.cache
def lowered(func) -> Lowered:
    name = str(func)
    return Lowered(name, aten_schema.fills_dtype(func), registry.random_keyword(name))


def lowering_arguments(plan: Lowered, args, kwargs, meta, tensor_value):
    """The positional and keyword arguments the lowering takes; `tensor_value` maps each
    tensor argument (or Slot) to its array, called in argument order (args, then kwargs)."""
    def convert(value):
        if isinstance(value, (torch.Tensor, Slot)):
            return tensor_value(value)
        if isinstance(value, (list, tuple)):
            return type(value)(convert(v) for v in value)
        return unwrap(value)

    positional = convert(tuple(args))
    keywords = {k: convert(v) for k, v in kwargs.items() if k not in aten_schema.PLACEMENT_KWARGS}
    if plan.fills_dtype and keywords.get("dtype") is None and isinstance(meta, torch.Tensor):
        keywords["dtype"] = dtypes.jax_dtype(meta.dtype)
    keywords.pop("generator", None)
    return positional, keywords


class Slot:
    """Stands for a tensor in the arguments a compiled call was made from: `window` says where
    a JaxTensor sits in the storage array the call takes (None for a CPU tensor's values)."""

    __slots__ = ("window",)

    def __init__(self, window):
        self.window = window
