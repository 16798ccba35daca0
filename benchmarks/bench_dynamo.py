"""torch.compile onto JAX: backend="jaxport" against Inductor and eager, compile time and steady state.

    python benchmarks/bench_dynamo.py [--cores 1|N|all] [--models bert gpt2 resnet50] [--batch 1]
        [--tasks inference training] [--runs 10] [--results benchmarks/results/dynamo_1core.jsonl]
        [--markdown out.md]

The models of `bench_real_sizes` (Hugging Face architectures at realistic widths, random weights,
float32, each at least 10 ms a call in PyTorch eager on this CPU). Per (model, task), in a
process of its own, all pinned to the same `--cores` (`_setup`):

- eager: the module itself;
- inductor: `torch.compile(module)` (Inductor, default mode);
- jaxport: `torch.compile(module, backend="jaxport")`.

"compile s" is the first call's wall time (Dynamo's capture, AOTAutograd, then Inductor's or
XLA's compilation; Inductor's on-disk caches off, as JAX's persistent cache is by default), "ms" the median of `--runs` interleaved steady-state calls. The inference
task runs the module under `torch.no_grad()`; the training task runs one forward and backward
(a fixed projection of the first output as the loss; no optimizer, so every call sees the same
weights), in train mode with dropout probabilities left as the config has them. Rows are
appended to `--results`, stamped with commit, date, machine, versions and thread settings.
"""

from __future__ import annotations

import _setup  # first: pins the cores before JAX and torch start

# isort: split
import argparse
import json
import os
import sys
import time

import torch

from _report import interleaved, measured_apart, publish, stamp
from bench_real_sizes import MODELS, calibrate_batch_norms
from jaxport.compare import first_output

RESULTS = os.path.join(os.path.dirname(__file__), "results", "dynamo_{cores}core.jsonl")
BACKENDS = ("eager", "inductor", "jaxport")
TASKS = ("inference", "training")


def _step(forward, inputs: dict, task: str):
    """One call of `forward` as the task runs it: without autograd, or forward and backward."""
    if task == "inference":
        def call():
            with torch.no_grad():
                first_output(forward(**inputs))
        return call

    weights: dict = {}

    def call():
        output = first_output(forward(**inputs))
        if "w" not in weights:
            weights["w"] = torch.randn(output.shape, generator=torch.Generator().manual_seed(0))
        (output * weights["w"]).sum().backward()
    return call


def measure(name: str, batch: int, task: str, runs: int) -> dict:
    torch.manual_seed(0)
    module, inputs = MODELS[name](batch)
    calibrate_batch_norms(module, MODELS[name](max(batch, 8))[1])
    module = module.train() if task == "training" else module.eval()
    row: dict = {"model": name, "batch": batch, "task": task, "compile_s": {}}
    fns = {}
    for backend in BACKENDS:
        forward = module if backend == "eager" else torch.compile(
            module, backend="inductor" if backend == "inductor" else "jaxport")
        call = _step(forward, inputs, task)
        start = time.perf_counter()
        call()
        row["compile_s"][backend] = time.perf_counter() - start
        fns[backend] = call
    times = interleaved(list(fns.values()), runs, block=5)
    row["ms"] = {backend: t.wall_s * 1e3 for backend, t in zip(fns, times)}
    row["cpus"] = {backend: round(t.cpus, 3) for backend, t in zip(fns, times)}
    return row


def table(rows: list[dict]) -> str:
    lines = ["| model | batch | task | eager ms | Inductor ms | jaxport ms | Inductor compile s | jaxport compile s |",
             "|---|---|---|---|---|---|---|---|"]
    for row in rows:
        if "error" in row:
            lines.append(f"| {row['model']} | {row['batch']} | {row['task']} | {row['error']} | | | | |")
            continue
        ms, compile_s = row["ms"], row["compile_s"]
        lines.append(f"| {row['model']} | {row['batch']} | {row['task']} | {ms['eager']:.1f} | {ms['inductor']:.1f} | "
                     f"{ms['jaxport']:.1f} | {compile_s['inductor']:.1f} | {compile_s['jaxport']:.1f} |")
    return "\n".join(lines)


def main() -> None:
    parser = _setup.parser(__doc__, runs=10)
    parser.add_argument("--models", nargs="+", default=["bert", "gpt2", "resnet50"], choices=list(MODELS))
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--tasks", nargs="+", default=list(TASKS), choices=TASKS)
    parser.add_argument("--results", default=RESULTS.format(cores=_setup.THREADS))
    parser.add_argument("--timeout", type=float, default=1200, help="seconds per (model, task)")
    parser.add_argument("--worker", nargs=3, help=argparse.SUPPRESS)
    opts = parser.parse_args()
    if opts.worker:
        name, batch, task = opts.worker
        row = measure(name, int(batch), task, opts.runs)
        row["stamp"] = stamp()
        print(json.dumps(row))
        return
    rows = []
    for name in opts.models:
        for task in opts.tasks:
            command = [sys.executable, __file__, "--worker", name, str(opts.batch), task, "--runs", str(opts.runs),
                       "--cores", str(_setup.THREADS)]
            # Inductor's on-disk caches off, so its compile time is a first compile as jaxport's is
            # (JAX's persistent compilation cache is off by default).
            env = {**os.environ, "TORCHINDUCTOR_FORCE_DISABLE_CACHES": "1"}
            row = measured_apart(command, {"model": name, "batch": opts.batch, "task": task}, opts.results,
                                 opts.timeout, env)
            rows.append(row)
            print(table([row]).splitlines()[-1], flush=True)
    publish(table(rows), opts.markdown,
            f"median of {opts.runs} interleaved steady-state calls; compile s is the first call's wall time",
            stamps=[row["stamp"] for row in rows])


if __name__ == "__main__":
    main()
