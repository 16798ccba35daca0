"""ONNX `ModelProto` -> `Program`: the translation `jaxport.from_onnx` runs on a checked model.

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

`onnx` is imported inside the functions that use it: it is an optional dependency (`jaxport[onnx]`).
"""

from __future__ import annotations

import collections
import os
from collections.abc import Iterable, Mapping
from typing import Any

import jax
import numpy as np

from ...errors import ModelFileError, UnsupportedDtypeError
from ...ir import (
    Input,
    Node,
    Program,
    Ref,
    Subgraph,
    TensorSpec,
    Translation,
    flatten_by_name,
    interpret,
)
from ...ops import registry
from .load import printable, read

#: Integer/boolean initializers up to this many values are baked in as constants (they are
#: shapes, axes and indices, which ops need statically); larger ones are params.
_STATIC_INITIALIZER_SIZE = 4096


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
        fn = registry.lookup(op)  # a user's lowering of an op of a custom domain has no version
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
                return (f"graph output '{printable(name)}' is declared {np.dtype(want).name} but "
                        f"node '{printable(node.module_path or node.name)}' ({node.source}) computes "
                        f"{np.dtype(got).name}")
    return None


def _build_outputs(flat: list):
    return flat[0] if len(flat) == 1 else tuple(flat)


def translate(model: Any, *, name: str | None = None) -> tuple[Any, Translation]:
    """(the checked `onnx.ModelProto`, its `Translation`) for a path, bytes or `ModelProto`: the
    model is read and checked once (`load`), its initializers become `params` under their graph
    names, except one-value literals (scale factors, epsilons), which are constants XLA can fold;
    the model takes the graph inputs in order (or by name) and returns the output, or a tuple of
    the outputs in graph order, which `output_names` names."""
    proto, where = read(model)
    program, params, declared = _to_program(proto)
    program.check_supported()
    if declared and not program.value_dependent_nodes():
        problem = _computed_output_problem(program, params, declared)
        if problem:
            raise ModelFileError(f"{where}: {problem}")
    if name is None:
        name = proto.graph.name or (os.path.basename(os.fspath(model)) if isinstance(model, (str, os.PathLike)) else "onnx")
    return proto, Translation(
        program,
        params,  # NumPy: the JaxModel checks what narrowing to 32 bits would change
        parameter_names=list(params),
        flatten_inputs=flatten_by_name([i.name for i in program.user_inputs]),
        build_outputs=_build_outputs,
        name=name,
        output_names=tuple(v.name for v in proto.graph.output),
    )
