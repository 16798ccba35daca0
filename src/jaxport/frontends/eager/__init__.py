"""The eager frontend: PyTorch code running on JAX arrays through a tensor subclass."""

import torch

# `device="jax"` parses as a torch.device once PrivateUse1 carries the name.
if torch._C._get_privateuse1_backend_name() != "jax":
    torch.utils.rename_privateuse1_backend("jax")
if not hasattr(torch, "jax"):
    from . import device as _device_module

    torch._register_device_module("jax", _device_module)

from .mode import disable, eager, enable  # noqa: E402
from .tensor import JaxTensor  # noqa: E402

__all__ = ["JaxTensor", "disable", "eager", "enable"]
