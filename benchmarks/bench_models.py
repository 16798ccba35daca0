"""Conversion time and steady-state latency of jaxport against PyTorch eager, one thread each.

    python benchmarks/bench_models.py [model ...] [--runs 20] [--markdown out.md]

Conversion is torch.export plus building jaxport's program (no XLA compile);
"warm" is a second conversion in the same process, once torch.export's
one-time start-up is paid. Latency is the median of --runs calls after a
warm-up call, with JAX blocked until ready.
"""

from __future__ import annotations

import os

# One thread each, set before JAX and torch start their thread pools.
os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + " --xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
)
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import argparse  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402

import jax  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from tests.models.zoo import MODELS  # noqa: E402

import jaxport  # noqa: E402
from _report import publish  # noqa: E402
from jaxport.demo import median_seconds  # noqa: E402

torch.set_num_threads(1)
warnings.filterwarnings("ignore")


def bench(name: str, runs: int) -> dict:
    module, args, kwargs = MODELS[name]()
    conversions = []
    for _ in range(2):
        start = time.perf_counter()
        model = jaxport.from_torch(module, args, kwargs)
        conversions.append(time.perf_counter() - start)
    jargs = [jaxport.to_jax(a) for a in args]
    jkwargs = {k: jaxport.to_jax(v) for k, v in kwargs.items()}
    start = time.perf_counter()
    jax.block_until_ready(model(*jargs, **jkwargs))
    compile_s = time.perf_counter() - start
    with torch.no_grad():
        torch_s = median_seconds(lambda: module(*args, **kwargs), runs)
    jax_s = median_seconds(lambda: jax.block_until_ready(model(*jargs, **jkwargs)), runs)
    return {
        "model": name,
        "convert_cold": conversions[0],
        "convert_warm": conversions[1],
        "compile": compile_s,
        "torch_ms": torch_s * 1e3,
        "jax_ms": jax_s * 1e3,
        "ratio": jax_s / torch_s,
        "ops": len(model.program.nodes),
    }


def table(rows: list[dict]) -> str:
    lines = [
        "| model | ops | convert cold (s) | convert warm (s) | trace+compile (s) | PyTorch eager (ms) | jaxport jit (ms) | latency ratio |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['model']} | {r['ops']} | {r['convert_cold']:.2f} | {r['convert_warm']:.2f} | {r['compile']:.2f} | "
            f"{r['torch_ms']:.2f} | {r['jax_ms']:.2f} | {r['ratio']:.2f}x |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("models", nargs="*", default=list(MODELS))
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--markdown", help="also write the table here")
    opts = parser.parse_args()
    rows = []
    for name in opts.models:
        rows.append(bench(name, opts.runs))
        print(table(rows[-1:]).splitlines()[-1], flush=True)
    publish(table(rows), opts.runs, opts.markdown)


if __name__ == "__main__":
    main()
