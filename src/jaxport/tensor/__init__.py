"""The eager frontend: PyTorch code running on JAX arrays through a tensor subclass.

    jax_tensor   `JaxTensor`: a torch.Tensor whose data is a window on a jax.Array storage
    arguments    dispatcher arguments as a lowering takes them
    compiled     a call signature seen twice runs as one jitted function
    dispatch     one ATen call on JaxTensors: the op library's lowering, PyTorch's semantics
    mode         `eager()`: `device="jax"` factories, `.to("jax")`, `module.to("jax")`
    device       the `torch.jax` device module PyTorch looks up for `device="jax"`
    accelerator  `torch.accelerator` kept on the machine's own accelerator (CUDA) once "jax" is named

Importing this package names torch's PrivateUse1 device "jax" (once per process), which is why
`jaxport` imports it only on first use (`jaxport.eager()`, `jaxport.JaxTensor`).
"""

import torch

from . import accelerator as _accelerator
from . import device as _device_module

# `device="jax"` parses as a torch.device once PrivateUse1 carries the name, which also makes it
# PyTorch's accelerator: torch.accelerator stays on the one the machine had (`accelerator`).
if torch._C._get_privateuse1_backend_name() != "jax":
    _machine_accelerator = _accelerator.accelerator_before_registration()
    torch.utils.rename_privateuse1_backend("jax")
    if _machine_accelerator is not None:
        _accelerator.keep(_machine_accelerator)
if not hasattr(torch, "jax"):
    torch._register_device_module("jax", _device_module)
    _device_module.register_hooks()

from . import dispatch as _dispatch  # noqa: E402, F401  (sets the table's dispatch)
from .jax_tensor import JaxTensor  # noqa: E402
from .mode import disable, eager, enable  # noqa: E402

__all__ = ["JaxTensor", "disable", "eager", "enable"]
