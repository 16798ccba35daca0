"""Runs generated modules where torch, jaxport and onnx cannot be imported.

    python tests/conformance/codegen/runner.py CASE_DIR [CASE_DIR ...]

Each CASE_DIR holds `model/` (what `jaxport.emit` wrote), `inputs.npz` (arr_0, arr_1, ...
in forward's order) and `mode` ("jit" or "eager"); the outputs' leaves go to
`outputs.npz`. Run as a script, not imported: it blocks those imports for the process.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys

BLOCKED = ("jaxport", "onnx", "onnxruntime", "torch", "transformers")


class _Blocker(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError(f"{name} is blocked: generated code must run without it")
        return None


def main(case_dirs: list[str]) -> None:
    sys.meta_path.insert(0, _Blocker())
    import jax
    import numpy as np

    for number, case in enumerate(case_dirs):
        spec = importlib.util.spec_from_file_location(f"generated_{number}", f"{case}/model/model.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        with np.load(f"{case}/inputs.npz") as data:
            inputs = [data[f"arr_{i}"] for i in range(len(data.files))]
        with open(f"{case}/mode") as f:
            jitted = f.read().strip() == "jit"
        forward = jax.jit(module.forward) if jitted else module.forward
        result = forward(module.load_params(), *inputs)
        leaves = jax.tree_util.tree_leaves(result)
        np.savez(f"{case}/outputs.npz", *[np.asarray(leaf) for leaf in leaves])
        loaded = sorted(name.split(".")[0] for name in sys.modules if name.split(".")[0] in BLOCKED)
        assert not loaded, f"generated code imported {loaded}"


if __name__ == "__main__":
    main(sys.argv[1:])
