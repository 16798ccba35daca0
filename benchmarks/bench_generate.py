"""Greedy generation with a KV cache: jaxport against Hugging Face's `generate`, on the same cores.

    python benchmarks/bench_generate.py [--batches 1 8] [--runs 5] [--cores 1|N|all] [--markdown out.md] [--small]

A Llama-style model of about 100 M parameters (hidden 768, 12 layers, 12 heads sharing 4 key/value
heads, MLP 2048, vocabulary 32,000) built from its config with random weights; a 64-token
prompt and 64 new tokens (EOS off, so every run makes all of them). Backends, in one process,
taking turns run by run:

- jaxport: `from_causal_lm` then `CausalLM.generate` (prefill and a `lax.while_loop` of
  decode steps, one jitted function);
- PyTorch eager: `model.generate` with its default dynamic cache;
- torch.compile: `model.generate` with a static cache and the model's forward compiled
  (`torch.compile(fullgraph=True)`), as transformers recommends for fast decoding.

Time to first token is `generate` with `max_new_tokens=1` (prefill and one token); decode
tokens/s counts the other 63 steps' tokens, batch included, over the time the full run takes
beyond that; "CPUs" is the full run's CPU time over its wall time. Peak memory (`--memory`, Linux) is what each backend adds to a fresh process's
resident memory at its peak once the PyTorch model is built: converting or compiling, then
generating 1 and 64 tokens.
"""

from __future__ import annotations

import _setup  # first: pins the cores before JAX and torch start

# isort: split
import argparse
import json
import statistics
import subprocess
import sys
import time

import numpy as np
import torch
import transformers

import jaxport
from _report import publish

PROMPT, NEW = 64, 64
CONFIG = dict(hidden_size=768, intermediate_size=2048, num_hidden_layers=12, num_attention_heads=12,
              num_key_value_heads=4, vocab_size=32000, max_position_embeddings=2048)
SMALL = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, vocab_size=1000, max_position_embeddings=256)
BACKENDS = ("jaxport", "eager", "compile")


def build(small: bool) -> transformers.PreTrainedModel:
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**(SMALL if small else CONFIG))).eval()
    model.generation_config.eos_token_id = None  # every run makes all NEW tokens
    model.generation_config.pad_token_id = 0
    return model


def prompt(batch: int, vocab: int) -> torch.Tensor:
    return torch.randint(3, vocab, (batch, PROMPT), generator=torch.Generator().manual_seed(batch))


def runners(model, batch: int, backends) -> dict:
    """{backend: f(max_new_tokens) -> tokens} for one batch size, warmed up (compiled)."""
    ids = prompt(batch, model.config.vocab_size)
    mask = torch.ones_like(ids)
    out = {}
    if "jaxport" in backends:
        lm = jaxport.from_causal_lm(model, max_length=PROMPT + NEW, max_batch=batch)
        jids, jmask = ids.numpy().astype(np.int32), mask.numpy().astype(np.int32)
        out["jaxport"] = lambda n: np.asarray(lm.generate(jids, jmask, max_new_tokens=n))
    if "eager" in backends:
        def eager(n):
            with torch.no_grad():
                return model.generate(ids, attention_mask=mask, do_sample=False, max_new_tokens=n).numpy()
        out["eager"] = eager
    if "compile" in backends:
        compiled = torch.compile(model.forward, fullgraph=True)

        def static(n):
            original = model.forward
            model.forward = compiled
            try:
                with torch.no_grad():
                    return model.generate(ids, attention_mask=mask, do_sample=False, max_new_tokens=n,
                                          cache_implementation="static").numpy()
            finally:
                model.forward = original
        out["compile"] = static
    for fn in out.values():  # compile both lengths' programs before timing
        fn(1)
        fn(NEW)
    return out


def measure(model, batch: int, runs: int, backends) -> dict:
    fns = runners(model, batch, backends)
    tokens = {name: fn(NEW) for name, fn in fns.items()}
    first, full, cpu = {n: [] for n in fns}, {n: [] for n in fns}, {n: [] for n in fns}
    for _ in range(runs):  # backends take turns, run by run
        for name, fn in fns.items():
            start = time.perf_counter()
            fn(1)
            first[name].append(time.perf_counter() - start)
            start, start_cpu = time.perf_counter(), time.process_time()
            fn(NEW)
            full[name].append(time.perf_counter() - start)
            cpu[name].append(time.process_time() - start_cpu)
    rows = {}
    for name in fns:
        ttft, total = statistics.median(first[name]), statistics.median(full[name])
        rows[name] = {"ttft_ms": ttft * 1e3, "decode_tok_s": batch * (NEW - 1) / (total - ttft),
                      "total_s": total, "cpus": statistics.median(cpu[name]) / total}
    reference = tokens.get("eager")
    for name in fns:
        rows[name]["same_tokens"] = None if reference is None else bool(np.array_equal(tokens[name], reference))
    return rows


def _status_mib(field: str) -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field + ":")) / 1024


def peak_memory(backend: str, batch: int, small: bool) -> float:
    """Peak resident MiB a fresh process adds once its model is built: converting or compiling,
    and generating at both lengths (Linux: the high-water mark is reset after building)."""
    command = [sys.executable, __file__, "--peak", backend, "--batches", str(batch), "--cores", str(_setup.THREADS)]
    command += ["--small"] if small else []
    proc = subprocess.run(command, capture_output=True, text=True, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])["peak_mib"]


def main() -> None:
    parser = _setup.parser(__doc__, runs=5)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--backends", nargs="+", default=list(BACKENDS), choices=BACKENDS)
    parser.add_argument("--memory", action="store_true", help="also measure each backend's peak memory")
    parser.add_argument("--small", action="store_true", help="a tiny model, to check the script quickly")
    parser.add_argument("--peak", choices=BACKENDS, help=argparse.SUPPRESS)
    opts = parser.parse_args()
    model = build(opts.small)
    if opts.peak:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # resets the high-water mark to the current resident size
        built = _status_mib("VmRSS")
        runners(model, opts.batches[0], [opts.peak])
        print(json.dumps({"peak_mib": _status_mib("VmHWM") - built}))
        return
    params = sum(p.numel() for p in model.parameters())
    lines = ["| batch | backend | time to first token (ms) | decode tokens/s | vs PyTorch eager | CPUs "
             "| same tokens as eager" + (" | peak memory beyond the model (MiB)" if opts.memory else "") + " |",
             "|---:|---|---:|---:|---:|---:|---|" + ("---:|" if opts.memory else "")]
    for batch in opts.batches:
        rows = measure(model, batch, opts.runs, opts.backends)
        base = rows.get("eager", {}).get("decode_tok_s")
        for name, row in rows.items():
            speedup = f"{row['decode_tok_s'] / base:.2f}x" if base else "-"
            memory = f" | {peak_memory(name, batch, opts.small):,.0f}" if opts.memory else ""
            lines.append(f"| {batch} | {name} | {row['ttft_ms']:.1f} | {row['decode_tok_s']:.1f} | {speedup} | "
                         f"{row['cpus']:.2f} | {row['same_tokens']}{memory} |")
    cache_mib = 2 * model.config.num_hidden_layers * model.config.num_key_value_heads * (PROMPT + NEW) * (
        model.config.hidden_size // model.config.num_attention_heads) * 4 / 2**20
    timing = (f"Llama-style, {params / 1e6:.0f} M parameters, prompt {PROMPT}, {NEW} new tokens, greedy; "
              f"median of {opts.runs} runs; jaxport's cache {cache_mib:.1f} MiB per row, allocated once")
    publish("\n".join(lines), opts.markdown, timing)


if __name__ == "__main__":
    main()
