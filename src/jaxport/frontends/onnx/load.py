"""Reading an ONNX file that may come from a stranger: parsed, checked, then its weights loaded.

`load` accepts a path, bytes or a `ModelProto` and returns the model only once it is known to be
well formed: the onnx checker (the model's own checks, not onnxruntime's), declared types and
sizes, external-data locations that stay inside the model's folder, graphs whose names all
resolve. Anything broken is one `ModelFileError` line naming the file and the part.

`onnx` is imported inside the functions that use it: it is an optional dependency (`jaxport[onnx]`).
"""

from __future__ import annotations

import os
import re
from typing import Any

from ... import versions
from ...errors import ModelFileError, one_line


def load(model: Any) -> Any:
    """An `onnx.ModelProto` from a path, bytes or a `ModelProto`, checked (`check`) and with its
    external data loaded. A model onnxruntime would refuse raises `ModelFileError`."""
    return read(model)[0]


def read(model: Any) -> tuple[Any, str]:
    """`load`, and how messages name the model (its path, where it came from a file)."""
    proto, where, path, data = _parse(model)
    check(proto, where, path, data)
    if path is not None and _external_tensors(proto):
        import onnx

        try:
            onnx.external_data_helper.load_external_data_for_model(proto, os.path.dirname(os.path.abspath(path)))
        except Exception as e:  # noqa: BLE001 - OSError, ValidationError, ...: one line naming the file
            raise ModelFileError(f"{path}: cannot load its external weights: {one_line(e)}") from None
    return proto, where


def _parse(model: Any) -> tuple[Any, str, str | None, bytes | None]:
    """(the `ModelProto`, how messages name it, its path if it came from a file, its serialized
    bytes where they were read: the checker then need not serialize it again)."""
    onnx = versions.require("onnx")
    from google.protobuf.message import DecodeError

    if isinstance(model, onnx.ModelProto):
        return model, f"ONNX model '{printable(model.graph.name) or 'unnamed'}'", None, None
    if isinstance(model, (bytes, bytearray)):
        data = bytes(model)
        try:
            return onnx.load_model_from_string(data), "ONNX model bytes", None, data
        except (DecodeError, ValueError, RuntimeError) as e:
            raise ModelFileError(f"ONNX model bytes: not a readable ONNX model (truncated or corrupt?): {one_line(e)}") from None
    path = os.fspath(model)
    if not os.path.isfile(path):
        raise ModelFileError(f"{path}: no such file")
    try:
        if onnx.serialization.registry.get_format_from_file_extension(os.path.splitext(path)[1]) not in (
                None, "protobuf"):  # a text format (.txtpb, .json): onnx reads it by its extension
            return onnx.load(path, load_external_data=False), path, path, None
        with open(path, "rb") as f:
            data = f.read()
        return onnx.load_model_from_string(data), path, path, data
    except (DecodeError, ValueError, RuntimeError, OSError) as e:
        raise ModelFileError(f"{path}: not a readable ONNX model (truncated or corrupt?): {one_line(e)}") from None


def printable(text: str, limit: int = 80) -> str:
    """Text from a model file as a message may quote it: printable, one line, bounded."""
    text = "".join(c if c.isprintable() else "?" for c in text)
    return text if len(text) <= limit else text[:limit] + "..."


#: The newest opset of each domain jaxport binds ops of, where the installed `onnx` does not say:
#: onnxruntime's `com.microsoft` contrib ops are at opset 1 (onnxruntime refuses a newer one).
_NEWEST_CUSTOM_OPSETS = {"com.microsoft": 1}

#: The largest element count a tensor may have: its byte size must fit in an int64.
_MAX_ELEMENTS = 2**63 - 1

#: Names `safetensors` reserves: a weight of that name is written but cannot be read back.
_RESERVED_WEIGHT_NAMES = frozenset({"__metadata__"})


def check(proto, where: str = "ONNX model", path: str | None = None, data: bytes | None = None) -> None:
    """Refuse, with one `ModelFileError` line naming `where` and the value or node at fault, the
    models onnxruntime refuses: `onnx.checker.check_model(full_check=True)` (which runs strict
    shape inference: declared types that differ from what the graph computes, ...), preceded by
    what it misses or words less clearly: no graph (empty bytes), no opset (a file cut before
    its `opset_import`), an opset newer than the installed `onnx` defines, unknown element
    types, negative dims or element counts past int64, a value defined twice, an initializer
    named as `safetensors` reserves, external data the model's folder does not hold."""
    import onnx

    if not proto.graph.node and not proto.graph.output:
        raise ModelFileError(f"{where}: holds no ONNX graph (empty, truncated or not an ONNX file)")
    opsets = {}
    for entry in proto.opset_import:
        opsets["" if entry.domain in ("", "ai.onnx") else entry.domain] = entry.version
    if proto.ir_version >= 3 and not opsets:
        raise ModelFileError(
            f"{where}: imports no opset, which models of IR version 3 and later must (a file cut "
            "short before its opset_import?)")
    if proto.ir_version >= 3 and "" not in opsets:  # onnxruntime guesses its newest: refuse to guess
        node = next((n for n in _nodes(proto.graph) if n.domain in ("", "ai.onnx")), None)
        if node is not None:
            raise ModelFileError(
                f"{where}: uses ONNX op {printable(node.op_type)} but imports no opset of the ONNX domain, "
                "so the version of its ops is unknown: add one to its opset_import")
    newest = {"": onnx.defs.onnx_opset_version(), "ai.onnx.ml": onnx.defs.onnx_ml_opset_version()}
    for domain, version in opsets.items():
        if domain in newest and version > newest[domain]:
            raise ModelFileError(
                f"{where}: imports opset {version} of {domain or 'ai.onnx'}, newer than the installed onnx "
                f"{onnx.__version__} defines ({newest[domain]}): upgrade onnx, or export at opset {newest[domain]}")
        if domain in _NEWEST_CUSTOM_OPSETS and version > _NEWEST_CUSTOM_OPSETS[domain]:
            raise ModelFileError(
                f"{where}: imports opset {version} of {domain}, newer than onnxruntime and jaxport know "
                f"({_NEWEST_CUSTOM_OPSETS[domain]})")
    problem = _graph_problem(proto.graph, set(), "")
    if problem:
        raise ModelFileError(f"{where}: {problem}")
    external = _external_tensors(proto)
    if external and path is None:
        name, location = external[0]
        raise ModelFileError(
            f"{where}: initializer '{printable(name)}' keeps its data in an external file ('{printable(location)}'), which "
            "only a model loaded from its .onnx path can find: pass the path")
    for name, location in external if path is not None else ():
        problem = _external_location_problem(location, os.path.dirname(os.path.abspath(path)))
        if problem:
            raise ModelFileError(f"{where}: initializer '{printable(name)}' keeps its data {problem}")
    if external:  # onnx checks the files' locations (inside the model's folder) on the path form
        _run_checker(path, proto, where)
    else:  # `data`: the model as read (`_parse`), saving a serialization
        if data is None:
            try:
                data = proto.SerializeToString()
            except Exception:  # noqa: BLE001 - past protobuf's 2 GiB: it cannot be checked in memory
                return
        if len(data) < 2**31:
            _run_checker(data, proto, where)


#: The checker's refusals onnxruntime does not share: a main-graph value declared without a
#: type, an element type or a shape (the checker wants all three; onnxruntime infers them), ops
#: `onnx` has no schema for (jaxport then lists every op it lacks, `UnsupportedOpsError`) and
#: deprecated ops (GroupNormalization-18, which onnxruntime and jaxport run).
_UNDECLARED = ("Field 'type' of 'value_info' is required", "Field 'elem_type' of 'type' is required",
               "Field 'shape' of 'type' is required")
_UNREGISTERED = ("No Op registered for ", "No opset import for domain", "No schema registered for ",
                 " is deprecated in domain_version of ")
#: Strict shape inference failing inside the function body an op is defined by (onnx 1.23 cannot
#: infer MeanVarianceNormalization's: its Constant reads the op's `axes` by reference), a fault of
#: onnx, not of the model; onnxruntime runs such models.
_IN_FUNCTION_BODY = re.compile(r"\(op_type:\w+\): \[ShapeInferenceError\] Inference error\(s\): \(op_type:")


def _run_checker(model, proto, where: str) -> None:
    """`onnx.checker.check_model(model, full_check=True)` (`model`: `proto`'s path or bytes), its
    refusal as one `ModelFileError` line; where it only objects to undeclared types
    (`_UNDECLARED`), the check runs again on a copy of `proto` without those declarations (none
    of a graph input: then it is skipped)."""
    import onnx

    try:
        onnx.checker.check_model(model, full_check=True)
        return
    except Exception as e:  # noqa: BLE001 - ValidationError, InferenceError, ValueError: one line
        message = one_line(e)
    if any(text in message for text in _UNREGISTERED):
        return
    if _IN_FUNCTION_BODY.search(message):  # onnx's own bug: checked without shape inference
        try:
            onnx.checker.check_model(model)
            return
        except Exception as e:  # noqa: BLE001
            message = one_line(e)
    if any(text in message for text in _UNDECLARED):
        copy = _without_undeclared(proto)
        if copy is None:
            return
        try:
            onnx.checker.check_model(copy, full_check=True)
            return
        except Exception as e:  # noqa: BLE001
            message = one_line(e)
        if any(text in message for text in _UNREGISTERED):
            return
    raise ModelFileError(f"{where}: onnx.checker refuses it: {_checker_message(message)}") from None


def _without_undeclared(proto):
    """A copy of `proto` whose main graph declares no output or intermediate value without a
    type, element type and shape (None if a graph input lacks one: it cannot be left out)."""
    import onnx

    def declared(value) -> bool:
        kind = value.type.WhichOneof("value")
        if kind in ("tensor_type", "sparse_tensor_type"):
            tensor = getattr(value.type, kind)
            return bool(tensor.elem_type) and tensor.HasField("shape")
        return kind is not None

    if not all(declared(v) for v in proto.graph.input):
        return None
    copy = onnx.ModelProto()
    copy.CopyFrom(proto)
    for field in (copy.graph.output, copy.graph.value_info):
        kept = [v for v in field if declared(v)]
        del field[:]
        field.extend(kept)
    return copy


def _checker_message(message: str) -> str:
    """The checker's reason, element type numbers named (`(1) vs (6)` -> FLOAT vs INT32)."""
    import onnx

    def name(match):
        a, b = (onnx.TensorProto.DataType.Name(int(v)) if int(v) in onnx.TensorProto.DataType.values() else v
                for v in match.groups())
        return f"{a} (inferred) vs {b} (declared)"

    return re.sub(r"elem type: \((\d+)\) vs \((\d+)\)", lambda m: "elem type: " + name(m), message)


def _external_location_problem(location: str, folder: str) -> str | None:
    """What is wrong with an external data `location` for a model in `folder` (which must hold
    it, as onnxruntime requires), or None."""
    shown = printable(location)
    if os.path.isabs(location):
        return f"at an absolute path ('{shown}'); external data must lie in the model's folder"
    target = os.path.normpath(os.path.join(folder, location))
    if os.path.commonpath([folder, target]) != folder:
        return f"in '{shown}', outside the model's folder; external data must lie in it"
    if not os.path.isfile(target):
        return f"in '{shown}', which the model's folder ({folder}) does not hold"
    return None


def _nodes(graph):
    """The nodes of `graph` and of its subgraphs, at any depth."""
    for node in graph.node:
        yield node
        for attr in node.attribute:
            for sub in (*([attr.g] if attr.HasField("g") else []), *attr.graphs):
                yield from _nodes(sub)


def _external_tensors(proto) -> list[tuple[str, str]]:
    """(name, location) of the tensors, subgraphs' included, whose data lives in another file."""
    import onnx

    def tensors(graph):
        yield from graph.initializer
        for sparse in graph.sparse_initializer:
            yield from (sparse.values, sparse.indices)
        for node in graph.node:
            for attr in node.attribute:
                if attr.HasField("t"):
                    yield attr.t
                yield from attr.tensors
                for sub in (*([attr.g] if attr.HasField("g") else []), *attr.graphs):
                    yield from tensors(sub)

    return [(t.name, next((e.value for e in t.external_data if e.key == "location"), "?"))
            for t in tensors(proto.graph) if t.data_location == onnx.TensorProto.EXTERNAL]


def _graph_problem(graph, outer: set[str], scope: str) -> str | None:
    """What the checks `check` adds find wrong in `graph` (its subgraphs included), or None.
    `outer`: the names the enclosing graphs define before the node that owns this graph."""
    where = f" in subgraph '{printable(graph.name)}'" if scope else ""
    for value in graph.input:
        problem = _type_problem(value.type)
        if problem:
            return f"graph input '{printable(value.name)}'{where} {problem}"
    for value in (*graph.output, *graph.value_info):
        problem = _type_problem(value.type)
        if problem:
            return f"value '{printable(value.name)}'{where} {problem}"
    defined: dict[str, str] = {}
    for value in graph.input:
        if value.name in defined:
            return f"graph input '{printable(value.name)}'{where} is declared twice"
        defined[value.name] = f"graph input '{printable(value.name)}'"
    initializers = {}
    tensors = [*graph.initializer, *(s.values for s in graph.sparse_initializer)]
    for tensor in tensors:
        what = f"initializer '{printable(tensor.name)}'{where}"
        if tensor.name in initializers:
            return f"{what} is defined twice"
        if tensor.name in _RESERVED_WEIGHT_NAMES:
            return (f"{what} has the name safetensors reserves for its header, so its weights could "
                    "not be saved and read back (jaxport.emit, export, checkpoints): rename it")
        problem = _tensor_problem(tensor)
        if problem:
            return f"{what} {problem}"
        initializers[tensor.name] = what
    for sparse in graph.sparse_initializer:
        problem = _dims_problem(sparse.dims)
        if problem:
            return f"sparse initializer '{printable(sparse.values.name)}'{where} {problem}"
    for name, what in initializers.items():
        defined.setdefault(name, what)  # an initializer may give a graph input its default value
    for index, node in enumerate(graph.node):
        label = (f"node '{printable(node.name)}' ({printable(node.op_type)})" if node.name
                 else f"node {index} ({printable(node.op_type)})") + where
        for attr in node.attribute:
            for tensor in (*([attr.t] if attr.HasField("t") else []), *attr.tensors):
                problem = _tensor_problem(tensor)
                if problem:
                    return f"attribute '{printable(attr.name)}' of {label}: tensor {problem}"
            if attr.HasField("tp") or attr.type_protos:
                for type_proto in (*([attr.tp] if attr.HasField("tp") else []), *attr.type_protos):
                    problem = _type_problem(type_proto)
                    if problem:
                        return f"attribute '{printable(attr.name)}' of {label}: type {problem}"
            for sub in (*([attr.g] if attr.HasField("g") else []), *attr.graphs):
                problem = _graph_problem(sub, outer | set(defined), scope + "/" + sub.name)
                if problem:
                    return problem
        for name in node.output:
            if not name:
                continue
            if name in defined:
                return f"value '{printable(name)}' is defined twice: by {defined[name]} and by {label}"
            if name in outer:
                return f"{label} redefines '{printable(name)}', a value of the enclosing graph"
            defined[name] = label
    return None


def _type_problem(type_proto) -> str | None:
    """What is wrong with a declared type (an unknown element type, a negative dim, more
    elements than int64 counts), or None."""
    import onnx

    kind = type_proto.WhichOneof("value")
    if kind in ("tensor_type", "sparse_tensor_type"):
        tensor = getattr(type_proto, kind)
        if tensor.elem_type not in onnx.TensorProto.DataType.values():
            return f"has an unknown element type ({tensor.elem_type})"
        if tensor.HasField("shape"):
            dims = [d.dim_value for d in tensor.shape.dim if d.HasField("dim_value")]
            return _dims_problem(dims, declared=True)
        return None
    if kind == "sequence_type":
        return _type_problem(type_proto.sequence_type.elem_type)
    if kind == "optional_type":
        return _type_problem(type_proto.optional_type.elem_type)
    if kind == "map_type":
        if type_proto.map_type.key_type not in onnx.TensorProto.DataType.values():
            return f"has an unknown map key type ({type_proto.map_type.key_type})"
        return _type_problem(type_proto.map_type.value_type)
    return None


def _dims_problem(dims, declared: bool = False) -> str | None:
    dims = [int(d) for d in dims]
    negative = [d for d in dims if d < 0]
    if negative:
        hint = " (a size unknown until run time is a named dim_param)" if declared else ""
        return f"has a negative dimension ({negative[0]}) in its shape {dims}{hint}"
    count = 1
    for d in dims:
        count *= d
    if count > _MAX_ELEMENTS:
        return f"has shape {dims}: {count:,} elements, more than an int64 counts"
    return None


def _tensor_problem(tensor) -> str | None:
    import onnx

    if tensor.data_type not in onnx.TensorProto.DataType.values():
        return f"has an unknown element type ({tensor.data_type})"
    return _dims_problem(tensor.dims)
