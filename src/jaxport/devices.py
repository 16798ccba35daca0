"""The torch device a model lives on, so that nothing jaxport makes for a model assumes the CPU.

Models arrive on `cuda` as often as on `cpu`, and on `meta` when their weights are loaded later
(a model too big to hold twice, or a graph recorded as a GPU records it: docs/guide/devices.md, "Models on a
GPU, and models without weights").
Whatever jaxport builds to trace, probe or check a model (example inputs, probes, the autocast
context of a precision policy, the reference inputs of `verify`) is built on the model's own
device, taken from its parameters and buffers, or from the inputs the user passed.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

CPU = torch.device("cpu")


def module_device(module: Any, inputs: Iterable[Any] = ()) -> torch.device:
    """The device `module`'s first parameter or buffer lives on; for a module without any, the
    first tensor among `inputs` (nested in lists, tuples and dicts); else the CPU."""
    if isinstance(module, torch.nn.Module):
        for tensor in _state(module):
            return tensor.device
    for tensor in _tensors(inputs):
        return tensor.device
    return CPU


def _state(module: torch.nn.Module):
    yield from module.parameters()
    yield from module.buffers()


def _tensors(value):
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _tensors(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _tensors(item)


def moved(value: Any, device: torch.device) -> Any:
    """`value` with every tensor in it (nested in lists, tuples and dicts) on `device`."""
    if isinstance(value, torch.Tensor):
        return value if value.device == device else value.to(device)
    if isinstance(value, dict):
        return {k: moved(v, device) for k, v in value.items()}
    if isinstance(value, (list, tuple)) and not hasattr(value, "_fields"):
        return type(value)(moved(v, device) for v in value)
    return value
