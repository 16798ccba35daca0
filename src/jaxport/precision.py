"""Precision policies: a float32 checkpoint run in bfloat16 or float16 the way `torch.autocast` runs it.

A `Precision` converts the model as PyTorch runs it under `torch.autocast(device_type=<the model's
device type>, dtype=compute)`: the model is traced under autocast, so the graph jaxport lowers holds autocast's
own casts (matrix products and convolutions in `compute`, losses in float32, everything else in
the dtype its inputs have; Hugging Face models keep their softmax and norms in float32 by their
own code), and the converted program computes in exactly those dtypes. `params` stores the
floating-point weights in another dtype (bfloat16 halves their memory; autocast's casts of them
are then no-ops): the model is traced with its parameters in that dtype, as a checkpoint saved
in it would be. `torch.autocast` regions inside a model are honoured with or without a policy:
torch.export records their casts.

The op lists are those of the model's own device, where it is traced: a CUDA model's autocast
keeps more ops (softmax, layer norms) in float32 than a CPU model's. Autocast dispatches by the
tensors' device, so autocast for another device than the model's would change nothing: the model
would convert in float32, silently. A model on the `meta` device has no autocast (PyTorch has none
for it): a compute policy there is refused, a storage policy (`params=`) works.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
from typing import Any

import jax.numpy as jnp
import numpy as np
import torch

from . import dtypes
from .errors import InputError

_LOW = (np.dtype(jnp.bfloat16), np.dtype(np.float16))


@dataclasses.dataclass(frozen=True)
class Precision:
    """How a converted model computes (see the module docstring).

    Args:
      compute: the autocast dtype (`jnp.bfloat16` or `jnp.float16`; a torch dtype is taken too),
        or None to compute in the checkpoint's own dtypes.
      params: the dtype floating-point parameters are stored in, or None to keep the checkpoint's.
    """

    compute: Any = None
    params: Any = None

    def __post_init__(self):
        for field in ("compute", "params"):
            value = getattr(self, field)
            if value is None:
                continue
            dtype = np.dtype(dtypes.numpy_dtype(value) if isinstance(value, torch.dtype) else value)
            if field == "compute" and dtype not in _LOW:
                raise InputError(f"Precision(compute=...) takes bfloat16 or float16 (autocast's dtypes), got {dtype}")
            if field == "params" and not jnp.issubdtype(dtype, jnp.floating):
                raise InputError(f"Precision(params=...) takes a floating dtype, got {dtype}")
            object.__setattr__(self, field, dtype)

    def autocast(self, device: torch.device | str = "cpu") -> contextlib.AbstractContextManager:
        """The context to trace a model on `device` in: `torch.autocast` at `compute` for that
        device's type (CUDA's op lists for a CUDA model), or nothing."""
        if self.compute is None:
            return contextlib.nullcontext()
        device_type = torch.device(device).type
        if not torch.amp.is_autocast_available(device_type):
            raise InputError(
                f"dtype={self.compute.name} runs the model as torch.autocast does on the model's device, and "
                f"PyTorch has no autocast for {device_type!r} devices: convert the model on cpu or cuda, or keep "
                f"its compute dtypes and store its weights in {self.compute.name} with Precision(params=...)")
        return torch.autocast(device_type=device_type, dtype=dtypes.torch_dtype(self.compute))

    def prepare(self, module: torch.nn.Module) -> torch.nn.Module:
        """The module to trace: `module` itself, or with `params` set, a copy whose floating-point
        parameters are in that dtype (buffers as they are), so the program is traced with the
        weights it will run with: a norm's bfloat16 weight times a bfloat16 activation stays
        bfloat16, where a float32 weight would promote it."""
        if self.params is None:
            return module
        target = dtypes.torch_dtype(self.params)
        copied = copy.deepcopy(module)
        with torch.no_grad():
            for parameter in copied.parameters():
                if parameter.is_floating_point():
                    parameter.data = parameter.data.to(target)
        return copied


def precision_policy(dtype: Any) -> Precision | None:
    """`dtype=` of the conversions as a `Precision`: None, a dtype (autocast at it, weights as they
    are), or a `Precision` itself."""
    if dtype is None or isinstance(dtype, Precision):
        return dtype
    return Precision(compute=dtype)
