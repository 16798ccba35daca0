"""ONNX's node conformance cases through code generation: each case's model written out with
`jaxport.emit`, imported, and compared with the interpreter on the case's inputs.

    python -m tests.conformance.codegen.conformance [OpType ...]   # every case, or those of these ops

Floats must agree within 1e-6, everything else exactly. Cases `from_onnx` cannot load
(string tensors, ...) are counted and skipped; the ONNX conformance suite covers them.
"""

from __future__ import annotations

import collections
import importlib.util
import sys
import tempfile
import warnings

import jax
import jax.numpy as jnp
import numpy as np

import jaxport
from tests.conformance.onnx.conformance import _as_values, node_cases, op_under_test


def check_case(case, folder: str) -> None:
    """Emit the case's model into `folder` and compare the module with the interpreter."""
    model = jaxport.from_onnx(case.model)
    jaxport.emit(model, folder)
    spec = importlib.util.spec_from_file_location(f"generated_{abs(hash(folder))}", f"{folder}/model.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    inputs = [jnp.asarray(x) if isinstance(x, np.ndarray) else x for x in _as_values(list(case.data_sets[0][0]))]
    reference = model(*inputs) if model.jittable else model.apply(model.params, *inputs)
    forward = jax.jit(module.forward) if model.jittable else module.forward
    got = jax.tree_util.tree_leaves(forward(module.load_params(), *inputs))
    want = jax.tree_util.tree_leaves(reference)
    assert len(got) == len(want), f"{len(got)} outputs, the interpreter gives {len(want)}"
    for a, b in zip(got, want):
        a, b = np.asarray(a), np.asarray(b)
        assert a.shape == b.shape and a.dtype == b.dtype, (a.shape, a.dtype, b.shape, b.dtype)
        if a.dtype.kind in "fcV":  # V: bfloat16 and float8, compared as float64
            np.testing.assert_allclose(a.astype(np.float64) if a.dtype.kind == "V" else a,
                                       b.astype(np.float64) if b.dtype.kind == "V" else b,
                                       rtol=0, atol=1e-6, equal_nan=True)
        else:
            np.testing.assert_array_equal(a, b)


def run(ops: set[str] | None = None) -> tuple[collections.Counter, list[tuple[str, str]]]:
    counts, failures = collections.Counter(), []
    folder = tempfile.mkdtemp()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for number, (name, case) in enumerate(sorted(node_cases().items())):
            if ops and op_under_test(case) not in ops:
                continue
            try:
                jaxport.from_onnx(case.model)
            except jaxport.JaxportError:
                counts["not loadable"] += 1
                continue
            try:
                check_case(case, f"{folder}/{number}")
                counts["match"] += 1
            except Exception as e:  # noqa: BLE001 - every failure is reported, none stops the run
                counts["differ"] += 1
                failures.append((name, f"{type(e).__name__}: {str(e)[:300]}"))
    return counts, failures


if __name__ == "__main__":
    counts, failures = run(set(sys.argv[1:]) or None)
    print(dict(counts))
    for name, why in failures:
        print(f"{name}: {why}")
    sys.exit(1 if failures else 0)
