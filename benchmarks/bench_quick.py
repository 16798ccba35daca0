"""The hot paths' per-call ratios in a few minutes, on one core: run before resolving an issue that
touches one, and quote it.

    python benchmarks/bench_quick.py [--cores 1] [--results benchmarks/results/quick_1core.jsonl]

Three figures, each a ratio against a baseline measured in the same run (so a slower or
busier machine moves them less than it moves times):

- backend/jm: `torch.compile(backend="jaxport")` of 100 `Linear(32, 32)` layers against the
  same model converted with `from_torch` and called directly (`bench_dynamo_overhead.py`'s
  `linear100` row, fewer runs), and its wall time per call;
- eager/JAX: `x * 2 + 1` on 8x8 on the jax device against the same two ops in bare eager JAX
  (`bench_eager.py`'s first row), and jaxport's time per op;
- kernel/XLA: jaxport's product kernel against XLA's product for BERT's MLP-up shape (128 x 768
  by 3072 x 768; `bench_products.py`'s row), the weight a constant for both.

The row is appended to `--results`, stamped; the table sets it beside the newest row there from
another commit (the committed rows are the published ones), with each figure's change.
"""

from __future__ import annotations

import _setup  # first: pins the cores before JAX and torch start

# isort: split

import json
import os
import subprocess
import sys
import tempfile

import bench_eager
import bench_products
from _report import ROOT, publish, stamp

RESULTS = os.path.join(os.path.dirname(__file__), "results", "quick_1core.jsonl")
FIGURES = [("backend/jm", "linear100: backend over jm (x)"), ("backend_ms", "linear100: backend per call (ms)"),
           ("eager/jax", "x * 2 + 1: eager over bare JAX (x)"), ("eager_us_per_op", "x * 2 + 1: eager per op (µs)"),
           ("kernel/xla", "product 128x768x3072: kernel over XLA (x)")]


def _backend(cores: str) -> dict:
    """The linear100 row of bench_dynamo_overhead, measured in a process of its own."""
    with tempfile.TemporaryDirectory() as directory:
        results = os.path.join(directory, "rows.jsonl")
        subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "bench_dynamo_overhead.py"),
                        "--models", "linear100", "--runs", "100", "--cores", cores, "--results", results],
                       check=True, capture_output=True, text=True)
        with open(results) as f:
            row = json.loads(f.readlines()[-1])
    if "error" in row:
        raise SystemExit(f"linear100: {row['error']}")
    return {"backend/jm": row["ms"]["jaxport"] / row["ms"]["jm"], "backend_ms": row["ms"]["jaxport"]}


def _eager(runs: int) -> dict:
    name, ops, torch_fn, torch_args, jax_fn, jax_args = bench_eager.workloads()[0]
    _, eager_s, jax_s = bench_eager.time_workload(torch_fn, torch_args, jax_fn, jax_args, runs)
    return {"eager/jax": eager_s / jax_s, "eager_us_per_op": eager_s / ops * 1e6}


def _kernel(runs: int) -> dict:
    timings = bench_products.measure(128, 768, 3072, runs)
    constant, kernel = timings[1], timings[2]  # XLA with the weight a constant; jaxport's kernel
    return {"kernel/xla": kernel.wall_s / constant.wall_s}


def _previous(results: str, commit: str) -> dict | None:
    if not os.path.exists(results):
        return None
    with open(results) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    older = [r for r in rows if r["stamp"]["commit"].removesuffix("+dirty") != commit.removesuffix("+dirty")]
    return older[-1] if older else None


def main() -> None:
    parser = _setup.parser(__doc__, runs=200)
    parser.add_argument("--results", default=RESULTS)
    opts = parser.parse_args()
    row = {**_backend(opts.cores), **_eager(opts.runs), **_kernel(max(20, opts.runs // 4)), "stamp": stamp()}
    previous = _previous(opts.results, row["stamp"]["commit"])
    os.makedirs(os.path.dirname(opts.results), exist_ok=True)
    with open(opts.results, "a") as f:
        f.write(json.dumps(row) + "\n")
    then = f"at {previous['stamp']['commit']} ({previous['stamp']['date']})" if previous else "(no earlier row)"
    table = [f"| figure | now | {then} | change |", "|---|---:|---:|---:|"]
    for key, label in FIGURES:
        before = previous.get(key) if previous else None
        change = f"{row[key] / before:.2f}x" if before else ""
        table.append(f"| {label} | {row[key]:.3g} | {'' if before is None else f'{before:.3g}'} | {change} |")
    publish("\n".join(table), opts.markdown, "ratios within one run; each worker pinned to the same core",
            [row["stamp"]] + ([previous["stamp"]] if previous else []))


if __name__ == "__main__":
    main()
