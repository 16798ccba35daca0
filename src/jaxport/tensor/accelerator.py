"""`torch.accelerator` kept on the machine's own accelerator once the jax device is registered.

The jax device is PyTorch's PrivateUse1 backend, and PyTorch makes a registered PrivateUse1 backend
its accelerator ahead of CUDA, XPU or MTIA (`at::getAccelerator`, in C++): after the eager frontend
is first used, `torch.accelerator.current_accelerator()` would be `jax` on a GPU machine, and code
written for any accelerator (optimizers' capture checks, DDP, serialization, users' own device
selection) would ask the jax device for CUDA's streams and memory. So when PyTorch had an
accelerator before the registration, `keep` points `torch.accelerator`'s Python functions back at
it, through its device module (`torch.cuda`). Every CUDA build does (its accelerator is CUDA even
on a machine without a GPU), so `tests/test_cuda_builds.py` runs under CUDA builds in CI.

Out of reach of Python, and so documented rather than fixed: PyTorch's C++ code that asks for the
accelerator itself still sees the jax device. `Tensor.pin_memory()` without a device (pass
`device="cuda"`) and, in PyTorch 2.8 and later, the stream bookkeeping of CUDA backward passes
(pytorch/pytorch#161129) are the known cases; `make gpu-check` runs both on a GPU.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from types import ModuleType
from typing import Any

import torch

#: `torch.accelerator` (and `torch.accelerator.memory`) function -> the device module's function
#: of the same meaning, where the names differ.
_SAME_AS = {
    "current_device_index": "current_device",
    "current_device_idx": "current_device",
    "set_device_index": "set_device",
    "set_device_idx": "set_device",
    "get_memory_info": "mem_get_info",
}
#: Functions answered by the device module's function of the same name.
_SAME_NAME = ("device_count", "is_available", "current_stream", "set_stream", "synchronize", "empty_cache",
              "memory_stats", "memory_allocated", "max_memory_allocated", "memory_reserved",
              "max_memory_reserved", "reset_accumulated_memory_stats", "reset_peak_memory_stats")

#: The accelerator `keep` points `torch.accelerator` at, or None (none, or not kept yet).
kept: torch.device | None = None


def accelerator_before_registration() -> torch.device | None:
    """The accelerator PyTorch names now, before the jax device takes the name (None: none)."""
    return torch.accelerator.current_accelerator()


def keep(accelerator: torch.device, device_module: ModuleType | None = None) -> None:
    """Point `torch.accelerator`'s Python functions at `accelerator` (its device module, such as
    `torch.cuda`, answers them), as PyTorch answered before the jax device was registered."""
    global kept
    module = device_module or torch.get_device_module(accelerator.type)
    replacements: dict[str, Callable[..., Any]] = {
        "current_accelerator": _current_accelerator(torch.device(accelerator.type), module),
        "device_index": _device_index(module),
    }
    for name in _SAME_NAME:
        if hasattr(module, name):
            replacements[name] = _forwarding(name, getattr(module, name))
    for name, theirs in _SAME_AS.items():
        if hasattr(module, theirs):
            replacements[name] = _forwarding(name, getattr(module, theirs))
    for namespace in (torch.accelerator, getattr(torch.accelerator, "memory", None)):
        if namespace is None:
            continue
        for name, function in replacements.items():
            if hasattr(namespace, name):
                setattr(namespace, name, function)
    kept = torch.device(accelerator.type)


def _forwarding(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
    """A function of its own that calls the device module's `function`. Not `function` itself:
    Dynamo keeps one handler per function object, and registers `torch.accelerator.current_stream`
    and `torch.cuda.current_stream` (and others) each with a handler; were the two one object,
    building its table would fail ("Handler already registered"), and every `torch.compile` with it."""

    def forwarded(*args: Any, **kwargs: Any) -> Any:
        return function(*args, **kwargs)

    forwarded.__name__ = forwarded.__qualname__ = name
    forwarded.__doc__ = (f"`torch.accelerator.{name}`, answered by `{function.__module__}.{function.__name__}` "
                         "(kept by jaxport over the jax device; see jaxport.tensor.accelerator).")
    return forwarded


def _current_accelerator(device: torch.device, module: ModuleType) -> Callable[..., torch.device | None]:
    def current_accelerator(check_available: bool = False) -> torch.device | None:
        """The machine's accelerator (kept by jaxport over the jax device; see jaxport.tensor.accelerator)."""
        return device if not check_available or module.is_available() else None

    return current_accelerator


def _device_index(module: ModuleType) -> Callable[[Any], contextlib.AbstractContextManager]:
    def device_index(device: Any, /) -> contextlib.AbstractContextManager:
        """`torch.accelerator.device_index`: the device module's own device context (None: no change)."""
        return contextlib.nullcontext() if device is None else module.device(device)

    return device_index
