"""torch.export frontend: an `ExportedProgram` becomes a `Program`.

jaxport lowers the graph `torch.export` records (the training IR) directly
wherever it has lowerings for its ops, because `run_decompositions()` is slow
(about 1.5 s on a small BERT) and sometimes fails (GPT-2's view-stride error).
Only the ops it lacks are decomposed, with PyTorch's own decompositions, and
what is still missing after that is reported all at once.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import operator
import os
import re
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import sympy
import torch
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind, OutputKind
from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols

from .. import dlpack, dtypes
from ..errors import ExportError, InputError, ModelFileError, OpUse, UnsupportedOpsError
from ..ir import Input, Node, Program, Ref, TensorSpec, Translation
from ..ops import registry
from . import aten_schema, hugging_face
from .aten_schema import op_name


def export(
    module: torch.nn.Module,
    args: tuple,
    kwargs: dict | None = None,
    *,
    dynamic_shapes=None,
    strict: bool = False,
) -> ExportedProgram:
    """`torch.export.export`, with the exporter's reason as the error when it fails. Hugging Face
    models are traced in transformers' own export context (cache pytrees, export patches)."""
    if not isinstance(module, torch.nn.Module):
        raise TypeError(f"from_torch expects a torch.nn.Module, got {type(module).__name__}")
    if hugging_face.is_model(module):
        context = hugging_face.exporting(module, kwargs)
    else:
        context = contextlib.nullcontext(kwargs)
    try:
        with context as kwargs:
            return torch.export.export(
                module, tuple(args), kwargs or None, dynamic_shapes=dynamic_shapes, strict=strict
            )
    except Exception as e:  # the exporter's many error types all mean "could not capture"
        reason = str(e).strip() or type(e).__name__
        raise ExportError(
            f"torch.export could not capture {type(module).__name__} "
            f"({type(e).__name__}):\n{reason}"
        ) from None


def lowerable(ep: ExportedProgram, *, decompose: str = "auto") -> ExportedProgram:
    """The exported program with every op jaxport lacks decomposed, if PyTorch can.

    decompose: "auto" decomposes only what is missing; "core" always runs the
    full core-ATen decomposition; "none" never decomposes.
    """
    if decompose == "core":
        return ep.run_decompositions()
    if decompose == "none":
        return ep
    best_missing = _missing_in_graph(ep)
    if not best_missing:
        return ep
    missing = {u.op for u in best_missing}
    table = {
        op: fn for op, fn in torch.export.default_decompositions().items() if str(op) in missing
    }
    attempts = [lambda: ep.run_decompositions(table), lambda: ep.run_decompositions()]
    for attempt in attempts:
        try:
            candidate = attempt()
        except Exception:  # PyTorch's decompositions fail on some graphs (GPT-2): report the best so far
            continue
        candidate_missing = _missing_in_graph(candidate)
        if not candidate_missing:
            return candidate
        if len({u.op for u in candidate_missing}) < len({u.op for u in best_missing}):
            best_missing = candidate_missing
    raise UnsupportedOpsError(best_missing)


# -- node metadata -------------------------------------------------------------------------------

_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<fn>\S+)\n\s*(?P<code>[^\n]*)')
_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep


def _source(node: torch.fx.Node) -> str:
    """The innermost frame outside torch itself: 'model.py:12 in forward: x = a + b'."""
    trace = node.meta.get("stack_trace") or ""
    frames = list(_FRAME.finditer(trace))
    if not frames:
        return ""
    outside_torch = [f for f in frames if not f["file"].startswith(_TORCH_DIR)]
    f = (outside_torch or frames)[-1]
    return f"{f['file']}:{f['line']} in {f['fn']}: {f['code'].strip()}"


def _module_path(node: torch.fx.Node) -> str:
    stack = node.meta.get("nn_module_stack") or {}
    if not stack:
        return ""
    path, _type = list(stack.values())[-1]
    return re.sub(r"^L\['self'\]\.?", "", str(path))


def _value_dependent(val) -> bool:
    """Whether a tensor in `val` has a shape torch.export could only learn by running the op."""
    if isinstance(val, torch.Tensor):
        return bool(free_unbacked_symbols(val))
    if isinstance(val, (tuple, list)):
        return any(_value_dependent(v) for v in val)
    return False


def _unique_consecutive_last_dim(node: torch.fx.Node) -> bool:
    """`unique_consecutive(x, dim=-1)`, whose recorded shapes torch 2.13's fake kernel gets wrong:
    it builds the values' shape as `x.shape[:dim] + (n,) + x.shape[dim + 1:]`, and with dim=-1
    the tail is the whole shape (rank 6 for a 3-d input), and the counts take a static size."""
    if node.target is not torch.ops.aten.unique_consecutive.default:
        return False
    dim = node.kwargs.get("dim", node.args[3] if len(node.args) > 3 else None)
    return dim == -1


def _recorded_spec(node: torch.fx.Node, corrected: dict[str, tuple]) -> Any:
    """The shape and dtype torch.export recorded for `node`'s output, with the known fake-kernel
    errors above put right (their getitems too). Later nodes still carry what torch traced, so if
    it used the wrong shape the interpreter's shape check stops there rather than run on."""
    if node.target is operator.getitem and isinstance(node.args[0], torch.fx.Node):
        if node.args[0].name in corrected:
            return corrected[node.args[0].name][node.args[1]]
    spec = _spec(node.meta.get("val"))
    if _unique_consecutive_last_dim(node):
        source = _spec(node.args[0].meta.get("val"))
        values, inverse, _counts = spec
        spec = (TensorSpec(source.shape[:-1] + (None,), values.dtype), inverse, TensorSpec((None,), _counts.dtype))
        corrected[node.name] = spec
    return spec


def _spec(val) -> Any:
    if isinstance(val, torch.Tensor):
        shape = tuple(d if isinstance(d, int) else None for d in val.shape)
        return TensorSpec(shape, dtypes.numpy_dtype(val.dtype))
    if isinstance(val, (list, tuple)):
        return tuple(_spec(v) for v in val)
    return None


def _dim_symbols(val) -> dict[int, str]:
    """{dim: torch's size symbol} for the dims of an input tensor that are a plain symbol."""
    if not isinstance(val, torch.Tensor):
        return {}
    dims = {}
    for d, size in enumerate(val.shape):
        expr = size.node.expr if isinstance(size, torch.SymInt) else None
        if expr is not None and expr.is_Symbol:
            dims[d] = str(expr)
    return dims


def _dim_ranges(ep: ExportedProgram, user_inputs: list[Input]) -> dict[str, tuple[int, int | None]]:
    """(min, max) of each input size symbol from `ep.range_constraints`; max None if unbounded."""
    symbols = {s for i in user_inputs for s in i.dims.values()}
    ranges = {}
    for expr, bounds in ep.range_constraints.items():
        if str(expr) not in symbols:
            continue
        lower, upper = bounds.lower, bounds.upper  # sympy integers, or (int_)oo when unbounded
        lo = int(lower) if isinstance(lower, (int, sympy.Integer)) else 0
        hi = int(upper) if isinstance(upper, (int, sympy.Integer)) else None
        ranges[str(expr)] = (lo, hi)
    return ranges


# -- in-place ops --------------------------------------------------------------------------------


def _is_view(node) -> bool:
    target = getattr(node, "target", None)
    if not isinstance(target, torch._ops.OpOverload):
        return node.op == "placeholder"
    return aten_schema.returns_view(target)


def _rebindable(node: torch.fx.Node) -> bool:
    """An in-place op jaxport can run as its functional twin: it writes a fresh, unaliased value."""
    if aten_schema.functional_variant(node.target) is None:
        return False
    index = aten_schema.written_argument(node.target)
    if index is None or index >= len(node.args):
        return False
    written = node.args[index]
    return isinstance(written, torch.fx.Node) and not _is_view(written)


def _scatter(op: str) -> Callable:
    return lambda base, value, view_args, view_kwargs: (op, (base, value, *view_args), view_kwargs)


def _permute_back(base, value, view_args, view_kwargs):
    dims = [d % len(view_args[0]) for d in view_args[0]]
    return "aten.permute.default", (value, [dims.index(i) for i in range(len(dims))]), {}


#: View ops whose writes have a functional form: (base, new value of the view, the view's other
#: arguments and keyword arguments) -> (op, args, kwargs) giving the base's new value. Scatters
#: for views that pick elements; the inverse view for those that only rearrange all of them.
_WRITE_BACK: dict[str, Callable] = {
    "aten.as_strided.default": _scatter("aten.as_strided_scatter.default"),
    "aten.diagonal.default": _scatter("aten.diagonal_scatter.default"),
    "aten.permute.default": _permute_back,
    "aten.select.int": _scatter("aten.select_scatter.default"),
    "aten.slice.Tensor": _scatter("aten.slice_scatter.default"),
    "aten.t.default": lambda base, value, view_args, view_kwargs: ("aten.t.default", (value,), {}),
    "aten.transpose.int": lambda base, value, view_args, view_kwargs: ("aten.transpose.int", (value, *view_args), {}),
    "aten.unsqueeze.default": lambda base, value, view_args, view_kwargs: ("aten.squeeze.dim", (value, *view_args), {}),
}


def view_writes(graph: torch.fx.Graph) -> dict[torch.fx.Node, list[torch.fx.Node]]:
    """The in-place writes through views that run exactly as scatters, each with its chain of
    views (the written one first) down to the tensor they view.

    `t[:, :4] = s` is `t = slice_scatter(t, s, 1, 0, 4)`, which is what functionalization makes
    of it, without re-tracing the whole program (seconds on a model with many such writes). A
    write qualifies when each view in its chain has a scatter, the viewed tensor is one the graph
    computes (an input's mutation would have to be returned; an in-place op's result is the
    tensor it wrote), and no other alias of that tensor made before the write is read after it
    (it would still hold the old values).
    """
    order = {node: i for i, node in enumerate(graph.nodes)}
    writes = {}
    for node in graph.nodes:
        if node.op != "call_function" or aten_schema.functional_variant(node.target) is None or _rebindable(node):
            continue
        index = aten_schema.written_argument(node.target)
        chain: list[torch.fx.Node] = []
        base = node.args[index] if index is not None and index < len(node.args) else None
        while isinstance(base, torch.fx.Node) and base.op == "call_function" and op_name(base.target) in _WRITE_BACK:
            chain.append(base)
            base = base.args[0]
        same = _same_tensor(base)
        root = same[-1]
        if not chain or not isinstance(root, torch.fx.Node) or root.op != "call_function" or _is_view(root):
            continue
        stale = [
            alias for alias in _aliases(root)
            if alias not in chain and alias not in same and order[alias] < order[node]
            and any(order[u] > order[node] for u in alias.users)
        ]
        if not stale:
            writes[node] = chain
    return writes


def _same_tensor(node) -> list:
    """`node`, then the tensors it is an in-place result of (`x.masked_fill_(m, 0)` is `x`):
    the graph's names for one tensor, all rebound when a write through a view changes it."""
    names = [node]
    while isinstance(node, torch.fx.Node) and node.op == "call_function" and _rebindable(node):
        node = node.args[aten_schema.written_argument(node.target)]
        names.append(node)
    return names


def _aliases(tensor: torch.fx.Node) -> set[torch.fx.Node]:
    """The nodes that share `tensor`'s memory: its views, their views, in-place results, items."""
    found: set[torch.fx.Node] = set()
    todo = [tensor]
    while todo:
        node = todo.pop()
        for user in node.users:
            shares = user.op == "call_function" and (
                (_is_view(user) and user.args[:1] == (node,)) or user.target is operator.getitem
            )
            if shares and user not in found:
                found.add(user)
                todo.append(user)
    return found


# -- arguments -----------------------------------------------------------------------------------

_INLINED_HOPS = {"wrap_with_set_grad_enabled": 1, "wrap_with_autocast": 4}


class _Translator:
    """Walks an FX graph into Program nodes, rebinding in-place writes and inlining wrapper HOPs."""

    def __init__(self, graph_module):
        self.graph_module = graph_module
        self.rename: dict[str, Any] = {}  # fx node name -> Ref or constant that stands for it
        self.hop_outputs: dict[str, list] = {}
        self.nodes: list[Node] = []
        self.corrected_specs: dict[str, tuple] = {}  # fx node name -> its outputs' specs, put right
        self.view_writes: dict[torch.fx.Node, list[torch.fx.Node]] = {}  # see `view_writes`

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
        return kwargs

    def graph(self, graph: torch.fx.Graph, prefix: str = "") -> list:
        """Translate `graph`'s call_function nodes; returns its output values."""
        self.view_writes.update(view_writes(graph))
        for node in graph.nodes:
            if node.op == "call_function":
                self.node(node, prefix)
            elif node.op == "output":
                return list(self.arg(node.args[0]))
        return []

    def node(self, node: torch.fx.Node, prefix: str) -> None:
        target = node.target
        hop = getattr(target, "__name__", "")
        if isinstance(target, torch._ops.HigherOrderOperator) and hop in _INLINED_HOPS:
            self.inline(node, _INLINED_HOPS[hop], prefix)
            return
        if isinstance(target, torch._ops.HigherOrderOperator) and hop == "with_effects":
            self.effectful(node, prefix)
            return
        if target is operator.getitem and node.args[0].name in self.hop_outputs:
            self.rename[node.name] = self.hop_outputs[node.args[0].name][node.args[1]]
            return
        op = op_name(target)
        view_chain = self.view_writes.get(node)
        written = None
        if _rebindable(node) or view_chain:
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
                expected=_recorded_spec(node, self.corrected_specs),
                module_path=_module_path(node),
                source=_source(node),
                value_dependent_shape=_value_dependent(node.meta.get("val")),
            )
        )
        if prefix:
            self.rename[node.name] = Ref(name)
        if view_chain:
            self.write_back(view_chain, Ref(name), node)
        elif written is not None:
            self.rename[written.name] = Ref(name)

    def write_back(self, chain: list[torch.fx.Node], value: Ref, write: torch.fx.Node) -> None:
        """Scatter a view's new value into its base, and that into the base's base, down the
        chain (see `view_writes`); later readers of each read its new value."""
        for view in chain:
            self.rename[view.name] = value
            base = view.args[0]
            name = f"{value.name}_into_{base.name}"
            view_args = [self.arg(a) for a in view.args[1:]]
            op, args, kwargs = _WRITE_BACK[op_name(view.target)](self.arg(base), value, view_args, self.kwargs(view))
            self.nodes.append(
                Node(
                    name=name,
                    op=op,
                    args=args,
                    kwargs=kwargs,
                    expected=_spec(base.meta.get("val")),
                    module_path=_module_path(write),
                    source=_source(write),
                )
            )
            value = Ref(name)
        for same in _same_tensor(base):
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
                expected=_spec(val[1] if isinstance(val, (tuple, list)) and len(val) == 2 else None),
                module_path=_module_path(node),
                source=_source(node),
                value_dependent_shape=_value_dependent(val),
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


def _missing_in_graph(ep: ExportedProgram) -> list[OpUse]:
    """Ops without a lowering, and in-place writes into views that only functionalization can run."""
    return _missing_in(ep.graph_module, registry.registered_names())


def _missing_in(graph_module: torch.fx.GraphModule, names) -> list[OpUse]:
    writes = view_writes(graph_module.graph)
    uses = []
    for n in graph_module.graph.nodes:
        if n.op != "call_function":
            continue
        if isinstance(n.target, torch._ops.HigherOrderOperator):
            hop = getattr(n.target, "__name__", "")
            if hop in _INLINED_HOPS:
                uses += _missing_in(getattr(graph_module, n.args[_INLINED_HOPS[hop]].target), names)
            if hop != "with_effects":
                continue
            name = op_name(n.args[1])
        else:
            name = op_name(n.target)
        if aten_schema.functional_variant(n.target) is not None:
            if not _rebindable(n) and n not in writes:
                uses.append(OpUse(f"{name} (in-place write through a view)", n.name, _module_path(n), _source(n)))
            elif str(aten_schema.functional_variant(n.target)) not in names:
                uses.append(OpUse(str(aten_schema.functional_variant(n.target)), n.name, _module_path(n), _source(n)))
        elif name not in names:
            uses.append(OpUse(name, n.name, _module_path(n), _source(n)))
    return uses


# -- the program ---------------------------------------------------------------------------------


def _constant(value) -> Any:
    if isinstance(value, torch.Tensor):
        return dlpack.to_jax(value, what="a constant tensor", error=ModelFileError)
    raise ExportError(f"jaxport cannot carry a constant of type {type(value).__name__}")


def _storage_key(tensor: torch.Tensor) -> tuple:
    return (tensor.untyped_storage().data_ptr(), tensor.storage_offset(), tuple(tensor.shape),
            tuple(tensor.stride()), tensor.dtype)


@dataclasses.dataclass
class StateInfo:
    """The exported model's state: tensors by name, which are parameters, and tied aliases."""

    tensors: dict[str, torch.Tensor]
    parameters: list[str]
    buffers: list[str]
    tied: dict[str, str]  # alias name -> the name it shares a tensor with


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
        elif spec.kind == InputKind.CONSTANT_TENSOR:
            constants[node.name] = _constant(ep.constants[spec.target])
        elif spec.kind == InputKind.USER_INPUT:
            val = node.meta.get("val")
            user_inputs.append(Input(node.name, node.name, _spec(val), _dim_symbols(val)))
        elif spec.kind == InputKind.TOKEN:
            constants[node.name] = None
        else:
            raise ExportError(f"jaxport does not support {spec.kind.name} inputs ({node.name})")

    translator = _Translator(ep.graph_module)
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
        dim_ranges=_dim_ranges(ep, user_inputs), matmul_precision=dtypes.matmul_precision(),
    )
    return program, StateInfo(state, parameters, buffers, tied)


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
        name=name,
        fixed_shape_hint="pass dynamic_shapes= to from_torch to allow other sizes",
        training=training,
    )


# -- input and output structure ------------------------------------------------------------------


def output_builder(spec) -> Callable[[list], Any]:
    """A function rebuilding torch's output structure from flat leaves, dataclass outputs as dicts."""

    def build(spec, leaves):
        if spec.is_leaf():
            return next(leaves)
        children = [build(child, leaves) for child in spec.children()]
        if hugging_face.is_described(spec):  # a cache: its arrays in the structure it holds them
            return hugging_face.arrays(spec.context, children)
        if spec.type in (tuple, list):
            return spec.type(children)
        if spec.type is dict or isinstance(spec.context, (list, tuple)) and all(
            isinstance(k, str) for k in spec.context
        ):
            keys = spec.context
            return dict(zip(keys, children))
        if spec.type is type(None):
            return None
        if hasattr(spec.type, "_fields"):  # namedtuple
            return spec.type(*children)
        return tuple(children)

    return lambda flat: build(spec, iter(flat))


def input_flattener(in_spec, user_inputs: list[Input]) -> Callable[[tuple, dict], list]:
    """A function turning (args, kwargs) into the flat inputs the program takes, with clear errors."""
    args_spec, kwargs_spec = in_spec.children()
    kwarg_names = list(kwargs_spec.context) if kwargs_spec.context else []
    n_args = args_spec.num_children

    def flatten(args: tuple, kwargs: dict) -> list:
        names = [u.name for u in user_inputs]
        if len(args) != n_args:
            raise InputError(
                f"expected {n_args} positional input(s), got {len(args)}; the model's inputs are "
                f"{', '.join(names)}"
            )
        unknown = sorted(set(kwargs) - set(kwarg_names))
        missing = [k for k in kwarg_names if k not in kwargs]
        if unknown or missing:
            parts = []
            if missing:
                parts.append(f"missing keyword input(s) {', '.join(missing)}")
            if unknown:
                parts.append(f"unexpected keyword input(s) {', '.join(unknown)}")
            raise InputError(f"{'; '.join(parts)}; the model was exported with {kwarg_names}")
        values = list(args) + [kwargs[k] for k in kwarg_names]
        where = [f"input {i}" for i in range(n_args)] + [f"input '{k}'" for k in kwarg_names]
        specs = args_spec.children() + kwargs_spec.children()
        return [leaf for v, s, w in zip(values, specs, where) for leaf in _flatten_like(v, s, w)]

    return flatten


def _flatten_like(value: Any, spec, where: str) -> list:
    """`value`'s leaves in the order of `spec`, the structure it was exported with. A Hugging Face
    cache may come as the torch object or as the nested arrays a converted model returns."""
    if spec.is_leaf():
        return [value]
    if hugging_face.is_described(spec) and not isinstance(value, spec.type):
        return hugging_face.leaves_from_arrays(spec.context, value, spec.num_children, where)
    if spec.type in (list, tuple, dict) and type(value) is spec.type:
        children, context = torch.utils._pytree.SUPPORTED_NODES[spec.type].flatten_fn(value)
        if len(children) == spec.num_children and (spec.type is not dict or context == spec.context):
            return [
                leaf for i, (c, s) in enumerate(zip(children, spec.children()))
                for leaf in _flatten_like(c, s, f"{where}[{context[i]!r}]" if spec.type is dict else f"{where}[{i}]")
            ]
    leaves, got = torch.utils._pytree.tree_flatten(value)
    if got != spec:
        raise InputError(f"{where} has structure {got}, but the model was exported with {spec}")
    return leaves


# -- torch's logs ---------------------------------------------------------------------------------


@contextlib.contextmanager
def quiet_torch_logs() -> Iterator[list[logging.LogRecord]]:
    """torch's loggers silenced; yields the records they would have printed (torch.export.load logs
    the real reason a load failed, with its traceback, and raises a vaguer error)."""
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    keep = Keep(logging.WARNING)
    loggers = [logging.getLogger("torch")] + [
        logger for name, logger in list(logging.root.manager.loggerDict.items())
        if name.startswith("torch.") and isinstance(logger, logging.Logger) and logger.handlers]
    saved = [(logger, logger.handlers) for logger in loggers]
    for logger in loggers:
        logger.handlers = [keep]
    try:
        yield records
    finally:
        for logger, handlers in saved:
            logger.handlers = handlers
