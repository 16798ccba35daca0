"""`from_onnx` models against onnxruntime (CPU), on the same cores and the same inputs.

    python benchmarks/bench_onnx.py [model ...] [--runs 100] [--cores 1|N|all] [--markdown out.md]

Each model of the zoo is exported with `torch.onnx.export` (the dynamo exporter), then
loaded by jaxport and by onnxruntime. "load" is `from_onnx` (parsing, shape inference,
building the program; no XLA compile); latency is the median of --runs calls after a
warm-up call, the two libraries taking turns in blocks of 10 calls, with JAX blocked
until ready; "CPUs" is CPU time over wall time per call (at most the cores given).
"""

from __future__ import annotations

import _setup  # first: pins the cores before JAX and torch start

# isort: split
import os
import tempfile
import time

import jax
import onnxruntime
import torch
from tests.support.zoo import MODELS

import jaxport
from _report import interleaved, publish
from jaxport.compare import compare_all


def bench(name: str, runs: int, folder: str) -> dict:
    module, args, kwargs = MODELS[name]()
    path = os.path.join(folder, f"{name}.onnx")
    with torch.no_grad():
        torch.onnx.export(module, args, kwargs=kwargs or None, dynamo=True, verbose=False).save(path)
    feeds = [a.numpy() for a in args] + [v.numpy() for v in kwargs.values()]
    start = time.perf_counter()
    model = jaxport.from_onnx(path)
    load_s = time.perf_counter() - start
    session = onnxruntime.InferenceSession(path, _setup.ort_options(), providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    ort_feeds = dict(zip(names, feeds))
    jax_feeds = [jax.numpy.asarray(f) for f in feeds]
    expected = session.run(None, ort_feeds)
    actual = jax.tree_util.tree_leaves(model(*jax_feeds))
    error = max(check.max_abs for check in compare_all(actual, expected))
    ort, jx = interleaved(
        [lambda: session.run(None, ort_feeds), lambda: jax.block_until_ready(model(*jax_feeds))], runs)
    return {"model": name, "nodes": len(model.program.nodes), "load": load_s, "ort_ms": ort.wall_s * 1e3,
            "ort_cpus": ort.cpus, "jax_ms": jx.wall_s * 1e3, "jax_cpus": jx.cpus, "ratio": jx.wall_s / ort.wall_s,
            "error": error}


def table(rows: list[dict]) -> str:
    lines = [
        "| model | ONNX nodes | from_onnx (s) | onnxruntime (ms) | CPUs | jaxport jit (ms) | CPUs | latency ratio "
        "| max abs diff |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(f"| {r['model']} | {r['nodes']} | {r['load']:.2f} | {r['ort_ms']:.2f} | {r['ort_cpus']:.2f} | "
                     f"{r['jax_ms']:.2f} | {r['jax_cpus']:.2f} | "
                     f"{r['ratio']:.2f}x | {r['error']:.1e} |")
    return "\n".join(lines)


def main() -> None:
    parser = _setup.parser(__doc__, runs=100)
    parser.add_argument("models", nargs="*", default=["bert", "gpt2", "llama", "vit", "resnet", "cnn"])
    opts = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for name in opts.models:
            rows.append(bench(name, opts.runs, folder))
            print(table(rows[-1:]).splitlines()[-1], flush=True)
    publish(table(rows), opts.markdown, f"median of {opts.runs} runs, taking turns in blocks of 10 calls")


if __name__ == "__main__":
    main()
