"""Multi-process training: one Python process per host (or per GPU), one global mesh.

    jaxport.distributed.initialize()            # before anything else touches JAX
    mesh = jaxport.sharding.device_mesh(data=-1)         # every device of every process
    state = jaxport.sharding.shard(step.init(0), mesh, jaxport.sharding.fsdp())
    rows = jaxport.distributed.local_rows(mesh, global_batch_size)
    for tokens in loader:                       # each process loads only its `rows`
        state, metrics = step(state, jaxport.sharding.shard_batch((tokens[rows],), mesh))

Every process runs the same program: it converts the same model (same seed, same
weights), builds the same mesh, and takes part in every jitted step; JAX's runtime
moves the data between processes (gloo on CPU, NCCL on GPU, ICI/DCN on TPU).
See docs/distributed.md for launching.
"""

from __future__ import annotations

import os
from typing import Any

import jax
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from .sharding import ShardingError, auto_axes


def _env_int(name: str) -> int | None:
    value = os.environ.get(name)
    return int(value) if value not in (None, "") else None


def initialize(coordinator_address: str | None = None, num_processes: int | None = None,
               process_id: int | None = None, *, local_device_count: int | None = None,
               **kwargs: Any) -> None:
    """Join this process to the others: `jax.distributed.initialize` with CPU collectives on.

    Arguments left out come from `JAX_COORDINATOR_ADDRESS` (host:port of process 0),
    `JAX_NUM_PROCESSES` and `JAX_PROCESS_ID`, and otherwise from JAX's own cluster
    detection (SLURM, Open MPI, Cloud TPU), so the same script runs under any launcher.
    `local_device_count` splits this process's CPU into that many devices (for testing
    a mesh on one machine; GPUs and TPUs ignore it). Cross-process collectives on CPU
    use gloo; must run before any other JAX call, like `jax.distributed.initialize`.
    """
    if local_device_count is not None:
        jax.config.update("jax_num_cpu_devices", local_device_count)
    if not jax.config.jax_cpu_collectives_implementation:
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
    num_processes = num_processes if num_processes is not None else _env_int("JAX_NUM_PROCESSES")
    process_id = process_id if process_id is not None else _env_int("JAX_PROCESS_ID")
    jax.distributed.initialize(coordinator_address, num_processes, process_id, **kwargs)


def local_rows(mesh: Mesh, global_batch_size: int, axis: str | tuple[str, ...] = "data") -> slice:
    """The rows of each global batch this process feeds to `shard_batch`.

    The mesh decides which devices hold which rows (processes are not always in mesh
    order), so ask it rather than assume `process_index * size`. In a single-process
    run this is every row.
    """
    sharding = NamedSharding(auto_axes(mesh), PartitionSpec(axis))
    indices = sharding.addressable_devices_indices_map((global_batch_size,)).values()
    blocks = sorted({index[0].indices(global_batch_size)[:2] for index in indices})
    for (_, stop), (start, _) in zip(blocks, blocks[1:]):
        if stop != start:
            raise ShardingError(
                f"process {jax.process_index()} holds rows {blocks} of the batch, not one contiguous run: "
                "build the global batch with jax.make_array_from_callback instead"
            )
    return slice(blocks[0][0], blocks[-1][1])


__all__ = ["initialize", "local_rows"]
