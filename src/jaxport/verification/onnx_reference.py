"""onnxruntime as the reference for an `.onnx` file: a CPU session whose refusals are one line,
and, node by node, the same graph with every node's output exposed, fetched in chunks.

`onnxruntime` and `onnx` (optional dependencies) are imported inside the functions that use them.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from .. import versions
from ..errors import ModelFileError, one_line
from ..frontends import onnx as onnx_frontend
from ..ir import Node


def onnxruntime_session(path: str, proto, optimize: bool = True):
    """An onnxruntime CPU session of `proto`; its refusal as one `ModelFileError` line."""
    onnxruntime = versions.require("onnxruntime")  # optional (`jaxport[onnx]`)

    try:
        # onnxruntime logs its warnings and refusals on stderr; a refusal is reported below instead.
        options = onnxruntime.SessionOptions()
        options.log_severity_level = 4
        if not optimize:
            # Node by node, each value is the op's own: no fusions across nodes.
            options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
        return _RunChecked(path, onnxruntime.InferenceSession(proto.SerializeToString(), options,
                                                              providers=["CPUExecutionProvider"]))
    except Exception as e:  # noqa: BLE001 - the reference's failure is reported, not raised
        raise ModelFileError(f"onnxruntime cannot run {path}: {_onnxruntime_reason(e)}") from None


def _quiet_run_options():
    import onnxruntime  # optional

    run_options = onnxruntime.RunOptions()
    run_options.log_severity_level = 4
    return run_options


@dataclasses.dataclass
class _RunChecked:
    """An onnxruntime session whose failures to run are one `ModelFileError` line."""

    path: str
    session: Any

    def run(self, names, feeds, run_options=None) -> list:
        try:
            return self.session.run(names, feeds, run_options or _quiet_run_options())
        except Exception as e:  # noqa: BLE001 - the reference's failure is reported, not raised
            raise ModelFileError(f"onnxruntime cannot run {self.path}: {_onnxruntime_reason(e)}") from None


def _onnxruntime_reason(error: Exception) -> str:
    """onnxruntime's message without the C++ source location and signature it starts with."""
    text = one_line(error)
    if "onnxruntime_src/" in text and ") " in text:
        text = text[:text.index(" : ", text.index("FAIL") if "FAIL" in text else 0) + 3] \
            + text.rsplit(") ", 1)[1] if "FAIL" in text else text.rsplit(") ", 1)[1]
    return text[:300]


#: The most bytes of intermediate values onnxruntime hands back from one run when localizing;
#: more are fetched in further runs, in node order.
ONNX_CHUNK_BYTES = 2**30


class OnnxReference:
    """onnxruntime with every node's output exposed as a graph output, fetched a chunk of nodes at
    a time (at most `ONNX_CHUNK_BYTES` by the shapes ONNX infers), each value handed over once."""

    def __init__(self, path: str, proto, feeds: dict[str, np.ndarray]):
        import onnx  # optional

        self.feeds = feeds
        self.graph_outputs = [v.name for v in proto.graph.output]
        produced = [name for node in proto.graph.node for name in node.output if name]
        exposed = onnx.ModelProto()
        exposed.CopyFrom(proto)
        listed = set(self.graph_outputs)
        exposed.graph.output.extend(onnx.ValueInfoProto(name=n) for n in produced if n not in listed)
        self.session = onnxruntime_session(path, exposed, optimize=False)
        self.chunks = _chunks(produced, _value_bytes(proto, feeds), ONNX_CHUNK_BYTES)
        self.chunk_of = {name: i for i, chunk in enumerate(self.chunks) for name in chunk}
        self.ready: dict[str, Any] = {}
        self.final: dict[str, Any] = {}

    def has(self, node: Node) -> bool:
        return any(name in self.chunk_of for name in node.outputs if name)

    def values(self, node: Node) -> dict[str, Any]:
        found = {}
        for name in node.outputs:
            if name in self.chunk_of:
                if name not in self.ready:
                    chunk = self.chunks[self.chunk_of[name]]
                    self.ready.update(zip(chunk, self.session.run(chunk, self.feeds)))
                found[name] = self.ready.pop(name)
                if name in self.graph_outputs:
                    self.final[name] = found[name]
        return found

    def outputs(self) -> list:
        missing = [n for n in self.graph_outputs if n not in self.final]
        if missing:
            self.final.update(zip(missing, self.session.run(missing, self.feeds)))
        return [self.final[n] for n in self.graph_outputs]


def _value_bytes(proto, feeds: Mapping[str, np.ndarray]) -> dict[str, int]:
    """Each value's size in bytes by the shapes ONNX infers (named dims from the inputs' sizes);
    a value of unknown size counts as the largest known one."""
    import onnx  # optional

    try:
        inferred = onnx.shape_inference.infer_shapes(proto).graph
    except Exception:  # noqa: BLE001 - sizes are an estimate: without inference, all unknown
        inferred = proto.graph
    named: dict[str, int] = {}
    for value in inferred.input:
        if value.name in feeds:
            for d, size in zip(value.type.tensor_type.shape.dim, np.shape(feeds[value.name])):
                if d.dim_param:
                    named[d.dim_param] = int(size)
    sizes: dict[str, int | None] = {}
    for value in (*inferred.value_info, *inferred.output):
        tensor = value.type.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") else named.get(d.dim_param) for d in tensor.shape.dim]
        known = tensor.HasField("shape") and tensor.elem_type and all(d is not None for d in dims)
        sizes[value.name] = math.prod(dims) * onnx_frontend.np_dtype(tensor.elem_type).itemsize if known else None
    largest = max([s for s in sizes.values() if s is not None] + [np.asarray(x).nbytes for x in feeds.values()],
                  default=0)
    return {name: largest if size is None else size for name, size in sizes.items()} | {"": largest}


def _chunks(names: list[str], sizes: Mapping[str, int], budget: int) -> list[list[str]]:
    """`names` cut in order into runs of at most `budget` bytes (a larger value alone)."""
    chunks: list[list[str]] = [[]]
    total = 0
    for name in names:
        size = sizes.get(name, sizes[""])
        if chunks[-1] and total + size > budget:
            chunks.append([])
            total = 0
        chunks[-1].append(name)
        total += size
    return [c for c in chunks if c]
