"""Peak host memory from conversion through generate, against the weights' size, for Llama-shaped bfloat16 checkpoints.

    python benchmarks/bench_memory.py [--sizes 1.1b 3b] [--paths module directory sharded] [--cores all]

Each size's checkpoint is made once, in `build/bench_memory/<size>/` as `save_pretrained` lays one
out (its shards of at most 1 GB, their index, the config), from seeded random weights. Each row
runs in a process of its own (`_report.measured_apart`): the imports, then

- module: `AutoModelForCausalLM.from_pretrained(dir, dtype=torch.bfloat16)`,
  `from_causal_lm(model)`, the torch model dropped;
- directory: the model built on `meta`, `from_causal_lm`, `load_weights(dir)`;
- sharded: the same over 4 host CPU devices, `load_weights(dir, mesh=, rules=tensor_parallel(...))`
  reading each device's slice;

then greedy decoding of four tokens (`stream`: one compiled program, as `generate`'s; the time to
its first token is the time to compile it and run the prefill). The row records the peak
resident memory (VmHWM) above what the process held after its imports, over the weights' bytes;
the seconds to load (checkpoint to a model with weights) and to the first token after that
(compiling included); and the tokens, which every path must share with the module path. Rows
accumulate, stamped, in `benchmarks/results/memory.jsonl`.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import subprocess
import sys
import time

import _report
import _setup

RESULTS = os.path.join(os.path.dirname(__file__), "results", "memory.jsonl")
BUILD = os.path.join(_report.ROOT, "build", "bench_memory")
#: TinyLlama's shape (1.1 B parameters) and Llama 3.2 3B's (3.2 B, its embedding tied).
SIZES = {
    "1.1b": dict(hidden_size=2048, intermediate_size=5632, num_hidden_layers=22, num_attention_heads=32,
                 num_key_value_heads=4, vocab_size=32000, tie_word_embeddings=False),
    "3b": dict(hidden_size=3072, intermediate_size=8192, num_hidden_layers=28, num_attention_heads=24,
               num_key_value_heads=8, vocab_size=128256, tie_word_embeddings=True),
}
PATHS = ("module", "directory", "sharded")
PROMPT = [[1, 450, 4996, 17354, 1701, 432, 17204, 975]]
MAX_LENGTH = 64
SHARD_BYTES = 2**30


def _config(size: str):
    import transformers

    return transformers.LlamaConfig(**SIZES[size], max_position_embeddings=4096, torch_dtype="bfloat16")


def _make_checkpoint(size: str, directory: str) -> None:
    """Seeded random bfloat16 weights in `save_pretrained`'s layout, written shard by shard."""
    import safetensors.torch
    import torch
    import transformers

    config = _config(size)
    with torch.device("meta"):
        model = transformers.LlamaForCausalLM(config)
    names = {name: tensor for name, tensor in model.state_dict().items()}
    if config.tie_word_embeddings:
        names.pop("lm_head.weight", None)
    generator = torch.Generator().manual_seed(0)
    os.makedirs(directory, exist_ok=True)
    shards, current, used = [], {}, 0
    for name, meta in names.items():
        if "norm" in name:
            tensor = torch.ones(meta.shape, dtype=torch.bfloat16)
        else:
            tensor = (torch.randn(meta.shape, generator=generator) * 0.02).to(torch.bfloat16)
        size_bytes = tensor.numel() * 2
        if current and used + size_bytes > SHARD_BYTES:
            shards.append(current)
            current, used = {}, 0
        current[name], used = tensor, used + size_bytes
    shards.append(current)
    weight_map, total = {}, 0
    for i, shard in enumerate(shards):
        file = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        safetensors.torch.save_file(shard, os.path.join(directory, file), metadata={"format": "pt"})
        for name, tensor in shard.items():
            weight_map[name] = file
            total += tensor.numel() * 2
    with open(os.path.join(directory, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f)
    config.save_pretrained(directory)


def _status(key: str) -> float:
    """A /proc/self/status field in bytes (VmRSS now, VmHWM the peak)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    raise KeyError(key)


def _worker(size: str, path: str, directory: str) -> dict:
    import jax
    import numpy as np
    import torch
    import transformers

    import jaxport
    from jaxport import sharding

    config = _config(size)
    gc.collect()
    base = _status("VmRSS")
    start = time.perf_counter()
    if path == "module":
        model = transformers.AutoModelForCausalLM.from_pretrained(directory, dtype=torch.bfloat16).eval()
        lm = jaxport.from_causal_lm(model, max_length=MAX_LENGTH)
        del model
        gc.collect()
    else:
        with torch.device("meta"):
            meta = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16).eval()
        lm = jaxport.from_causal_lm(meta, max_length=MAX_LENGTH)
        if path == "directory":
            lm.load_weights(directory)
        else:
            mesh = sharding.device_mesh(model=len(jax.devices()))
            lm.load_weights(directory, mesh=mesh, rules=sharding.tensor_parallel(embeddings="vocab"))
    jax.block_until_ready(lm.params)
    loaded = time.perf_counter()
    weights = sum(a.size * a.dtype.itemsize for a in jax.tree.leaves(lm.params))
    ids = np.asarray(PROMPT, np.int32)
    steps = lm.stream(ids, max_new_tokens=4, do_sample=False)  # one program: prefill and the decode loop
    tokens = [next(steps)]
    first = time.perf_counter()
    tokens += list(steps)
    peak = _status("VmHWM")
    return {"weights_gib": weights / 2**30, "parameters_b": sum(math.prod(a.shape) for a in lm.params.values()) / 1e9,
            "base_gib": base / 2**30, "peak_above_base_gib": (peak - base) / 2**30, "ratio": (peak - base) / weights,
            "after_gib": (_status("VmRSS") - base) / 2**30, "load_s": loaded - start, "first_token_s": first - loaded,
            "devices": len(jax.devices()), "tokens": np.stack(tokens, axis=-1).tolist()}


def main() -> None:
    parser = _setup.parser(__doc__, runs=1)
    parser.add_argument("--sizes", nargs="+", default=list(SIZES), choices=list(SIZES))
    parser.add_argument("--paths", nargs="+", default=list(PATHS), choices=list(PATHS))
    parser.add_argument("--worker", nargs=3, metavar=("SIZE", "PATH", "DIR"), help=argparse.SUPPRESS)
    parser.add_argument("--make", nargs=2, metavar=("SIZE", "DIR"), help=argparse.SUPPRESS)
    opts = parser.parse_args()
    if opts.make:
        _make_checkpoint(*opts.make)
        return
    if opts.worker:
        print(json.dumps({**_worker(*opts.worker), "stamp": _report.stamp()}))  # its own XLA_FLAGS
        return
    rows = []
    for size in opts.sizes:
        directory = os.path.join(BUILD, size)
        if not os.path.exists(os.path.join(directory, "config.json")):
            subprocess.run([sys.executable, __file__, "--make", size, directory, "--cores", opts.cores], check=True)
        for path in opts.paths:
            env = dict(os.environ)
            if path == "sharded":
                env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=4").strip()
            command = [sys.executable, __file__, "--worker", size, path, directory, "--cores", opts.cores]
            row = _report.measured_apart(command, {"size": size, "path": path}, RESULTS, timeout=3600, env=env)
            rows.append(row)
            print(json.dumps({k: v for k, v in row.items() if k != "stamp"}), flush=True)
    table = ["| model | path | weights (GiB) | peak above imports (GiB) | over the weights | load (s) "
             "| first token (s) | same tokens as the module path |", "|---|---|---:|---:|---:|---:|---:|---|"]
    for row in rows:
        if "error" in row:
            table.append(f"| {row['size']} | {row['path']} | | | | | | error: {row['error']} |")
            continue
        module = next((r for r in rows if r["size"] == row["size"] and r["path"] == "module" and "tokens" in r), None)
        same = "yes" if module and module["tokens"] == row["tokens"] else ("no" if module else "?")
        table.append(f"| Llama {row['size']} | {row['path']} | {row['weights_gib']:.2f} | {row['peak_above_base_gib']:.2f} "
                     f"| **{row['ratio']:.2f}x** | {row['load_s']:.1f} | {row['first_token_s']:.1f} | {same} |")
    _report.publish("\n".join(table), opts.markdown, "peak resident memory (VmHWM) of each row's own process above "
                    "its RSS after imports; bfloat16 weights; greedy decoding of 4 tokens after an 8-token prompt",
                    [r["stamp"] for r in rows])


if __name__ == "__main__":
    main()
