"""Train the tiny GPT-2 for a few Adam steps on one device and sharded over 8 CPU devices.

    python -m tests.distributed.sharded_gpt2 [MODE ...]     (default: every mode)

Prints one JSON object: per mode, the losses, the placement of every sharded parameter
before and after training, the shape of one device's piece of a few weights, and
whether the optimizer state, key and step count are placed as expected.
"""

from __future__ import annotations

import copy
import json
import sys
import time

import jax

jax.config.update("jax_num_cpu_devices", 8)  # before JAX starts its CPU backend

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402
from jax.sharding import NamedSharding  # noqa: E402

import jaxport  # noqa: E402
from jaxport import sharding  # noqa: E402
from tests.distributed.gpt2 import batches, convert, lm_loss, tiny_gpt2  # noqa: E402

STEPS = 5
DP, TP = {"data": 8}, {"data": 2, "model": 4}
FSDP = sharding.fsdp(min_size=256)  # the tiny model's matrices have 1,024 to 4,096 values
# mode -> (mesh axes, rules, how the state is placed); None: one device, nothing placed.
#   state: shard(step.init(), ...)   model: shard(model, ...), then step.init()
MODES = {
    "single": None,
    "dp": (DP, sharding.data_parallel(), "state"),
    "fsdp": (DP, FSDP, "state"),
    "tp": (TP, sharding.tensor_parallel(), "state"),
    "fsdp_tp": (TP, FSDP + sharding.tensor_parallel(), "state"),
    "fsdp_tp_model": (TP, sharding.tensor_parallel() + FSDP, "model"),
}
WATCHED = ["transformer.h.0.attn.c_attn.weight", "transformer.h.0.mlp.c_proj.weight", "transformer.wte.weight",
           "transformer.h.0.ln_1.weight"]


def _placed_state(model, axes, rules, how):
    mesh = sharding.device_mesh(**axes)
    if how == "model":
        model = sharding.shard(copy.copy(model), mesh, rules)  # a copy: the next modes want the original
        return jaxport.train.train_step(model, lm_loss, optax.adam(3e-3)), mesh, None
    step = jaxport.train.train_step(model, lm_loss, optax.adam(3e-3))
    # Copies for the state the step donates (init copies too now; this keeps the script independent of it).
    return step, mesh, sharding.shard(step.init(0, params=jax.tree.map(jnp.copy, model.params)), mesh, rules)


def _placement(state) -> dict:
    """Adam's moments placed like their parameters; its count, the key and the step replicated."""
    adam = state.opt_state[0]
    return {
        "mirrored": all(adam.mu[k].sharding == v.sharding and adam.nu[k].sharding == v.sharding
                        for k, v in state.params.items()),
        "count_replicated": bool(adam.count.sharding.is_fully_replicated),
        "rng_replicated": bool(state.rng.sharding.is_fully_replicated),
        "step_replicated": bool(state.step.sharding.is_fully_replicated),
        "all_named": all(isinstance(a.sharding, NamedSharding) for a in jax.tree.leaves(state)),
        "local_shapes": {k: list(state.params[k].addressable_shards[0].data.shape) for k in WATCHED},
        "replicated": {k: bool(state.params[k].sharding.is_fully_replicated) for k in WATCHED},
    }


def _count_traces(step) -> list[int]:
    """Count how often the step is traced (each trace is a compilation)."""
    traces, step_fn = [0], step._step

    def traced(*args):
        traces[0] += 1
        return step_fn(*args)

    step._step = traced
    return traces


def run(mode: str, model) -> dict:
    start = time.perf_counter()
    mesh = None
    if MODES[mode] is None:
        step = jaxport.train.train_step(model, lm_loss, optax.adam(3e-3))
        state = step.init(0, params=jax.tree.map(jnp.copy, model.params))
    else:
        step, mesh, state = _placed_state(model, *MODES[mode])
        state = step.init(0) if state is None else state
    before = sharding.describe(state)
    traces = _count_traces(step)
    losses = []
    for tokens in batches(STEPS):
        batch = (tokens,) if mesh is None else sharding.shard_batch((tokens,), mesh)
        state, metrics = step(state, batch)
        losses.append(float(metrics["loss"]))
    result = {
        "losses": losses,
        "seconds": time.perf_counter() - start,
        "compiles": traces[0],  # a state placed right the first time: one
        "sharded_before": before,
        "sharded_after": sharding.describe(state),
        "devices": len(state.params[WATCHED[0]].sharding.device_set),
        "weights": {k: np.asarray(state.params[k]).tolist() for k in WATCHED},
    }
    if mesh is not None:
        result.update(_placement(state))
    return result


def main(modes: list[str]) -> None:
    model = convert(tiny_gpt2())
    print(json.dumps({mode: run(mode, model) for mode in modes or list(MODES)}))


if __name__ == "__main__":
    main(sys.argv[1:])
