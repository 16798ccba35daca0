"""The torch.compile backend's per-call overhead: backend="jaxport" against the same model converted
with `jaxport.from_torch` and called directly, and against PyTorch eager.

    python benchmarks/bench_dynamo_overhead.py [--cores 1|N|all] [--models minilm bert ... linear100]
        [--runs 200] [--results benchmarks/results/dynamo_overhead_1core.jsonl] [--markdown out.md]

Every model of the test zoo (`tests/support/zoo.py`: small random Hugging Face models, the real
MiniLM, a BatchNorm CNN) and a stack of 100 `Linear(32, 32)` layers (200 parameters, batch 8),
all at inference (eval mode, under `torch.no_grad()`), each in a process of its own, every side
pinned to the same `--cores` (`_setup`):

- eager: the module itself;
- jaxport: `torch.compile(module, backend="jaxport")`, torch tensors in and out;
- jm: `jaxport.from_torch(module, args, kwargs)` called on the same torch tensors, its JAX
  outputs blocked until ready (the model's arithmetic without Dynamo, AOTAutograd, the model's
  Python or the tensor exchange);
- inductor: `torch.compile(module)`, PyTorch's own compiler (what a user would pick instead);
- floor: `torch.compile` through AOTAutograd with a compiler that does no work (each graph hands
  back the outputs of its first call): what Dynamo's guards, AOTAutograd's wrappers and the
  model's Python left outside the graph cost per call, which no backend avoids. The backend's
  own cost is its time over this floor's.

"ms" is the median wall time of `--runs` steady-state calls, the sides taking turns in blocks
of 10; "cpu ms" the median CPU time of the process per call (all its threads); "in graphs ms" the
median wall time per backend call spent inside jaxport's compiled graphs (`CompiledGraph.__call__`:
the tensor exchange and the jitted call), the rest of the backend's time being Dynamo's,
AOTAutograd's and the model's Python around them. The same input
tensors are passed on every call, as a serving loop passes its batch. Rows are appended to
`--results`, stamped with commit, date, machine, versions and thread settings (and `--label`,
to tell runs of one commit apart); "jaxport/jm" is the backend's wall time over jm's.
"""

from __future__ import annotations

import _setup  # first: pins the cores before JAX and torch start

# isort: split
import argparse
import json
import os
import statistics
import sys
import time

import jax
import torch
from tests.support import zoo
from torch._dynamo.backends.common import aot_autograd

import jaxport
from _report import interleaved, measured_apart, publish, stamp
from jaxport import dynamo
from jaxport.compare import first_output

RESULTS = os.path.join(os.path.dirname(__file__), "results", "dynamo_overhead_{cores}core.jsonl")


def linear100():
    """100 `Linear(32, 32)` layers: 200 small parameters, little arithmetic per call."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(*(torch.nn.Linear(32, 32) for _ in range(100)))
    return model.eval(), (torch.randn(8, 32, generator=torch.Generator().manual_seed(0)),), {}


MODELS = {**zoo.MODELS, "linear100": linear100}


def _no_work(graph_module: torch.fx.GraphModule, example_inputs) -> object:
    """A compiled graph that computes once and then hands back the same outputs."""
    outputs: list = []

    def run(args: list):
        if not outputs:
            outputs.append(graph_module(*args))
        return outputs[0]

    run._boxed_call = True
    return run


FLOOR = aot_autograd(fw_compiler=_no_work)


def _time_in_graphs() -> list[float]:
    """Make every `CompiledGraph` call add its wall time to the returned list's one entry."""
    spent = [0.0]
    call = dynamo.CompiledGraph.__call__

    def timed(self, args):
        start = time.perf_counter()
        try:
            return call(self, args)
        finally:
            spent[0] += time.perf_counter() - start

    dynamo.CompiledGraph.__call__ = timed
    return spent


def measure(name: str, runs: int) -> dict:
    module, args, kwargs = MODELS[name]()
    module.eval()
    row: dict = {"model": name, "compile_s": {}}
    with torch.no_grad():
        compiled = torch.compile(module, backend="jaxport")
        floor = torch.compile(module, backend=FLOOR)
        floor(*args, **kwargs)
        inductor = torch.compile(module)
        start = time.perf_counter()
        inductor(*args, **kwargs)
        row["compile_s"]["inductor"] = time.perf_counter() - start
        start = time.perf_counter()
        jm = jaxport.from_torch(module, args, kwargs)
        jax.block_until_ready(jm(*args, **kwargs))
        row["compile_s"]["jm"] = time.perf_counter() - start
        start = time.perf_counter()
        compiled(*args, **kwargs)
        row["compile_s"]["jaxport"] = time.perf_counter() - start
        expected = first_output(module(*args, **kwargs))
        got = first_output(compiled(*args, **kwargs))
        row["jaxport_error"] = float((got - expected).abs().max() / expected.abs().max())
        spent, in_graphs = _time_in_graphs(), []

        def backend_call():
            spent[0] = 0.0
            compiled(*args, **kwargs)
            in_graphs.append(spent[0])

        fns = {
            "eager": lambda: module(*args, **kwargs),
            "jaxport": backend_call,
            "jm": lambda: jax.block_until_ready(jm(*args, **kwargs)),
            "floor": lambda: floor(*args, **kwargs),
            "inductor": lambda: inductor(*args, **kwargs),
        }
        times = interleaved(list(fns.values()), runs, block=10)
    row["ms"] = {side: round(t.wall_s * 1e3, 4) for side, t in zip(fns, times)}
    row["cpu_ms"] = {side: round(t.cpu_s * 1e3, 4) for side, t in zip(fns, times)}
    row["cpus"] = {side: round(t.cpus, 3) for side, t in zip(fns, times)}
    row["in_graphs_ms"] = round(statistics.median(in_graphs[-runs:]) * 1e3, 4)
    row["tensors"] = sum(1 for _ in module.parameters()) + sum(1 for _ in module.buffers())
    return row


def table(rows: list[dict]) -> str:
    lines = ["| model | tensors | eager ms | jaxport ms | jm ms | jaxport/jm | inductor ms | jaxport/inductor | "
             "floor ms | jaxport in graphs ms | eager cpu ms | jaxport cpu ms | jm cpu ms | inductor cpu ms |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        if "error" in row:
            lines.append(f"| {row['model']} | {row['error']} |" + " |" * 12)
            continue
        ms, cpu = row["ms"], row["cpu_ms"]
        inductor = ms.get("inductor")  # rows from before the Inductor side have none
        lines.append(f"| {row['model']} | {row['tensors']} | {ms['eager']:.3f} | {ms['jaxport']:.3f} | {ms['jm']:.3f} | "
                     f"{ms['jaxport'] / ms['jm']:.2f} | {_or_blank(inductor, '.3f')} | "
                     f"{_or_blank(inductor and ms['jaxport'] / inductor, '.2f')} | {ms['floor']:.3f} | "
                     f"{row['in_graphs_ms']:.3f} | {cpu['eager']:.3f} | {cpu['jaxport']:.3f} | {cpu['jm']:.3f} | "
                     f"{_or_blank(cpu.get('inductor'), '.3f')} |")
    return "\n".join(lines)


def _or_blank(value, spec: str) -> str:
    return "" if value is None else format(value, spec)


def main() -> None:
    parser = _setup.parser(__doc__, runs=200)
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--results", default=RESULTS.format(cores=_setup.THREADS))
    parser.add_argument("--timeout", type=float, default=900, help="seconds per model")
    parser.add_argument("--label", help="recorded in every row (which variant of the code ran)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    opts = parser.parse_args()
    if opts.worker:
        row = measure(opts.worker, opts.runs)
        row["stamp"] = stamp()
        print(json.dumps(row))
        return
    rows = []
    for name in opts.models:
        command = [sys.executable, __file__, "--worker", name, "--runs", str(opts.runs),
                   "--cores", str(_setup.THREADS)]
        label = {"label": opts.label} if opts.label else {}
        row = measured_apart(command, {"model": name, **label}, opts.results, opts.timeout)
        rows.append(row)
        print(table([row]).splitlines()[-1], flush=True)
    publish(table(rows), opts.markdown,
            f"inference under torch.no_grad(); median of {opts.runs} interleaved steady-state calls",
            stamps=[row["stamp"] for row in rows])


if __name__ == "__main__":
    main()
