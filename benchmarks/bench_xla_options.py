"""XLA:CPU's per-executable options on jaxport's products and models: which, if any, is faster.

    python benchmarks/bench_xla_options.py [--runs 10] [--cores 1|N|all] [--models bert t5 ...]
        [--markdown out.md]

Each option set compiles the same lowered program (`jax.jit(...).lower(...).compile(
compiler_options=...)`, the per-executable setting jaxport could use for its own executables,
never the process-wide `XLA_FLAGS`), and the executables take turns (`_report.interleaved`)
on the same cores. Targets: the matrix products of a BERT-base layer (weight an argument, as
`bench_products.py`) and Hugging Face models at real sizes (`bench_real_sizes.py`'s builders,
batch 1, parameters as arguments). Each cell is the time relative to XLA's defaults and the
largest difference from the defaults' output, relative to its largest magnitude ("exact" where
equal); "refused" where this jaxlib rejects the option.

jaxlib 0.10.2 already runs float32 products through its YNNPACK library fusion by default;
the fusion-type options take the names of XLA's `LibraryFusionType` enum (in option strings:
LIBRARY_FUSION_TYPE_DOT, _ELTWISE, _REDUCE, _INDIVIDUAL_DOT), comma-separated, and an empty
string turns a library's fusions off.
"""

from __future__ import annotations

import _setup  # first: pins the cores before JAX and torch start

# isort: split
import time

import jax
import jax.numpy as jnp
import numpy as np
import torch
from jax import lax

import jaxport
from _report import interleaved, publish
from bench_real_sizes import MODELS

YNN, XNN, ONEDNN = (f"xla_cpu_experimental_{lib}_fusion_type" for lib in ("ynn", "xnn", "onednn"))
DOT, ELTWISE, REDUCE = (f"LIBRARY_FUSION_TYPE_{kind}" for kind in ("DOT", "ELTWISE", "REDUCE"))
#: Option sets by name; "defaults" first: the others are measured against it.
OPTIONS = {
    "defaults": {},
    "YNN dot+eltwise": {YNN: f"{DOT},{ELTWISE}"},
    "YNN dot+eltwise+reduce": {YNN: f"{DOT},{ELTWISE},{REDUCE}"},
    "no YNN": {YNN: ""},
    "XNN dot, no YNN": {YNN: "", XNN: DOT},
    "oneDNN dot, no YNN": {YNN: "", ONEDNN: DOT},
    "use_onednn, no YNN": {YNN: "", "xla_cpu_use_onednn": True},
    "use_xnnpack": {"xla_cpu_use_xnnpack": True},
    "vector width 512": {"xla_cpu_prefer_vector_width": 512},
}
#: The matrix products of a BERT-base layer (tokens, in, out), as `bench_products.py`.
SHAPES = [(128, 768, 768), (128, 768, 3072), (128, 3072, 768)]
DEFAULT_MODELS = ["bert", "gpt2", "llama", "t5", "clip", "wav2vec2"]


def _product(m: int, k: int, n: int):
    rng = np.random.default_rng(0)
    x, w = (jnp.asarray(rng.standard_normal(s, dtype=np.float32)) for s in ((m, k), (n, k)))
    fn = jax.jit(lambda a, b: lax.dot_general(a, b, (((1,), (1,)), ((), ())), precision=lax.Precision.HIGHEST))
    return fn.lower(x, w), (x, w)


def _model(name: str):
    torch.manual_seed(0)
    module, inputs = MODELS[name](1)
    model = jaxport.from_torch(module.eval(), (), inputs)
    args = (model.params, {k: jaxport.interop.to_jax(v) for k, v in inputs.items()})
    return jax.jit(lambda params, kwargs: model.apply(params, **kwargs)).lower(*args), args


def _first_array(out) -> np.ndarray:
    return np.asarray(jax.tree_util.tree_leaves(out)[0], dtype=np.float64)


def measure(lowered, args, runs: int) -> list[str]:
    """One row's cells: each option set's time relative to the defaults and its largest difference."""
    calls, outputs, cells = {}, {}, {}
    for name, options in OPTIONS.items():
        try:
            compiled = lowered.compile(compiler_options=options)
        except Exception as e:  # this jaxlib does not know the option or its value
            cells[name] = "refused"
            print(f"  {name}: refused ({str(e).splitlines()[0][:120]})", flush=True)
            continue
        outputs[name] = _first_array(jax.block_until_ready(compiled(*args)))
        calls[name] = lambda compiled=compiled: jax.block_until_ready(compiled(*args))
    times = dict(zip(calls, interleaved(list(calls.values()), runs, block=3)))
    base, reference = times["defaults"].wall_s, outputs["defaults"]
    scale = max(float(np.abs(reference).max()), np.finfo(np.float32).tiny)
    for name, timing in times.items():
        difference = float(np.abs(outputs[name] - reference).max()) / scale
        exact = "exact" if difference == 0 else f"{difference:.0e}"
        cells[name] = f"{timing.wall_s * 1e3:.2f} ms" if name == "defaults" else f"{timing.wall_s / base:.2f}x, {exact}"
    return [cells[name] for name in OPTIONS]


def main() -> None:
    parser = _setup.parser(__doc__, runs=10)
    parser.add_argument("--models", nargs="*", default=DEFAULT_MODELS, choices=list(MODELS))
    opts = parser.parse_args()
    lines = ["| target | " + " | ".join(OPTIONS) + " |", "|---|" + "---:|" * len(OPTIONS)]
    targets = [(f"product {m} × {k} × {n}", lambda m=m, k=k, n=n: _product(m, k, n)) for m, k, n in SHAPES]
    targets += [(name, lambda name=name: _model(name)) for name in opts.models]
    for label, build in targets:
        start = time.perf_counter()
        lowered, args = build()
        lines.append(f"| {label} | " + " | ".join(measure(lowered, args, opts.runs)) + " |")
        print(lines[-1], f"({time.perf_counter() - start:.0f} s)", flush=True)
    publish("\n".join(lines), opts.markdown,
            f"median of {opts.runs} calls each, taking turns in blocks of 3; each cell: time against the "
            "defaults' and the largest difference from their output")


if __name__ == "__main__":
    main()
