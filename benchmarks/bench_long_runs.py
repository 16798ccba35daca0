"""Long runs in one process: resident memory stays flat and nothing compiles after warm-up.

    python benchmarks/bench_long_runs.py [--cores 1|N|all] [--runs generate model eager_training]
        [--short] [--results benchmarks/results/long_runs.jsonl]

Three workloads, each in a process of its own (so one's memory does not count against another's):

- generate: `jaxport.from_causal_lm` of a small Llama (the test zoo's shape, random weights),
  then 2,000 `generate` calls of 50 new tokens each (100,000 tokens), every call a new prompt
  of the same length;
- model: `jaxport.from_torch` of the test zoo's BERT, then 10,000 calls of the converted model
  (`jm(...)`) on new inputs of the same shape;
- eager_training: 2,000 steps of an MLP trained with SGD on the eager frontend (`device="jax"`,
  torch autograd and optimizer);
- settings: 1,000 sampled `generate` calls of the same small Llama, each with new settings, as a
  server taking users' settings sees them: temperature, top-k, top-p, min-p, repetition penalty
  and max_new_tokens (1 to 50) drawn afresh every call.

For each: resident memory (`VmRSS`, after `gc.collect()`) once the warm-up calls are done (the
first tenth) and at the end, and the number of XLA compilations (JAX's backend-compile events)
during the warm-up and after it. `--short` runs a tenth of each (what `make test` runs, through
tests/test_long_runs.py). Rows are appended to `--results`, stamped.
"""

from __future__ import annotations

import _setup  # first: pins the cores before JAX and torch start

# isort: split
import argparse
import gc
import json
import os
import subprocess
import sys
import time

import jax
import numpy as np
import torch
from tests.support import zoo

import jaxport
from _report import stamp

RESULTS = os.path.join(os.path.dirname(__file__), "results", "long_runs.jsonl")
RUNS = ("generate", "model", "eager_training", "settings")
#: Calls of each workload in a full run; --short runs a tenth.
CALLS = {"generate": 2000, "model": 10000, "eager_training": 2000, "settings": 1000}
NEW_TOKENS = 50


def resident_mib() -> float:
    gc.collect()
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) / 1024


class Compilations:
    """Counts XLA compilations (JAX's backend-compile events) from its creation on."""

    def __init__(self):
        self.count = 0
        jax.monitoring.register_event_duration_secs_listener(self._heard)

    def _heard(self, event: str, duration: float, **_) -> None:
        if event == "/jax/core/compile/backend_compile_duration":
            self.count += 1


def _small_llama():
    """The test zoo's Llama converted for one row of a 16-token prompt and `NEW_TOKENS` more."""
    module, _, _ = zoo.llama()
    return jaxport.from_causal_lm(module, max_length=16 + NEW_TOKENS, max_batch=1)


def _generate_workload():
    lm = _small_llama()
    prompts = np.random.default_rng(0)

    def call(i: int) -> None:
        ids = prompts.integers(3, 1000, (1, 16), dtype=np.int32)
        np.asarray(lm.generate(ids, max_new_tokens=NEW_TOKENS, eos_token_id=[], pad_token_id=0))

    return call


def _model_workload():
    module, _, kwargs = zoo.bert()
    model = jaxport.from_torch(module, (), kwargs)
    rng = np.random.default_rng(0)

    def call(i: int) -> None:
        ids = rng.integers(0, 1000, kwargs["input_ids"].shape, dtype=np.int64)
        jax.block_until_ready(model(input_ids=ids, attention_mask=kwargs["attention_mask"].numpy()))

    return call


def _eager_training_workload():
    torch.manual_seed(0)
    with jaxport.eager():
        model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 8)).to("jax")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    generator = torch.Generator().manual_seed(0)

    def call(i: int) -> None:
        x, y = torch.randn(16, 32, generator=generator), torch.randn(16, 8, generator=generator)
        with jaxport.eager():
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x.to("jax")), y.to("jax"))
            loss.backward()
            optimizer.step()
            loss.item()

    return call


def _settings_workload():
    lm = _small_llama()
    rng = np.random.default_rng(1)

    def call(i: int) -> None:
        ids = rng.integers(3, 1000, (1, 16), dtype=np.int32)
        settings = dict(temperature=float(rng.uniform(0.3, 1.5)), top_k=int(rng.integers(1, 200)),
                        top_p=float(rng.uniform(0.5, 0.99)), min_p=float(rng.uniform(0.0, 0.2)),
                        repetition_penalty=float(rng.uniform(1.05, 1.5)),
                        max_new_tokens=int(rng.integers(1, NEW_TOKENS + 1)))
        np.asarray(lm.generate(ids, do_sample=True, eos_token_id=[], pad_token_id=0, rng=jax.random.key(i),
                               **settings))

    return call


WORKLOADS = {"settings": _settings_workload, "generate": _generate_workload, "model": _model_workload, "eager_training": _eager_training_workload}


def measure(name: str, calls: int) -> dict:
    """One workload in this process: memory and compilations after warm-up."""
    compilations = Compilations()
    call = WORKLOADS[name]()
    warmup = max(calls // 10, 5)
    start = time.perf_counter()
    for i in range(warmup):
        call(i)
    warm_compiles, warm_mib = compilations.count, resident_mib()
    peak = warm_mib
    for i in range(warmup, calls):
        call(i)
        if (i + 1) % max(calls // 20, 1) == 0:
            peak = max(peak, resident_mib())
    end_mib = resident_mib()
    return {"run": name, "calls": calls, "warmup_calls": warmup, "seconds": round(time.perf_counter() - start, 1),
            "rss_mib": {"after_warmup": round(warm_mib, 1), "end": round(end_mib, 1), "peak": round(max(peak, end_mib), 1)},
            "rss_growth_mib": round(end_mib - warm_mib, 1),
            "compilations": {"warmup": warm_compiles, "after_warmup": compilations.count - warm_compiles},
            **({"tokens": calls * NEW_TOKENS} if name == "generate" else {})}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", nargs="+", choices=RUNS, default=list(RUNS))
    parser.add_argument("--short", action="store_true", help="a tenth of each run (make test's form)")
    parser.add_argument("--results", default=RESULTS)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    _setup.add_cores_argument(parser)
    options = parser.parse_args()
    if options.worker:  # one workload, in this process
        calls = CALLS[options.worker] // (10 if options.short else 1)
        print(json.dumps(measure(options.worker, calls)))
        return
    os.makedirs(os.path.dirname(options.results) or ".", exist_ok=True)
    for name in options.runs:
        command = [sys.executable, __file__, "--worker", name, "--cores", str(_setup.THREADS)]
        done = subprocess.run(command + (["--short"] if options.short else []), capture_output=True, text=True)
        if done.returncode:
            sys.exit(f"{name} failed:\n{done.stderr[-3000:]}")
        row = {**json.loads(done.stdout.strip().splitlines()[-1]), "short": options.short, "stamp": stamp()}
        with open(options.results, "a") as f:
            f.write(json.dumps(row) + "\n")
        print(json.dumps({k: v for k, v in row.items() if k != "stamp"}), flush=True)


if __name__ == "__main__":
    main()
