"""`TrainState`: everything a training step reads and writes, as one pytree."""

from __future__ import annotations

import dataclasses
from typing import Any

import jax


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class TrainState:
    """Everything a training step reads and writes, as one pytree.

    `params` are the trainable parameters, `buffers` everything else the model reads
    (BatchNorm running statistics, frozen parameters), both keyed by `state_dict`
    name; `opt_state` is the optax state; `rng` the key this run's dropout masks
    derive from (step `n` uses `fold_in(rng, n)`); `step` counts updates.
    """

    params: dict[str, jax.Array]
    buffers: dict[str, jax.Array]
    opt_state: Any
    rng: jax.Array
    step: jax.Array

    def model_params(self) -> dict[str, jax.Array]:
        """`params` and `buffers` together: what `JaxModel.apply` takes."""
        return {**self.buffers, **self.params}
