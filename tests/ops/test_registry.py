"""The op library's promises: every core ATen op has a lowering, lowerings carry their schema, no torch."""

from __future__ import annotations

import ast
import importlib
import pathlib

import torch

from jaxport.ops import registry
from tests.conformance.opinfo.report import core_aten_ops

OPS_DIR = pathlib.Path(registry.__file__).parent


def test_every_core_aten_overload_has_a_lowering():
    missing = [op for op in core_aten_ops() if registry.lookup(op) is None]
    assert not missing, f"core ATen overloads without a lowering: {missing}"
    assert len(core_aten_ops()) > 150


def test_lowerings_document_their_schema():
    for name, fn in registry.ATEN.items():
        doc = (fn.__doc__ or "").strip()
        assert doc, f"{fn.__name__} ({name}) has no schema docstring"
        assert "->" in doc.splitlines()[0], f"{fn.__name__}: docstring should be the schema, got {doc[:60]!r}"
        assert fn.__name__.startswith(("aten_", "prims_")), f"{fn.__name__} registered for {name}"


def test_registered_schemas_exist_in_torch():
    importlib.import_module("torch._inductor.inductor_prims")  # Inductor's own prims (fma) exist once it is imported

    for name in registry.ATEN:
        namespace, op, overload = name.split(".")
        packet = getattr(getattr(torch.ops, namespace), op, None)
        assert packet is not None and overload in packet.overloads(), f"{name} is not a torch op"


def test_op_modules_never_import_torch():
    for path in sorted((OPS_DIR / "aten").glob("*.py")) + [OPS_DIR / "python_builtins.py"]:
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            assert not any(n == "torch" or n.startswith("torch.") for n in names), f"{path.name} imports torch"
