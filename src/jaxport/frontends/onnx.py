"""ONNX `ModelProto` -> `Program`, and `from_onnx`.

The model is parsed with the `onnx` package (external-data weights included) and
run through ONNX shape inference, whose value types become the nodes' expected
shapes and dtypes. Each node is bound to the newest lowering of its op whose
`since` version is not later than the model's opset for that domain.

Values that ONNX graphs compute shapes from (`Shape`, `Constant`, small integer
initializers) stay concrete NumPy/JAX values, so ops such as `Reshape` read
their shape operands statically even under `jax.jit`: floating-point
initializers are `params`, except one-value literals (scales, epsilons) and
those an op reads statically (Resize's scales); integer and boolean
initializers of up to `_STATIC_INITIALIZER_SIZE` values are constants.
"""

from __future__ import annotations

import collections
import os
import re
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from ..errors import ModelFileError, UnsupportedDtypeError, one_line
from ..model import JaxModel, flatten_by_name
from ..ops import registry
from ..program import Input, Node, Program, Ref, Subgraph, TensorSpec

#: Integer/boolean initializers up to this many values are baked in as constants (they are
#: shapes, axes and indices, which ops need statically); larger ones are params.
_STATIC_INITIALIZER_SIZE = 4096


def load(model: Any) -> Any:
    """An `onnx.ModelProto` from a path, bytes or a `ModelProto`, checked (`check`) and with its
    external data loaded. A model onnxruntime would refuse raises `ModelFileError`."""
    return _load(model)[0]


def _load(model: Any) -> tuple[Any, str]:
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
    from google.protobuf.message import DecodeError

    import onnx

    if isinstance(model, onnx.ModelProto):
        return model, f"ONNX model '{_printable(model.graph.name) or 'unnamed'}'", None, None
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


def _printable(text: str, limit: int = 80) -> str:
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
                f"{where}: uses ONNX op {_printable(node.op_type)} but imports no opset of the ONNX domain, "
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
            f"{where}: initializer '{_printable(name)}' keeps its data in an external file ('{_printable(location)}'), which "
            "only a model loaded from its .onnx path can find: pass the path")
    for name, location in external if path is not None else ():
        problem = _external_location_problem(location, os.path.dirname(os.path.abspath(path)))
        if problem:
            raise ModelFileError(f"{where}: initializer '{_printable(name)}' keeps its data {problem}")
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
    shown = _printable(location)
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
    where = f" in subgraph '{_printable(graph.name)}'" if scope else ""
    for value in graph.input:
        problem = _type_problem(value.type)
        if problem:
            return f"graph input '{_printable(value.name)}'{where} {problem}"
    for value in (*graph.output, *graph.value_info):
        problem = _type_problem(value.type)
        if problem:
            return f"value '{_printable(value.name)}'{where} {problem}"
    defined: dict[str, str] = {}
    for value in graph.input:
        if value.name in defined:
            return f"graph input '{_printable(value.name)}'{where} is declared twice"
        defined[value.name] = f"graph input '{_printable(value.name)}'"
    initializers = {}
    tensors = [*graph.initializer, *(s.values for s in graph.sparse_initializer)]
    for tensor in tensors:
        what = f"initializer '{_printable(tensor.name)}'{where}"
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
            return f"sparse initializer '{_printable(sparse.values.name)}'{where} {problem}"
    for name, what in initializers.items():
        defined.setdefault(name, what)  # an initializer may give a graph input its default value
    for index, node in enumerate(graph.node):
        label = (f"node '{_printable(node.name)}' ({_printable(node.op_type)})" if node.name
                 else f"node {index} ({_printable(node.op_type)})") + where
        for attr in node.attribute:
            for tensor in (*([attr.t] if attr.HasField("t") else []), *attr.tensors):
                problem = _tensor_problem(tensor)
                if problem:
                    return f"attribute '{_printable(attr.name)}' of {label}: tensor {problem}"
            if attr.HasField("tp") or attr.type_protos:
                for type_proto in (*([attr.tp] if attr.HasField("tp") else []), *attr.type_protos):
                    problem = _type_problem(type_proto)
                    if problem:
                        return f"attribute '{_printable(attr.name)}' of {label}: type {problem}"
            for sub in (*([attr.g] if attr.HasField("g") else []), *attr.graphs):
                problem = _graph_problem(sub, outer | set(defined), scope + "/" + sub.name)
                if problem:
                    return problem
        for name in node.output:
            if not name:
                continue
            if name in defined:
                return f"value '{_printable(name)}' is defined twice: by {defined[name]} and by {label}"
            if name in outer:
                return f"{label} redefines '{_printable(name)}', a value of the enclosing graph"
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


def _infer_shapes(model):
    import onnx

    try:
        return onnx.shape_inference.infer_shapes(model, check_type=False, strict_mode=False, data_prop=True)
    except Exception:  # noqa: BLE001 - inference is an aid; conversion works without it
        return model


def np_dtype(elem_type: int) -> np.dtype:
    """The NumPy dtype of an ONNX element type (bfloat16 and float8 via ml_dtypes)."""
    import onnx

    if elem_type == onnx.TensorProto.UNDEFINED:
        raise TypeError("undefined element type")
    dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem_type))
    if dtype == np.dtype(object):
        raise TypeError(onnx.TensorProto.DataType.Name(elem_type).lower())
    return dtype


def _spec(type_proto) -> TensorSpec | None:
    """A TensorSpec for a tensor type; None for sequences, optionals or unknown types."""
    if not type_proto.HasField("tensor_type"):
        return None
    tensor = type_proto.tensor_type
    if tensor.elem_type == 0:  # declared without an element type
        return None
    dtype = np_dtype(tensor.elem_type)
    if not tensor.HasField("shape"):
        return TensorSpec(None, dtype)
    shape = tuple(d.dim_value if d.HasField("dim_value") else None for d in tensor.shape.dim)
    return TensorSpec(shape, dtype)


def _dtype_problem(type_proto) -> str | None:
    """Why a declared type is one jaxport cannot hold (strings, ...), or None."""
    kind = type_proto.WhichOneof("value")
    if kind == "tensor_type":
        try:
            np_dtype(type_proto.tensor_type.elem_type)
        except TypeError as e:
            if str(e) == "undefined element type":
                return None
            return f"{e} tensors"
        return None
    if kind == "sequence_type":
        return _dtype_problem(type_proto.sequence_type.elem_type)
    if kind == "optional_type":
        return _dtype_problem(type_proto.optional_type.elem_type)
    if kind == "map_type":
        return "maps"
    return None


def _type_value(type_proto):
    """A TYPE_PROTO attribute as a lowering sees it: a dtype, or ("sequence"|"optional", inner)."""
    kind = type_proto.WhichOneof("value")
    if kind == "tensor_type":
        return np_dtype(type_proto.tensor_type.elem_type)
    if kind == "sequence_type":
        return ("sequence", _type_value(type_proto.sequence_type.elem_type))
    if kind == "optional_type":
        return ("optional", _type_value(type_proto.optional_type.elem_type))
    return None


def _tensor_value(tensor) -> np.ndarray:
    from onnx import numpy_helper

    try:
        return numpy_helper.to_array(tensor)
    except Exception as e:  # noqa: BLE001 - malformed data gets one clear line
        raise ModelFileError(f"tensor '{tensor.name}' cannot be read: {e}") from None


def _sparse_value(sparse) -> np.ndarray:
    values = _tensor_value(sparse.values)
    indices = _tensor_value(sparse.indices).astype(np.int64)
    dense = np.zeros(tuple(sparse.dims), values.dtype)
    if indices.ndim == 1:  # linear indices
        dense.reshape(-1)[indices] = values
    else:
        dense[tuple(indices.T)] = values
    return dense


class _Converter:
    """Converts one graph (and, recursively, its subgraphs) into a Program."""

    def __init__(self, opsets: Mapping[str, int], specs: Mapping[str, TensorSpec | None]):
        self.opsets = opsets
        self.specs = specs
        self.dtype_problems: list[str] = []

    def attribute(self, attr, runtime: set[str]):
        import onnx

        kind = attr.type
        A = onnx.AttributeProto
        if kind == A.FLOAT:
            return float(attr.f)
        if kind == A.INT:
            return int(attr.i)
        if kind == A.STRING:
            return attr.s.decode("utf-8", "replace")
        if kind == A.TENSOR:
            return _tensor_value(attr.t)
        if kind == A.SPARSE_TENSOR:
            return _sparse_value(attr.sparse_tensor)
        if kind == A.GRAPH:
            return self.subgraph(attr.g, runtime)
        if kind == A.TYPE_PROTO:
            return _type_value(attr.tp)
        if kind == A.FLOATS:
            return tuple(float(v) for v in attr.floats)
        if kind == A.INTS:
            return tuple(int(v) for v in attr.ints)
        if kind == A.STRINGS:
            return tuple(v.decode("utf-8", "replace") for v in attr.strings)
        if kind == A.TENSORS:
            return tuple(_tensor_value(t) for t in attr.tensors)
        if kind == A.GRAPHS:
            return tuple(self.subgraph(g, runtime) for g in attr.graphs)
        if kind == A.SPARSE_TENSORS:
            return tuple(_sparse_value(t) for t in attr.sparse_tensors)
        if kind == A.TYPE_PROTOS:
            return tuple(_type_value(t) for t in attr.type_protos)
        raise ModelFileError(f"attribute '{attr.name}' has an unknown type ({kind})")

    def bind(self, proto) -> tuple[str, int | None, int | None]:
        """(program op name, the lowering's `since` version or None, the domain's opset)."""
        domain = "" if proto.domain in ("", "ai.onnx") else proto.domain
        opset = self.opsets.get(domain, 1 if domain == "" else None)
        version = None if opset is None else registry.onnx_implementation(proto.op_type, domain, opset)
        return registry.onnx_program_op(proto.op_type, domain, version), version, opset

    def node(self, proto, index: int, runtime: set[str]) -> Node:
        """`runtime`: the values known only when the model runs (derived from its inputs or
        params, not from shapes and constants)."""
        op, version, opset = self.bind(proto)
        kwargs = {attr.name: self.attribute(attr, runtime) for attr in proto.attribute}
        fn = registry.lookup(op) if version is not None else None
        if fn is not None and "output_count" in (fn.__kwdefaults__ or {}):
            kwargs["output_count"] = len(proto.output)
        label = proto.name or f"{proto.op_type}_{index}"
        static = registry.ONNX_STATIC_INPUTS.get(op, ())
        reads_runtime_shape = any(
            position < len(proto.input) and proto.input[position] in runtime for position in static
        )
        return Node(
            name=f"{label}#{index}",
            op=op,
            args=tuple(Ref(name) if name else None for name in proto.input),
            kwargs=kwargs,
            expected=tuple(self.specs.get(name) for name in proto.output),
            module_path=proto.name,
            source=f"{proto.domain or 'ai.onnx'} {proto.op_type}, opset {opset}",
            outputs=tuple(proto.output),
            value_dependent_shape=reads_runtime_shape or op in registry.ONNX_VALUE_DEPENDENT,
        )

    def graph(self, graph, outer_runtime: set[str]) -> tuple[Program, dict[str, np.ndarray], list[str]]:
        """(program, {initializer: value} bound to params, names read from enclosing graphs).

        `outer_runtime`: the enclosing graphs' values that are known only when the model runs.
        """
        # Value names are scoped: sibling branches may each define their own `o`.
        enclosing = self.specs
        self.specs = collections.ChainMap(_graph_specs(graph), enclosing)
        try:
            return self._graph(graph, outer_runtime)
        finally:
            self.specs = enclosing

    def _graph(self, graph, outer_runtime: set[str]) -> tuple[Program, dict[str, np.ndarray], list[str]]:
        initializers = {t.name: _tensor_value(t) for t in graph.initializer}
        initializers.update({s.values.name: _sparse_value(s) for s in graph.sparse_initializer})
        # Initializers that ops read statically (Resize's float scales) stay constants.
        static_operands = {
            proto.input[position]
            for proto in graph.node
            for position in registry.ONNX_STATIC_INPUTS.get(self.bind(proto)[0], ())
            if position < len(proto.input)
        }
        params = {k: v for k, v in initializers.items() if _is_param(v) and k not in static_operands}
        constants = {k: v for k, v in initializers.items() if k not in params}
        inputs = [Input(v.name, v.name, self._declared(v, f"graph input '{v.name}'"))
                  for v in graph.input if v.name not in initializers]
        defined = set(initializers) | {i.value for i in inputs}
        runtime = {i.value for i in inputs} | set(params) | outer_runtime
        nodes, captures = [], []
        for index, proto in enumerate(graph.node):
            node = self.node(proto, index, runtime)
            if proto.op_type not in _SHAPE_ONLY and any(name in runtime for name in _reads(node)):
                runtime.update(name for name in proto.output if name)
            for name in _reads(node):
                if name not in defined and name not in captures:
                    captures.append(name)
            defined.update(name for name in proto.output if name)
            nodes.append(node)
        for value in graph.output:
            self._declared(value, f"graph output '{value.name}'")
            if value.name not in defined and value.name not in captures:
                captures.append(value.name)
        program = Program(
            state_inputs=[(name, name) for name in params],
            constants=constants,
            user_inputs=inputs,
            nodes=nodes,
            outputs=[Ref(v.name) for v in graph.output],
        )
        return program, params, captures

    def subgraph(self, graph, outer_runtime: set[str]) -> Subgraph:
        program, params, captures = self.graph(graph, set(outer_runtime))
        # A subgraph's own initializers are constants of its program, never params.
        program.constants.update(params)
        program.state_inputs = []
        program.user_inputs += [Input(name, name, self.specs.get(name)) for name in captures]
        return Subgraph(program, tuple(captures))

    def _declared(self, value, what: str) -> TensorSpec | None:
        problem = _dtype_problem(value.type)
        if problem:
            self.dtype_problems.append(f"{what} holds {problem}")
            return None
        return _spec(value.type)


#: Ops whose outputs depend only on their inputs' shapes, which are static under jax.jit.
_SHAPE_ONLY = frozenset({"Shape", "Size"})


def _is_param(value: np.ndarray) -> bool:
    # A one-value float initializer is a literal the exporter hoisted (a scale, an epsilon, a
    # GELU coefficient), not a weight: as a constant XLA folds it (GPT-2: 0.34 -> 0.23 ms).
    if value.dtype.kind in "fcV":
        return value.size > 1
    return value.size > _STATIC_INITIALIZER_SIZE


def _reads(node: Node) -> Iterable[str]:
    """The names a node reads: its inputs and what its subgraphs capture."""
    for arg in node.args:
        if isinstance(arg, Ref):
            yield arg.name
    for _, sub in node.subgraphs():
        yield from sub.captures


def _graph_specs(graph) -> dict[str, TensorSpec | None]:
    """The value types one graph declares or shape inference recorded (not its subgraphs')."""
    return {value.name: _spec(value.type) for value in (*graph.input, *graph.output, *graph.value_info)
            if _dtype_problem(value.type) is None}


def _dtype_problems_of_nodes(model) -> list[str]:
    """Nodes whose inferred output types jaxport cannot hold (string tensors, maps)."""
    problems = []
    value_types = {v.name: v.type for v in model.graph.value_info}
    for index, node in enumerate(model.graph.node):
        for name in node.output:
            if name in value_types:
                problem = _dtype_problem(value_types[name])
                if problem:
                    problems.append(f"node '{node.name or node.op_type + '_' + str(index)}' "
                                    f"({node.op_type}) produces {problem}")
    return problems


def to_program(model) -> tuple[Program, dict[str, np.ndarray]]:
    """Convert a loaded `ModelProto` into a Program and its params."""
    program, params, _ = _to_program(model)
    return program, params


def _to_program(model) -> tuple[Program, dict[str, np.ndarray], dict[str, np.dtype]]:
    """`to_program`, and the declared element types of the graph outputs ONNX's shape
    inference could not check (`_unchecked_outputs`): {name: dtype} of every output if any."""
    opsets: dict[str, int] = {}
    for entry in model.opset_import:
        opsets["" if entry.domain in ("", "ai.onnx") else entry.domain] = entry.version
    if not opsets:  # IR version 1-2 models carry no opset_import
        opsets[""] = 1
    inferred = _infer_shapes(model)
    converter = _Converter(opsets, {})
    program, params, captures = converter.graph(inferred.graph, set())
    problems = converter.dtype_problems + _dtype_problems_of_nodes(inferred)
    if problems:
        raise UnsupportedDtypeError(problems)
    if captures:
        raise ModelFileError(f"the graph reads values nothing defines: {', '.join(captures)}")
    program.matmul_precision = "float32"  # ONNX's float products are float32's, as onnxruntime's
    declared = {}
    if _unchecked_outputs(inferred.graph):
        declared = {v.name: np_dtype(v.type.tensor_type.elem_type) for v in model.graph.output
                    if v.type.HasField("tensor_type") and v.type.tensor_type.elem_type}
    return program, params, declared


def _unchecked_outputs(graph) -> list[str]:
    """Graph outputs whose declared element type ONNX's (strict, in `check`) shape inference
    did not compare with a computed one: made by an op `onnx` has no schema for (onnxruntime's
    `com.microsoft` ops, whose schemas onnxruntime has), or from inputs of unknown type."""
    import onnx

    typed = {v.name for v in (*graph.input, *graph.value_info)
             if v.type.HasField("tensor_type") and v.type.tensor_type.elem_type}
    typed |= {t.name for t in graph.initializer} | {s.values.name for s in graph.sparse_initializer}
    producers = {name: node for node in graph.node for name in node.output if name}
    unchecked = []
    for value in graph.output:
        node = producers.get(value.name)
        if node is None or not value.type.HasField("tensor_type") or not value.type.tensor_type.elem_type:
            continue
        domain = "" if node.domain in ("", "ai.onnx") else node.domain
        if not onnx.defs.has(node.op_type, domain) or any(name and name not in typed for name in node.input):
            unchecked.append(value.name)
    return unchecked


def _computed_output_problem(program: Program, params, declared: Mapping[str, np.dtype]) -> str | None:
    """Where a graph output's lowering computes another element type than the graph declares
    (which the interpreter would silently cast), found by tracing the model abstractly on
    inputs of the declared shapes (a symbolic dim taken as 2); None if none is, or if the model
    cannot be traced so (value-dependent shapes, unknown ranks): the run casts then."""
    import jax

    from ..program import interpret

    examples = []
    for spec in program.user_inputs:
        if spec.spec is None or spec.spec.shape is None:
            return None
        examples.append(jax.ShapeDtypeStruct(tuple(2 if d is None else d for d in spec.spec.shape),
                                             jax.dtypes.canonicalize_dtype(spec.spec.dtype)))
    computed: dict[str, tuple[Node, np.dtype]] = {}

    def observe(seen, index, concrete, out):
        if seen is program:
            node = program.nodes[index]
            for name, value in zip(node.outputs, out if isinstance(out, tuple) else (out,)):
                if name in declared and hasattr(value, "dtype"):
                    computed[name] = (node, np.dtype(value.dtype))

    try:
        jax.eval_shape(lambda p, *xs: interpret(program, p, xs, observe=observe)[0], params, *examples)
    except Exception:  # noqa: BLE001 - made-up sizes a model may not take: left to the run
        return None
    for name, want in declared.items():
        if name in computed:
            node, got = computed[name]
            if jax.dtypes.canonicalize_dtype(got) != jax.dtypes.canonicalize_dtype(want):
                return (f"graph output '{_printable(name)}' is declared {np.dtype(want).name} but "
                        f"node '{_printable(node.module_path or node.name)}' ({node.source}) computes "
                        f"{np.dtype(got).name}")
    return None


def _build_outputs(flat: list):
    return flat[0] if len(flat) == 1 else tuple(flat)


def from_onnx(model: Any, *, name: str | None = None) -> JaxModel:
    """Load an ONNX model (a path, bytes or `onnx.ModelProto`) as a `JaxModel`.

    `params` holds the graph's floating-point initializers under their graph names, except
    one-value literals (scale factors, epsilons), which are constants XLA can fold;
    `apply(params, *inputs)` takes the graph inputs in order (or by name) and returns the
    output, or a tuple of the outputs in graph order; `output_names` names them.
    """
    return load_and_convert(model, name=name)[1]


def load_and_convert(model: Any, *, name: str | None = None) -> tuple[Any, JaxModel]:
    """(the checked `onnx.ModelProto`, `from_onnx` of it): the model is read and checked once."""
    proto, where = _load(model)
    program, params, declared = _to_program(proto)
    program.check_supported()
    if declared and not program.value_dependent_nodes():
        problem = _computed_output_problem(program, params, declared)
        if problem:
            raise ModelFileError(f"{where}: {problem}")
    if name is None:
        name = proto.graph.name or (os.path.basename(os.fspath(model)) if isinstance(model, (str, os.PathLike)) else "onnx")
    converted = JaxModel(
        program,
        params,  # NumPy: JaxModel checks what narrowing to 32 bits would change (`_narrowing`)
        parameter_names=list(params),
        flatten_inputs=flatten_by_name([i.name for i in program.user_inputs]),
        build_outputs=_build_outputs,
        name=name,
    )
    converted.output_names = tuple(v.name for v in proto.graph.output)
    return proto, converted


__all__ = ["from_onnx", "load", "load_and_convert", "to_program"]
