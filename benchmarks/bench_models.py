"""Conversion time and steady-state latency of jaxport against PyTorch eager, on the same cores.

    python benchmarks/bench_models.py [model ...] [--runs 100] [--cores 1|N|all] [--markdown out.md]

Conversion is torch.export plus building jaxport's program (no XLA compile); "emit
source" is generating the standalone module's text (`jaxport.emit` without writing files);
"warm" is a second conversion in the same process, once torch.export's
one-time start-up is paid. Latency is the median of --runs calls after a
warm-up call, the two libraries taking turns in blocks of 10 calls, with JAX blocked
until ready; "CPUs" is CPU time over wall time per call (at most the cores given).
"""

from __future__ import annotations

import _setup  # first: pins the cores before JAX and torch start

# isort: split
import time

import jax
import torch
from tests.support.zoo import MODELS

import jaxport
from _report import interleaved, publish
from jaxport.backends.codegen import generate


def bench(name: str, runs: int) -> dict:
    module, args, kwargs = MODELS[name]()
    conversions = []
    for _ in range(2):
        start = time.perf_counter()
        model = jaxport.from_torch(module, args, kwargs)
        conversions.append(time.perf_counter() - start)
    start = time.perf_counter()
    source, _ = generate(model)
    emit_s = time.perf_counter() - start
    jargs = [jaxport.interop.to_jax(a) for a in args]
    jkwargs = {k: jaxport.interop.to_jax(v) for k, v in kwargs.items()}
    start = time.perf_counter()
    jax.block_until_ready(model(*jargs, **jkwargs))
    compile_s = time.perf_counter() - start
    with torch.no_grad():
        torch_t, jax_t = interleaved(
            [lambda: module(*args, **kwargs), lambda: jax.block_until_ready(model(*jargs, **jkwargs))], runs)
    return {
        "model": name,
        "convert_cold": conversions[0],
        "convert_warm": conversions[1],
        "compile": compile_s,
        "emit": emit_s,
        "emit_lines": source.count("\n"),
        "torch_ms": torch_t.wall_s * 1e3,
        "torch_cpus": torch_t.cpus,
        "jax_ms": jax_t.wall_s * 1e3,
        "jax_cpus": jax_t.cpus,
        "ratio": jax_t.wall_s / torch_t.wall_s,
        "ops": len(model.program.nodes),
    }


def table(rows: list[dict]) -> str:
    lines = [
        "| model | ops | convert cold (s) | convert warm (s) | trace+compile (s) | emit source (s) | source lines "
        "| PyTorch eager (ms) | CPUs | jaxport jit (ms) | CPUs | latency ratio |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['model']} | {r['ops']} | {r['convert_cold']:.2f} | {r['convert_warm']:.2f} | {r['compile']:.2f} | "
            f"{r['emit']:.2f} | {r['emit_lines']} | "
            f"{r['torch_ms']:.2f} | {r['torch_cpus']:.2f} | {r['jax_ms']:.2f} | {r['jax_cpus']:.2f} | {r['ratio']:.2f}x |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = _setup.parser(__doc__, runs=100)
    parser.add_argument("models", nargs="*", default=list(MODELS))
    opts = parser.parse_args()
    rows = []
    for name in opts.models:
        rows.append(bench(name, opts.runs))
        print(table(rows[-1:]).splitlines()[-1], flush=True)
    publish(table(rows), opts.markdown, f"median of {opts.runs} runs, taking turns in blocks of 10 calls")


if __name__ == "__main__":
    main()
