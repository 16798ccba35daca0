"""Train the tiny GPT-2 as one process of a multi-process run (or alone, as the reference).

    python -m tests.distributed.train_gpt2 --coordinator 127.0.0.1:PORT --num-processes 2 \
        --process-id I --local-devices 2 --mesh data=2,model=2 --rules fsdp+tp

Every process builds the same model from the same seed, takes the same global batches and
feeds its own rows of them. `--num-processes 1` runs without `jax.distributed`; with
`--mesh none` it is plain single-device training. Prints one JSON line with the losses.
"""

from __future__ import annotations

import argparse
import json


def _args():
    parser = argparse.ArgumentParser()
    parser.add_argument("--coordinator", default=None)
    parser.add_argument("--num-processes", type=int, default=1)
    parser.add_argument("--process-id", type=int, default=0)
    parser.add_argument("--local-devices", type=int, default=1)
    parser.add_argument("--mesh", default="none", help="data=2,model=2, or none")
    parser.add_argument("--rules", default="dp", help="dp, fsdp, tp or fsdp+tp")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--checkpoint", default=None, help="start from this safetensors checkpoint, read onto the mesh")
    return parser.parse_args()


def _rules(spec: str):
    from jaxport import sharding

    presets = {"dp": sharding.data_parallel(), "fsdp": sharding.fsdp(min_size=256),
               "tp": sharding.tensor_parallel()}
    rules = sharding.Rules()
    for name in spec.split("+"):
        rules = rules + presets[name]
    return rules


def main() -> None:
    args = _args()
    import jax

    from jaxport import distributed

    if args.num_processes > 1:
        distributed.initialize(args.coordinator, args.num_processes, args.process_id,
                               local_device_count=args.local_devices, initialization_timeout=60)
    else:
        jax.config.update("jax_num_cpu_devices", args.local_devices)

    import optax

    import jaxport
    from jaxport import sharding
    from tests.distributed.gpt2 import BATCH, batches, convert, lm_loss, tiny_gpt2
    from tests.distributed.reads import count_checkpoint_reads

    model = convert(tiny_gpt2())
    step = jaxport.train.train_step(model, lm_loss, optax.adam(3e-3))
    mesh, rows, read = None, slice(0, BATCH), []
    if args.mesh != "none":
        axes = {name: int(size) for name, size in (part.split("=") for part in args.mesh.split(","))}
        mesh = sharding.device_mesh(**axes)
        rows = distributed.local_rows(mesh, BATCH)
    if args.checkpoint:
        count_checkpoint_reads(read)
        state = step.init(0, params=args.checkpoint, mesh=mesh, rules=_rules(args.rules))
    else:
        state = step.init(0)
        if mesh is not None:
            state = sharding.shard(state, mesh, _rules(args.rules))
    losses = []
    for tokens in batches(args.steps):
        local = tokens[rows]  # what this process's data loader would have read
        batch = (local,) if mesh is None else sharding.shard_batch((local,), mesh)
        state, metrics = step(state, batch)
        losses.append(float(metrics["loss"]))
    print(json.dumps({
        "process": jax.process_index(), "processes": jax.process_count(), "devices": jax.device_count(),
        "rows": [rows.start, rows.stop], "losses": losses, "sharded": sharding.describe(state),
        "fully_addressable": all(a.is_fully_addressable for a in jax.tree.leaves(state.params)),
        "elements_read": sum(read), "elements": sum(a.size for a in jax.tree.leaves(state.params)),
    }), flush=True)
    if args.num_processes > 1:
        jax.distributed.shutdown()


if __name__ == "__main__":
    main()
