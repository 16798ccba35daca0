"""Training a converted model in JAX, and getting the weights back to PyTorch.

    state        `TrainState`: params, buffers, optimizer state, RNG key and step as one pytree
    step         `train_step`: one jitted optax step (BatchNorm buffers and dropout keys carried),
                 `MixedPrecision`: float32 master weights and loss scaling
    checkpoint   `save_checkpoint` / `load_checkpoint` (safetensors), `load_into_torch`

Placement on a device mesh is `jaxport.sharding`; multi-process runs `jaxport.distributed`.
"""

from .checkpoint import load_checkpoint, load_into_torch, save_checkpoint
from .state import TrainState
from .step import MixedPrecision, ScaledState, TrainStep, train_step

__all__ = ["MixedPrecision", "ScaledState", "TrainState", "TrainStep", "load_checkpoint", "load_into_torch",
           "save_checkpoint", "train_step"]
