"""A tiny Llama's checkpoint read straight onto a (data=2, model=4) mesh of 8 CPU devices.

    python -m tests.distributed.sharded_checkpoint

Saves the model with `save_pretrained` (several shards), converts it on `meta`, loads the
directory tensor-parallel (`load_weights(dir, mesh=, rules=)`) while recording the size of every
read, generates, and starts a training state from the same checkpoint on the mesh. Prints one
JSON object: the tokens of the one-device and sharded runs, the placements, the largest read
against the largest shard and the largest tensor, whether a training step ran.
"""

from __future__ import annotations

import json
import math
import tempfile

import jax

jax.config.update("jax_num_cpu_devices", 8)  # before JAX starts its CPU backend

import numpy as np  # noqa: E402
import optax  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402

import jaxport  # noqa: E402
from jaxport import sharding  # noqa: E402
from tests.distributed.reads import count_checkpoint_reads  # noqa: E402

CONFIG = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=8,
              num_key_value_heads=4, vocab_size=128, tie_word_embeddings=False)
Q_PROJ = "model.model.layers.0.self_attn.q_proj.weight"


def main() -> None:
    torch.manual_seed(0)
    config = transformers.LlamaConfig(**CONFIG)
    model = transformers.LlamaForCausalLM(config).eval()
    ids = np.array([[11, 12, 13, 14, 15, 16], [21, 22, 23, 24, 25, 26]])
    single = np.asarray(jaxport.from_causal_lm(model, max_length=20, max_batch=2).generate(ids, max_new_tokens=8))
    with tempfile.TemporaryDirectory() as directory:
        model.save_pretrained(directory, max_shard_size="100KB")
        reads = []
        count_checkpoint_reads(reads)
        with torch.device("meta"):
            meta = transformers.LlamaForCausalLM(config).eval()
        lm = jaxport.from_causal_lm(meta, max_length=20, max_batch=2)
        mesh = sharding.device_mesh(data=2, model=4)
        rules = sharding.tensor_parallel(embeddings="vocab")
        lm.load_weights(directory, mesh=mesh, rules=rules)
        sharded = np.asarray(lm.generate(ids, max_new_tokens=8))
        largest_shard = max(math.prod(shard.data.shape) for a in lm.params.values() for shard in a.addressable_shards)
        largest_tensor = max(math.prod(a.shape) for a in lm.params.values())

        # training from the same checkpoint: the state's params read onto the mesh
        with torch.device("meta"):
            module = transformers.LlamaForCausalLM(transformers.LlamaConfig(**CONFIG, use_cache=False)).eval()
        jm = jaxport.from_torch(module, (torch.zeros(2, 6, dtype=torch.long, device="meta"),))

        def loss(out, batch):
            logits = out["logits"]
            return -jax.numpy.mean(jax.nn.log_softmax(logits)[..., 0])

        step = jaxport.train.train_step(jm, loss, optax.sgd(1e-2))
        state = step.init(0, directory, mesh=mesh, rules=rules)
        batch = sharding.shard_batch((ids,), mesh)
        state, metrics = step(state, batch)
    print(json.dumps({
        "devices": len(jax.devices()),
        "single": single.tolist(),
        "sharded": sharded.tolist(),
        "q_proj": str(lm.params[Q_PROJ].sharding.spec),
        "q_proj_shard": list(lm.params[Q_PROJ].addressable_shards[0].data.shape),
        "largest_read": max(reads),
        "largest_shard": largest_shard,
        "largest_tensor": largest_tensor,
        "state_q_proj": str(state.params["model.layers.0.self_attn.q_proj.weight"].sharding.spec),
        "trained": bool(np.isfinite(float(metrics["loss"]))),
    }))


if __name__ == "__main__":
    main()
