"""Transformers' matrix products: XLA:CPU and jaxport's kernel against PyTorch and onnxruntime, on the same cores.

    python benchmarks/bench_products.py [--runs 50] [--cores 1|N|all] [--markdown out.md]

A transformer's time at real sizes is mostly these products, so this separates the kernel
each library calls from everything around it. Each row is `x @ w.T` for an activation `x` of
32 or 128 tokens and a `[out, in]` weight `w`, as `aten.linear` lowers it: XLA with the weight
as an argument (`jm(...)`) and as a constant, jaxport's own kernel (`ops/_native/matmul.cc`,
what `jm.frozen()` runs for a constant weight on CPU), PyTorch's `linear`, and an onnxruntime
`Gemm` (transB=1) with the weight as an initializer. GF/s counts 2*m*k*n.
"""

from __future__ import annotations

import _setup  # first: pins the cores before JAX and torch start

# isort: split

import jax
import jax.numpy as jnp
import numpy as np
import onnx
import onnxruntime
import torch
from jax import lax
from onnx import TensorProto, helper

from _report import interleaved, publish
from jaxport.ops import _native, _products

#: (tokens, in features, out features): BERT-base's attention projections, MLP up and MLP down;
#: T5-small's projections in its decoder (32 tokens) and encoder; GPT-2's language model head.
SHAPES = [(128, 768, 768), (128, 768, 3072), (128, 3072, 768), (32, 512, 512), (128, 512, 512), (128, 768, 50257)]
BACKENDS = ("XLA, weight an argument", "XLA, weight a constant", "jaxport's kernel, weight a constant", "PyTorch",
            "onnxruntime")


def _gemm_session(w: np.ndarray, m: int):
    n, k = w.shape
    graph = helper.make_graph(
        [helper.make_node("Gemm", ["x", "w"], ["y"], transB=1)], "linear",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [m, k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [m, n])],
        [onnx.numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    return onnxruntime.InferenceSession(model.SerializeToString(), _setup.ort_options(),
                                        providers=["CPUExecutionProvider"])


def measure(m: int, k: int, n: int, runs: int) -> list:
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((m, k), dtype=np.float32), rng.standard_normal((n, k), dtype=np.float32)
    dims = (((1,), (1,)), ((), ()))
    as_argument = jax.jit(lambda a, b: lax.dot_general(a, b, dims, precision=lax.Precision.HIGHEST))
    as_constant = jax.jit(lambda a: lax.dot_general(a, jnp.asarray(w), dims, precision=lax.Precision.HIGHEST))
    constant_weight = jnp.asarray(w)
    with _native.product_kernel(True):  # the kernel itself, whichever this CPU measured faster
        kernel = jax.jit(lambda a: _products.rows_times_weight(a, constant_weight, np.float32)).lower(x)
    if _native.MATMUL_TARGET not in kernel.as_text():
        raise SystemExit("jaxport's product kernel is not built (make setup) or not chosen for this shape")
    kernel = kernel.compile()
    jx, jw, tx, tw = jnp.asarray(x), jnp.asarray(w), torch.from_numpy(x), torch.from_numpy(w)
    session = _gemm_session(w, m)
    with torch.no_grad():
        return interleaved([lambda: as_argument(jx, jw).block_until_ready(),
                            lambda: as_constant(jx).block_until_ready(),
                            lambda: kernel(jx).block_until_ready(),
                            lambda: torch.nn.functional.linear(tx, tw),
                            lambda: session.run(None, {"x": x})], runs)


def main() -> None:
    parser = _setup.parser(__doc__, runs=50)
    opts = parser.parse_args()
    lines = ["| m × k × n | " + " | ".join(f"{b} (ms, GF/s)" for b in BACKENDS) + " | most CPUs any used |",
             "|---|" + "---:|" * (len(BACKENDS) + 1)]
    for m, k, n in SHAPES:
        timings = measure(m, k, n, opts.runs)
        cells = [f"{t.wall_s * 1e3:.2f}, {2 * m * k * n / t.wall_s / 1e9:.0f}" for t in timings]
        lines.append(f"| {m} × {k} × {n} | " + " | ".join(cells) + f" | {max(t.cpus for t in timings):.2f} |")
        print(lines[-1], flush=True)
    publish("\n".join(lines), opts.markdown, f"median of {opts.runs} calls each, taking turns in blocks of 10")


if __name__ == "__main__":
    main()
