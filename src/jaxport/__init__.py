"""jaxport: PyTorch (and ONNX) models as pure, jittable JAX functions.

The common path is here; the rest lives in named submodules:

    jaxport.train         train_step, TrainState, MixedPrecision, checkpoints, load_into_torch
    jaxport.sharding      placing params, optimizer state and batches on a device mesh
    jaxport.distributed   multi-process runs (one process per host or GPU)
    jaxport.interop       to_jax / to_torch, jax_fn, torch_fn, callback
    jaxport.generation    CausalLM, process_scores, process_logits, beam search
    jaxport.precision     Precision: autocast policies (also on the top level)
    jaxport.compare       the output comparator `jaxport verify` and the tests use
    jaxport.verification  `verify` (also on the top level): a model against PyTorch or onnxruntime,
                          node by node with `localize=True`; its report types
    jaxport.dynamo        the `torch.compile(model, backend="jaxport")` backend (found by its
                          entry point; no import needed)
    jaxport.versions      the oldest release of each dependency jaxport supports, and its check

`register_lowering` and `lowerings` (from `jaxport.ops.registry`) give jaxport the JAX
implementation of an op of your own, or replace one of its lowerings inside a scope.

Importing jaxport turns JAX's persistent compilation cache on (`jaxport.cache`: a second process
loads what the first compiled; `JAXPORT_CACHE_DIR` chooses the directory, or `off`).
"""

from __future__ import annotations

import contextlib
import importlib
import warnings
from typing import Any

# isort: off
from . import versions  # noqa: F401 - first: torch, JAX or NumPy below jaxport's floors is refused by name
# isort: on
from . import cache as _cache
from .backends.codegen import EmitError, emit
from .backends.model import JaxModel
from .backends.serialization import ExportedModel, export, load_exported
from .convert import from_exported_program, from_onnx, from_torch
from .errors import (
    ExportError,
    InputError,
    JaxportError,
    LoweringError,
    MaxBatchError,
    ModelFileError,
    SerializationError,
    UnsupportedDtypeError,
    UnsupportedOpsError,
)
from .generation import CausalLM, from_causal_lm
from .ops.registry import lowerings, register_lowering
from .precision import Precision
from .verification import verify

__version__ = "0.2.0"

_cache.configure()

__all__ = [
    "CausalLM", "EmitError", "ExportError", "ExportedModel", "InputError", "JaxModel", "JaxTensor",
    "JaxportError", "LoweringError", "MaxBatchError", "ModelFileError", "Precision", "SerializationError",
    "UnsupportedDtypeError", "UnsupportedOpsError", "disable_eager", "eager", "emit", "enable_eager", "export",
    "from_causal_lm", "from_exported_program", "from_onnx", "from_torch", "load_exported", "lowerings",
    "register_lowering", "verify",
]


def eager() -> contextlib.AbstractContextManager[None]:
    """Context manager: within it, `device="jax"` makes PyTorch tensors whose data are jax.Arrays.

    `torch.zeros(3, device="jax")`, `t.to("jax")` and `module.to("jax")` give `JaxTensor`s;
    every op on them runs jaxport's ATen lowerings on JAX.
    """
    from .tensor import eager as _eager  # on first use: it names torch's PrivateUse1 device "jax"

    return _eager()


def enable_eager() -> None:
    """`eager()` for the rest of the program (scripts, notebooks); `disable_eager()` ends it."""
    from .tensor import enable

    enable()


def disable_eager() -> None:
    """End what `enable_eager()` began."""
    from .tensor import disable

    disable()


#: Submodules `jaxport.<name>` reaches without an import of its own.
_SUBMODULES = frozenset({"compare", "distributed", "dynamo", "generation", "interop", "sharding", "train",
                         "verification"})

#: Names the top level had in 0.1, now in a submodule: they still work, with a DeprecationWarning,
#: until 0.3.
_MOVED = {
    **dict.fromkeys(["to_jax", "to_torch", "jax_fn", "torch_fn", "callback"], "interop"),
    **dict.fromkeys(["TrainState", "TrainStep", "train_step", "save_checkpoint", "load_checkpoint",
                     "load_into_torch"], "train"),
    **dict.fromkeys(["ShardingError", "shard", "shardings", "shard_batch", "data_parallel", "fsdp",
                     "tensor_parallel", "device_mesh"], "sharding"),
    "Emitted": "backends.codegen",
}


def __getattr__(name: str) -> Any:
    if name == "JaxTensor":  # imported on first use: it names torch's PrivateUse1 device "jax"
        from .tensor import JaxTensor

        return JaxTensor
    if name in _SUBMODULES:
        return importlib.import_module(f"{__name__}.{name}")
    if name in _MOVED:
        where = f"{__name__}.{_MOVED[name]}"
        warnings.warn(f"jaxport.{name} moved to {where}.{name}; the old name goes in jaxport 0.3",
                      DeprecationWarning, stacklevel=2)
        return getattr(importlib.import_module(where), name)
    raise AttributeError(f"module 'jaxport' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*__all__, *_SUBMODULES, "__version__"})
