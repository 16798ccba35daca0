"""jaxport: PyTorch (and ONNX) models as pure, jittable JAX functions."""

from . import distributed as distributed
from ._torch_utils import to_jax as to_jax
from ._torch_utils import to_torch as to_torch
from .backends.codegen import EmitError as EmitError
from .backends.codegen import Emitted as Emitted
from .backends.codegen import emit as emit
from .checkpoint import load_checkpoint as load_checkpoint
from .checkpoint import load_into_torch as load_into_torch
from .checkpoint import save_checkpoint as save_checkpoint
from .convert import from_exported_program as from_exported_program
from .convert import from_torch as from_torch
from .errors import ExportError as ExportError
from .errors import InputError as InputError
from .errors import JaxportError as JaxportError
from .errors import LoweringError as LoweringError
from .errors import ModelFileError as ModelFileError
from .errors import SerializationError as SerializationError
from .errors import UnsupportedDtypeError as UnsupportedDtypeError
from .errors import UnsupportedOpsError as UnsupportedOpsError
from .frontends.onnx import from_onnx as from_onnx
from .generation import CausalLM as CausalLM
from .generation import from_causal_lm as from_causal_lm
from .interop import callback as callback
from .interop import jax_fn as jax_fn
from .interop import torch_fn as torch_fn
from .model import JaxModel as JaxModel
from .serialization import ExportedModel as ExportedModel
from .serialization import export as export
from .serialization import load_exported as load_exported
from .sharding import ShardingError as ShardingError
from .sharding import data_parallel as data_parallel
from .sharding import device_mesh as device_mesh
from .sharding import fsdp as fsdp
from .sharding import shard as shard
from .sharding import shard_batch as shard_batch
from .sharding import shardings as shardings
from .sharding import tensor_parallel as tensor_parallel
from .training import TrainState as TrainState
from .training import TrainStep as TrainStep
from .training import train_step as train_step

__version__ = "0.1.0"


def eager():
    """Context manager: within it, `device="jax"` makes PyTorch tensors whose data are jax.Arrays.

    `torch.zeros(3, device="jax")`, `t.to("jax")` and `module.to("jax")` give `JaxTensor`s;
    every op on them runs jaxport's ATen lowerings on JAX.
    """
    from .frontends.eager import eager as _eager

    return _eager()


def enable_eager() -> None:
    """`eager()` for the rest of the program (scripts, notebooks); `disable_eager()` ends it."""
    from .frontends.eager import enable

    enable()


def disable_eager() -> None:
    from .frontends.eager import disable

    disable()


def __getattr__(name: str):
    # Imported on first use: the eager frontend names torch's PrivateUse1 device "jax".
    if name == "JaxTensor":
        from .frontends.eager import JaxTensor

        return JaxTensor
    raise AttributeError(f"module 'jaxport' has no attribute {name!r}")
