"""`jaxport inspect`: a model file described without running it.

`summarize(path)` gives its inputs and outputs, parameter count and size, an op histogram and the
ops jaxport lacks, as JSON-able data; `format_summary` as text for people. `onnx` is imported
inside the functions that read ONNX: it is an optional dependency (`jaxport[onnx]`).
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import numpy as np
import torch

from ..frontends import onnx as onnx_frontend
from ..frontends import torch_export
from ..frontends.aten_schema import op_name
from ..frontends.pt2 import load_exported_program
from ..ops import registry
from .files import file_kind


def _value(name: str, shape, dtype) -> dict:
    dims = None if shape is None else ["?" if d is None else d for d in shape]
    return {"name": name, "shape": dims, "dtype": dtype}


def _onnx_type(type_proto) -> tuple[Any, str]:
    kind = type_proto.WhichOneof("value")
    if kind != "tensor_type":
        return None, kind or "unknown"
    import onnx  # optional (`jaxport[onnx]`)

    tensor = type_proto.tensor_type
    dtype = onnx.TensorProto.DataType.Name(tensor.elem_type).lower()
    if not tensor.HasField("shape"):
        return None, dtype
    dims = [d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in tensor.shape.dim]
    return dims, dtype


def _summarize_onnx(path: str) -> dict:
    proto = onnx_frontend.load(path)
    graph = proto.graph
    opsets = {("ai.onnx" if e.domain in ("", "ai.onnx") else e.domain): e.version for e in proto.opset_import}
    initializers = {t.name for t in graph.initializer}
    histogram: Counter[str] = Counter()
    missing: dict[str, list[str]] = {}
    custom: dict[str, str] = {}  # op -> where its lowering comes from, when not jaxport's own

    def visit(g):
        for index, node in enumerate(g.node):
            domain = "ai.onnx" if node.domain in ("", "ai.onnx") else node.domain
            key = node.op_type if domain == "ai.onnx" else f"{domain}::{node.op_type}"
            histogram[key] += 1
            opset = opsets.get(domain, 1 if domain == "ai.onnx" else None)
            onnx_domain = "" if domain == "ai.onnx" else domain
            version = None if opset is None else registry.onnx_implementation(node.op_type, onnx_domain, opset)
            op = registry.onnx_program_op(node.op_type, onnx_domain, version)
            if registry.lookup(op) is None:
                missing.setdefault(key, []).append(node.name or f"{node.op_type}_{index}")
            elif where := registry.provenance(op):
                custom[key] = where
            for attr in node.attribute:
                if attr.HasField("g"):
                    visit(attr.g)
                for sub in attr.graphs:
                    visit(sub)

    visit(graph)
    sizes = [(int(np.prod(t.dims)) if t.dims else 1, t.data_type) for t in graph.initializer]
    import onnx

    n_bytes = sum(n * np.dtype(onnx.helper.tensor_dtype_to_np_dtype(dt)).itemsize
                  for n, dt in sizes if dt != onnx.TensorProto.STRING)
    return {
        "file": path,
        "format": "onnx",
        "producer": f"{proto.producer_name} {proto.producer_version}".strip(),
        "ir_version": proto.ir_version,
        "opsets": opsets,
        "inputs": [_value(v.name, *_onnx_type(v.type)) for v in graph.input if v.name not in initializers],
        "outputs": [_value(v.name, *_onnx_type(v.type)) for v in graph.output],
        "parameters": {"tensors": len(sizes), "values": sum(n for n, _ in sizes), "bytes": int(n_bytes)},
        "ops": dict(histogram.most_common()),
        "unsupported": {op: names for op, names in sorted(missing.items())},
        "custom_lowerings": dict(sorted(custom.items())),
    }


def _summarize_pt2(path: str) -> dict:
    ep = load_exported_program(path)
    user_inputs = [s for s in ep.graph_signature.input_specs
                   if s.kind == torch.export.graph_signature.InputKind.USER_INPUT]
    nodes = {n.name: n for n in ep.graph.nodes}

    def describe(name: str) -> dict:
        val = nodes[name].meta.get("val") if name in nodes else None
        if isinstance(val, torch.Tensor):
            shape = [int(d) if isinstance(d, int) else None for d in val.shape]
            return _value(name, shape, str(val.dtype).removeprefix("torch."))
        return _value(name, None, type(val).__name__)

    outputs = [s.arg.name for s in ep.graph_signature.output_specs
               if s.kind == torch.export.graph_signature.OutputKind.USER_OUTPUT and hasattr(s.arg, "name")]
    state = dict(ep.state_dict)
    state.update({k: v for k, v in ep.constants.items() if isinstance(v, torch.Tensor)})
    histogram = Counter(op_name(n.target) for n in ep.graph.nodes if n.op == "call_function")
    lowered = torch_export.lowerable(ep)
    program, _ = torch_export.to_program(lowered)
    missing: dict[str, list[str]] = {}
    for use in program.unsupported():
        missing.setdefault(use.op, []).append(use.node + (f" at {use.source}" if use.source else ""))
    return {
        "file": path,
        "format": "pt2",
        "inputs": [describe(s.arg.name) for s in user_inputs],
        "outputs": [describe(name) for name in outputs],
        "parameters": {"tensors": len(state), "values": sum(t.numel() for t in state.values()),
                       "bytes": sum(t.numel() * t.element_size() for t in state.values())},
        "ops": dict(histogram.most_common()),
        "unsupported": missing,
        "custom_lowerings": program.custom_lowerings(),
    }


def summarize(path: str) -> dict:
    """A JSON-able description of a model file (see the module docstring)."""
    return _summarize_onnx(path) if file_kind(path) == "onnx" else _summarize_pt2(path)


def format_summary(info: dict) -> str:
    """The summary as text for people."""

    def values(items):
        return [f"  {v['name']}: {v['dtype']}"
                + ("" if v["shape"] is None else "[" + ", ".join(str(d) for d in v["shape"]) + "]")
                for v in items]

    p = info["parameters"]
    lines = [f"{info['file']} ({info['format']})"]
    if info.get("producer"):
        lines.append(f"producer: {info['producer']}, IR version {info['ir_version']}")
    if info.get("opsets"):
        lines.append("opsets: " + ", ".join(f"{d} {v}" for d, v in info["opsets"].items()))
    lines += ["inputs:", *values(info["inputs"]), "outputs:", *values(info["outputs"])]
    lines.append(f"parameters: {p['values']:,} values in {p['tensors']} tensors ({p['bytes'] / 2**20:.2f} MiB)")
    lines.append(f"ops ({sum(info['ops'].values())} nodes, {len(info['ops'])} kinds):")
    width = max((len(op) for op in info["ops"]), default=0)
    lines += [f"  {op:<{width}}  {count}" for op, count in info["ops"].items()]
    if info["unsupported"]:
        lines.append(f"unsupported by jaxport ({len(info['unsupported'])} op(s)):")
        for op, places in info["unsupported"].items():
            shown = ", ".join(places[:3]) + (f", ... ({len(places)} uses)" if len(places) > 3 else "")
            lines.append(f"  {op}: {shown}")
    else:
        lines.append("jaxport supports every op in this model")
    if info.get("custom_lowerings"):
        lines.append("lowerings not jaxport's own:")
        lines += [f"  {op}: {where}" for op, where in info["custom_lowerings"].items()]
    return "\n".join(lines)


def run(opts) -> int:
    """`jaxport inspect`: the summary as text, or as JSON with `--json`."""
    info = summarize(opts.file)
    print(json.dumps(info, indent=2) if opts.json else format_summary(info))
    return 0
