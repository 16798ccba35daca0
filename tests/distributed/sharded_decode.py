"""Greedy generation of a tiny Llama on one device and tensor-parallel over 8 CPU devices.

    python -m tests.distributed.sharded_decode

Prints one JSON object: the tokens of each run, the number of devices, and how the sharded
run placed a query projection and the cache's keys.
"""

from __future__ import annotations

import json

import jax

jax.config.update("jax_num_cpu_devices", 8)  # before JAX starts its CPU backend

import numpy as np  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402

import jaxport  # noqa: E402

#: Eight heads of which four share keys and values, split over a "model" axis of 4.
CONFIG = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=8,
              num_key_value_heads=4, vocab_size=100)
Q_PROJ = "model.model.layers.0.self_attn.q_proj.weight"


def main() -> None:
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(transformers.LlamaConfig(**CONFIG)).eval()
    ids = np.array([[11, 12, 13, 14, 15, 16], [0, 0, 21, 22, 23, 24], [0, 0, 0, 0, 31, 32], [41, 42, 43, 44, 45, 46]])
    mask = (ids != 0).astype(np.int32)
    lm = jaxport.from_causal_lm(model, max_length=30, max_batch=4)
    single = np.asarray(lm.generate(ids, mask, max_new_tokens=24, pad_token_id=0))

    mesh = jaxport.sharding.device_mesh(data=2, model=4)
    params = jaxport.sharding.shard(lm.params, mesh, jaxport.sharding.tensor_parallel())
    batch = jaxport.sharding.shard_batch({"ids": ids, "mask": mask}, mesh)
    sharded = np.asarray(lm.generate(batch["ids"], batch["mask"], max_new_tokens=24, pad_token_id=0, params=params))
    cache = lm.init_cache(4)
    _, cache = lm.prefill(params, cache, batch["ids"], batch["mask"])
    print(json.dumps({
        "devices": len(jax.devices()),
        "single": single.tolist(),
        "sharded": sharded.tolist(),
        "q_proj": str(params[Q_PROJ].sharding.spec),
        "keys_replicated": cache["layers"][0]["keys"].sharding.is_fully_replicated,
    }))


if __name__ == "__main__":
    main()
