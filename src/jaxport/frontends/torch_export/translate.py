"""An exported program's graph walked into a `Program`: state, constants, nodes, outputs."""

from __future__ import annotations

import dataclasses
import operator
import warnings
from typing import Any

import jax.numpy as jnp
import torch
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind, OutputKind
from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols

from ... import dlpack, dtypes
from ...errors import ExportError, ModelFileError
from ...ir import Input, Node, Program, Ref, Translation
from ...ops import registry
from .. import aten_schema
from ..aten_schema import op_name
from .capture import lowerable
from .inplace import WRITE_BACK, rebindable, same_tensor, view_writes
from .nodes import (
    INLINED_HOPS,
    dim_ranges,
    dim_symbols,
    fixed_size,
    module_path,
    recorded_outputs,
    recorded_spec,
    source,
    tensor_spec,
    value_dependent,
)
from .structure import input_flattener, output_builder


class _Translator:
    """Walks an FX graph into Program nodes, rebinding in-place writes and inlining wrapper HOPs."""

    def __init__(self, graph_module, ranges: dict | None = None):
        self.graph_module = graph_module
        self.ranges = ranges or {}  # size symbol -> its value range (ep.range_constraints)
        self.rename: dict[str, Any] = {}  # fx node name -> Ref or constant that stands for it
        self.hop_outputs: dict[str, list] = {}
        self.nodes: list[Node] = []
        self.corrected_specs: dict[str, tuple] = {}  # fx node name -> its outputs' specs, put right
        self.view_writes: dict[torch.fx.Node, list[torch.fx.Node]] = {}  # see `view_writes`
        self.sizes: dict[Any, torch.fx.Node] = {}  # a size's expression -> the first node computing it

    def arg(self, value):
        if isinstance(value, torch.fx.Node):
            return self.rename.get(value.name, Ref(value.name))
        if isinstance(value, torch.dtype):
            return dtypes.numpy_dtype(value)
        if isinstance(value, (torch.device, torch.layout, torch.memory_format)):
            return None
        if isinstance(value, (list, tuple)):
            return type(value)(self.arg(v) for v in value)
        if isinstance(value, dict):
            return {k: self.arg(v) for k, v in value.items()}
        if isinstance(value, torch.Tensor):
            raise ExportError(f"unexpected tensor constant in a graph argument: {value!r}")
        return value

    def kwargs(self, node: torch.fx.Node) -> dict:
        kwargs = {k: self.arg(v) for k, v in node.kwargs.items() if k not in aten_schema.PLACEMENT_KWARGS}
        # Fill an omitted `dtype=` from the recorded output, so lowerings never guess torch defaults.
        if kwargs.get("dtype") is None and aten_schema.fills_dtype(node.target):
            val = node.meta.get("val")
            if isinstance(val, torch.Tensor):
                kwargs["dtype"] = dtypes.numpy_dtype(val.dtype)
        # Outputs PyTorch shapes by device (BatchNorm's statistics) are read off the graph, which
        # was recorded on the model's device, whatever device runs the program.
        if registry.takes_recorded(op_name(node.target)):
            kwargs["recorded"] = recorded_outputs(node.meta.get("val"))
        # float32 convolutions in the precision PyTorch gives them on a GPU (TF32 by default; on
        # the CPU, where XLA has no TF32, float32 either way)
        if registry.is_convolution(op_name(node.target)):
            kwargs["precision"] = dtypes.convolution_precision()
        return kwargs

    def graph(self, graph: torch.fx.Graph, prefix: str = "") -> list:
        """Translate `graph`'s call_function nodes; returns its output values. At the top level
        (no `prefix`), each node made records the FX node it came from (`Node.origin`)."""
        self.view_writes.update(view_writes(graph))
        for node in graph.nodes:
            if node.op == "call_function":
                start = len(self.nodes)
                self.node(node, prefix)
                if not prefix:
                    self.nodes[start:] = [dataclasses.replace(n, origin=node.name) for n in self.nodes[start:]]
            elif node.op == "output":
                return list(self.arg(node.args[0]))
        return []

    def node(self, node: torch.fx.Node, prefix: str) -> None:
        target = node.target
        hop = getattr(target, "__name__", "")
        if isinstance(target, torch._ops.HigherOrderOperator) and hop in INLINED_HOPS:
            self.inline(node, INLINED_HOPS[hop], prefix)
            return
        if isinstance(target, torch._ops.HigherOrderOperator) and hop == "with_effects":
            self.effectful(node, prefix)
            return
        if target is operator.getitem and node.args[0].name in self.hop_outputs:
            self.rename[node.name] = self.hop_outputs[node.args[0].name][node.args[1]]
            return
        size = fixed_size(node.meta.get("val"), self.ranges)
        if size is not None:
            self.rename[node.name] = size
            return
        if self.sized_range(node, prefix):
            return
        val = node.meta.get("val")
        if isinstance(val, torch.SymInt) and not free_unbacked_symbols(val):
            self.sizes.setdefault(val.node.expr, node)
        op = op_name(target)
        view_chain = self.view_writes.get(node)
        written = None
        if rebindable(node) or view_chain:
            # Run `x.add_(y)` as `add(x, y)`, and let later readers of x read the result.
            op = str(aten_schema.functional_variant(target))
            written = node.args[aten_schema.written_argument(target)]
        name = prefix + node.name
        self.nodes.append(
            Node(
                name=name,
                op=op,
                args=tuple(self.arg(a) for a in node.args),
                kwargs=self.kwargs(node),
                expected=recorded_spec(node, self.corrected_specs),
                module_path=module_path(node),
                source=source(node),
                value_dependent_shape=value_dependent(node.meta.get("val")),
            )
        )
        if prefix:
            self.rename[node.name] = Ref(name)
        if view_chain:
            self.write_back(view_chain, Ref(name), node)
        elif written is not None:
            self.rename[written.name] = Ref(name)

    def sized_range(self, node: torch.fx.Node, prefix: str) -> bool:
        """`arange(start, end[, step])` whose bounds are run-time values but whose length is a size
        the graph already computes (`arange(seen, seen + T)`, with `seen` the tokens a cache holds):
        translated as `start + arange(length) * step`, so JAX knows its length when it traces.
        False, translating nothing, for any other node."""
        if node.target not in (torch.ops.aten.arange.start, torch.ops.aten.arange.start_step):
            return False
        val = node.meta.get("val")
        bounds = node.args[:2]
        if not isinstance(val, torch.Tensor) or val.ndim != 1 or not any(
                isinstance(b, torch.fx.Node) and free_unbacked_symbols(b.meta.get("val")) for b in bounds):
            return False
        length = val.shape[0]
        if not isinstance(length, torch.SymInt) or free_unbacked_symbols(length) or length.node.expr not in self.sizes:
            return False
        step = node.args[2] if len(node.args) > 2 else 1
        kwargs = self.kwargs(node)
        where = dict(module_path=module_path(node), source=source(node))
        name = prefix + node.name
        value = self._emit(f"{name}_counts", "aten.arange.default", (self.arg(self.sizes[length.node.expr]),),
                           kwargs, where)
        if not (isinstance(step, (int, float)) and step == 1):
            value = self._emit(f"{name}_steps", "aten.mul.Tensor", (value, self.arg(step)), {}, where)
        self._emit(name, "aten.add.Tensor", (value, self.arg(bounds[0])), {}, where,
                   expected=recorded_spec(node, self.corrected_specs))
        if prefix:
            self.rename[node.name] = Ref(name)
        return True

    def _emit(self, name: str, op: str, args: tuple, kwargs: dict, where: dict, expected: Any = None) -> Ref:
        self.nodes.append(Node(name=name, op=op, args=args, kwargs=kwargs, expected=expected, **where))
        return Ref(name)

    def write_back(self, chain: list[torch.fx.Node], value: Ref, write: torch.fx.Node) -> None:
        """Scatter a view's new value into its base, and that into the base's base, down the
        chain (see `view_writes`); later readers of each read its new value."""
        for view in chain:
            self.rename[view.name] = value
            base = view.args[0]
            name = f"{value.name}_into_{base.name}"
            view_args = [self.arg(a) for a in view.args[1:]]
            op, args, kwargs = WRITE_BACK[op_name(view.target)](self.arg(base), value, view_args, self.kwargs(view))
            self.nodes.append(
                Node(
                    name=name,
                    op=op,
                    args=args,
                    kwargs=kwargs,
                    expected=tensor_spec(base.meta.get("val")),
                    module_path=module_path(write),
                    source=source(write),
                )
            )
            value = Ref(name)
        for same in same_tensor(base):
            self.rename[same.name] = value

    def effectful(self, node: torch.fx.Node, prefix: str) -> None:
        """`with_effects(token, op, *args)` orders side effects; in a pure program it is just `op`."""
        _token, inner, *args = node.args
        name = prefix + node.name
        val = node.meta.get("val")
        self.nodes.append(
            Node(
                name=name,
                op=op_name(inner),
                args=tuple(self.arg(a) for a in args),
                kwargs={k: self.arg(v) for k, v in node.kwargs.items() if k not in aten_schema.PLACEMENT_KWARGS},
                expected=tensor_spec(val[1] if isinstance(val, (tuple, list)) and len(val) == 2 else None),
                module_path=module_path(node),
                source=source(node),
                value_dependent_shape=value_dependent(val),
            )
        )
        returns = len(inner._schema.returns)
        if returns <= 1:
            self.hop_outputs[node.name] = [None, Ref(name)][: returns + 1]
        else:
            self.hop_outputs[node.name] = [None] + [
                self._getitem(f"{name}_{i}", Ref(name), i) for i in range(returns)
            ]

    def _getitem(self, name: str, value: Ref, index: int) -> Ref:
        self.nodes.append(Node(name=name, op="operator.getitem", args=(value, index)))
        return Ref(name)

    def inline(self, node: torch.fx.Node, body_index: int, prefix: str) -> None:
        body = getattr(self.graph_module, node.args[body_index].target)
        inner = f"{prefix}{node.name}_"
        placeholders = [n for n in body.graph.nodes if n.op == "placeholder"]
        outer_rename = dict(self.rename)
        for placeholder, value in zip(placeholders, node.args[body_index + 1 :]):
            self.rename[placeholder.name] = self.arg(value)
        saved_module, self.graph_module = self.graph_module, body
        outputs = self.graph(body.graph, inner)
        self.graph_module = saved_module
        # Names inside the body are local to it; keep only what the outer graph can see.
        self.rename = outer_rename
        self.hop_outputs[node.name] = outputs


def _constant(value, name: str) -> Any:
    if isinstance(value, torch.Tensor):
        if value.is_meta and value.numel() == 0:
            # an empty tensor has no values to be unknown (the empty keys a cache layer starts from)
            return jnp.zeros(tuple(value.shape), dtypes.narrow_dtype(dtypes.numpy_dtype(value.dtype)))
        if value.is_meta:
            # A weight can be loaded later (JaxModel.load_weights); a constant is part of the program.
            raise ModelFileError(f"the graph's constant '{name}' ({value.dtype}{list(value.shape)}) is on the "
                                 "meta device, so its values are unknown: make the model create it on a "
                                 "real device (or register it as a buffer, which load_weights fills)")
        return dlpack.to_jax(value, what="a constant tensor", error=ModelFileError)
    raise ExportError(f"jaxport cannot carry a constant of type {type(value).__name__}")


def _storage_key(tensor: torch.Tensor) -> tuple:
    """What two state names share when they are one tensor (tied weights). The storage's address,
    or for storages without one (meta tensors, empty ones) the storage itself."""
    storage = tensor.untyped_storage()
    where = storage.data_ptr() or ("storage", storage._cdata)
    return (where, tensor.storage_offset(), tuple(tensor.shape), tuple(tensor.stride()), tensor.dtype)


@dataclasses.dataclass
class StateInfo:
    """The exported model's state: tensors by name, which are parameters, and tied aliases."""

    tensors: dict[str, torch.Tensor]
    parameters: list[str]
    buffers: list[str]
    tied: dict[str, str]  # alias name -> the name it shares a tensor with
    computed: list[str]  # non-persistent buffers: the module computes them, no checkpoint holds them


def to_program(ep: ExportedProgram) -> tuple[Program, StateInfo]:
    """Translate an exported program; returns the Program and its state.

    Tied weights (one tensor under several state_dict names) become one
    parameter under the first name, so gradients through every use add up.
    """
    sig = ep.graph_signature
    placeholders = [n for n in ep.graph.nodes if n.op == "placeholder"]
    state_inputs: list[tuple[str, str]] = []
    constants: dict[str, Any] = {}
    user_inputs: list[Input] = []
    state: dict[str, torch.Tensor] = {}
    parameters: list[str] = []
    buffers: list[str] = []
    tied: dict[str, str] = {}
    computed: list[str] = []
    first_name_of: dict[tuple, str] = {}  # tied weights (GPT-2's wte/lm_head) are one parameter
    for node, spec in zip(placeholders, sig.input_specs):
        if spec.kind in (InputKind.PARAMETER, InputKind.BUFFER):
            tensor = ep.state_dict.get(spec.target)
            if tensor is None:  # a non-persistent buffer lives among the constants
                tensor = ep.constants[spec.target]
            name = first_name_of.setdefault(_storage_key(tensor), spec.target)
            state_inputs.append((node.name, name))
            if name != spec.target:
                tied[spec.target] = name
            else:
                state[name] = tensor
                (parameters if spec.kind == InputKind.PARAMETER else buffers).append(name)
                if spec.kind == InputKind.BUFFER and spec.persistent is False:
                    computed.append(name)
        elif spec.kind == InputKind.CONSTANT_TENSOR:
            constants[node.name] = _constant(ep.constants[spec.target], spec.target)
        elif spec.kind == InputKind.USER_INPUT:
            val = node.meta.get("val")
            user_inputs.append(Input(node.name, node.name, tensor_spec(val), dim_symbols(val)))
        elif spec.kind == InputKind.TOKEN:
            constants[node.name] = None
        else:
            raise ExportError(f"jaxport does not support {spec.kind.name} inputs ({node.name})")

    translator = _Translator(ep.graph_module, ep.range_constraints)
    graph_outputs = translator.graph(ep.graph)
    outputs: list[Any] = []
    buffer_updates: dict[str, Ref] = {}
    input_updates: dict[str, Ref] = {}
    for value, spec in zip(graph_outputs, sig.output_specs):
        if spec.kind == OutputKind.BUFFER_MUTATION:
            buffer_updates[spec.target] = value
        elif spec.kind == OutputKind.USER_OUTPUT:
            outputs.append(value)
        elif spec.kind == OutputKind.USER_INPUT_MUTATION:
            input_updates[spec.target] = value
        elif spec.kind == OutputKind.TOKEN:
            continue
        else:
            raise ExportError(f"jaxport does not support {spec.kind.name} outputs ({spec.target})")
    if input_updates:
        warnings.warn(
            f"the model writes to its input(s) {', '.join(input_updates)} in place; JAX arrays are "
            "immutable, so apply() leaves them unchanged and apply_with_updates() returns the new values",
            stacklevel=4,
        )
    program = Program(
        state_inputs, constants, user_inputs, translator.nodes, outputs, buffer_updates, input_updates,
        dim_ranges=dim_ranges(ep, user_inputs), matmul_precision=dtypes.matmul_precision(),
    )
    return program, StateInfo(state, parameters, buffers, tied, computed)


def graph_program(graph_module: torch.fx.GraphModule) -> Program:
    """An ATen graph whose placeholders are all plain inputs, as AOTAutograd hands a Dynamo
    backend its forward and backward graphs (parameters, buffers and tangents included), as a
    `Program`: one user input per placeholder, in order, and the output node's values as its
    outputs. Tensors the graph holds as attributes (lifted constants) become constants."""
    user_inputs: list[Input] = []
    constants: dict[str, Any] = {}
    for node in graph_module.graph.nodes:
        if node.op == "placeholder":
            val = node.meta.get("val")
            user_inputs.append(Input(node.name, node.name, tensor_spec(val), dim_symbols(val)))
        elif node.op == "get_attr":
            constants[node.name] = _constant(operator.attrgetter(node.target)(graph_module), node.target)
    translator = _Translator(graph_module)
    outputs = translator.graph(graph_module.graph)
    return Program([], constants, user_inputs, translator.nodes, outputs,
                   matmul_precision=dtypes.matmul_precision())


def translate(ep: ExportedProgram, *, decompose: str = "auto", name: str = "model",
              training: bool = False) -> Translation:
    """An exported program as a `Translation`: the ops jaxport lacks decomposed (`lowerable`),
    every remaining op checked to have a lowering, the state as the program holds it, and the
    input flattener and output builder for the structures it was exported with."""
    ep = lowerable(ep, decompose=decompose)
    program, state = to_program(ep)
    program.check_supported()
    return Translation(
        program,
        state.tensors,
        flatten_inputs=input_flattener(ep.call_spec.in_spec, program.user_inputs),
        build_outputs=output_builder(ep.call_spec.out_spec),
        parameter_names=state.parameters,
        buffer_names=state.buffers,
        tied=state.tied,
        computed_buffers=state.computed,
        name=name,
        fixed_shape_hint="pass dynamic_shapes= to from_torch to allow other sizes",
        training=training,
    )
