"""torch.export frontend: an `ExportedProgram` becomes a `Program`.

jaxport lowers the graph `torch.export` records (the training IR) directly
wherever it has lowerings for its ops, because `run_decompositions()` is slow
(about 1.5 s on a small BERT) and sometimes fails (GPT-2's view-stride error).
Only the ops it lacks are decomposed, with PyTorch's own decompositions, and
what is still missing after that is reported all at once.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import torch
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind, OutputKind

from .. import _torch_utils as tu
from ..errors import ExportError, OpUse, UnsupportedOpsError
from ..ops import registry
from ..program import Input, Node, Program, Ref, TensorSpec

# Keyword arguments that say where or how a tensor is stored, never what it holds.
_PLACEMENT_KWARGS = frozenset({"layout", "device", "pin_memory", "memory_format", "non_blocking"})


def export(
    module: torch.nn.Module,
    args: tuple,
    kwargs: dict | None = None,
    *,
    dynamic_shapes=None,
    strict: bool = False,
) -> ExportedProgram:
    """`torch.export.export`, with the exporter's reason as the error when it fails."""
    if not isinstance(module, torch.nn.Module):
        raise TypeError(f"from_torch expects a torch.nn.Module, got {type(module).__name__}")
    try:
        return torch.export.export(
            module, tuple(args), kwargs or None, dynamic_shapes=dynamic_shapes, strict=strict
        )
    except Exception as e:  # the exporter's many error types all mean "could not capture"
        reason = str(e).strip() or type(e).__name__
        raise ExportError(
            f"torch.export could not capture {type(module).__name__} "
            f"({type(e).__name__}):\n{reason}"
        ) from None


def op_name(target) -> str:
    """The registry key of an FX call target: 'aten.add.Tensor', 'operator.getitem', ..."""
    if isinstance(target, (torch._ops.OpOverload, torch._ops.HigherOrderOperator)):
        return str(target)
    module = getattr(target, "__module__", None) or ""
    if module in ("_operator", "operator"):
        module = "operator"
    return f"{module}.{getattr(target, '__name__', repr(target))}"


def _graph_ops(ep: ExportedProgram) -> set[str]:
    return {op_name(n.target) for n in ep.graph.nodes if n.op == "call_function"}


def _missing_uses(ep: ExportedProgram) -> list[OpUse]:
    names = registry.registered_names()
    return [
        OpUse(op_name(n.target), n.name, _module_path(n), _source(n))
        for n in ep.graph.nodes
        if n.op == "call_function" and op_name(n.target) not in names
    ]


def lowerable(ep: ExportedProgram, *, decompose: str = "auto") -> ExportedProgram:
    """The exported program with every op jaxport lacks decomposed, if PyTorch can.

    decompose: "auto" decomposes only what is missing; "core" always runs the
    full core-ATen decomposition; "none" never decomposes.
    """
    if decompose == "core":
        return ep.run_decompositions()
    if decompose == "none":
        return ep
    missing = {u.op for u in _missing_uses(ep)}
    if not missing:
        return ep
    table = {
        op: fn for op, fn in torch.export.default_decompositions().items() if str(op) in missing
    }
    attempts = [lambda: ep.run_decompositions(table), lambda: ep.run_decompositions()]
    best, best_missing = ep, _missing_uses(ep)
    for attempt in attempts:
        try:
            candidate = attempt()
        except Exception:  # PyTorch's decompositions fail on some graphs (GPT-2): keep the best so far
            continue
        candidate_missing = _missing_uses(candidate)
        if not candidate_missing:
            return candidate
        if len({u.op for u in candidate_missing}) < len({u.op for u in best_missing}):
            best, best_missing = candidate, candidate_missing
    raise UnsupportedOpsError(best_missing)


# -- node metadata -------------------------------------------------------------------------------

_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<fn>\S+)\n\s*(?P<code>[^\n]*)')


def _source(node: torch.fx.Node) -> str:
    """The innermost user frame of the node's stack trace: 'file.py:12 in forward: x = a + b'."""
    trace = node.meta.get("stack_trace") or ""
    frames = list(_FRAME.finditer(trace))
    if not frames:
        return ""
    f = frames[-1]
    return f"{f['file']}:{f['line']} in {f['fn']}: {f['code'].strip()}"


def _module_path(node: torch.fx.Node) -> str:
    stack = node.meta.get("nn_module_stack") or {}
    if not stack:
        return ""
    path, _type = list(stack.values())[-1]
    return re.sub(r"^L\['self'\]\.?", "", str(path))


def _spec(val) -> Any:
    if isinstance(val, torch.Tensor):
        shape = tuple(d if isinstance(d, int) else None for d in val.shape)
        return TensorSpec(shape, tu.numpy_dtype(val.dtype))
    if isinstance(val, (list, tuple)):
        return tuple(_spec(v) for v in val)
    return None


# -- arguments -----------------------------------------------------------------------------------


def _arg(value):
    if isinstance(value, torch.fx.Node):
        return Ref(value.name)
    if isinstance(value, torch.dtype):
        return tu.numpy_dtype(value)
    if isinstance(value, (torch.device, torch.layout, torch.memory_format)):
        return None
    if isinstance(value, (list, tuple)):
        return type(value)(_arg(v) for v in value)
    if isinstance(value, dict):
        return {k: _arg(v) for k, v in value.items()}
    if isinstance(value, torch.Tensor):
        raise ExportError(f"unexpected tensor constant in a graph argument: {value!r}")
    return value


def _kwargs(node: torch.fx.Node) -> dict:
    kwargs = {k: _arg(v) for k, v in node.kwargs.items() if k not in _PLACEMENT_KWARGS}
    target = node.target
    # Fill an omitted `dtype=` from the recorded output, so lowerings never guess torch defaults.
    if isinstance(target, torch._ops.OpOverload) and kwargs.get("dtype") is None:
        arg = next((a for a in target._schema.arguments if a.name == "dtype"), None)
        val = node.meta.get("val")
        if arg is not None and arg.kwarg_only and isinstance(val, torch.Tensor):
            kwargs["dtype"] = tu.numpy_dtype(val.dtype)
    return kwargs


# -- the program ---------------------------------------------------------------------------------


def _constant(value) -> Any:
    if isinstance(value, torch.Tensor):
        return tu.to_jax(value, what="a constant tensor")
    raise ExportError(f"jaxport cannot carry a constant of type {type(value).__name__}")


def to_program(ep: ExportedProgram) -> tuple[Program, dict[str, torch.Tensor]]:
    """Translate an exported program; returns the Program and its state tensors by name."""
    sig = ep.graph_signature
    placeholders = [n for n in ep.graph.nodes if n.op == "placeholder"]
    state_inputs: list[tuple[str, str]] = []
    constants: dict[str, Any] = {}
    user_inputs: list[Input] = []
    state: dict[str, torch.Tensor] = {}
    for node, spec in zip(placeholders, sig.input_specs):
        if spec.kind in (InputKind.PARAMETER, InputKind.BUFFER):
            state_inputs.append((node.name, spec.target))
            tensor = ep.state_dict.get(spec.target)
            if tensor is None:  # a non-persistent buffer lives among the constants
                tensor = ep.constants[spec.target]
            state[spec.target] = tensor
        elif spec.kind == InputKind.CONSTANT_TENSOR:
            constants[node.name] = _constant(ep.constants[spec.target])
        elif spec.kind == InputKind.USER_INPUT:
            user_inputs.append(Input(node.name, node.name, _spec(node.meta.get("val"))))
        elif spec.kind == InputKind.TOKEN:
            constants[node.name] = None
        else:
            raise ExportError(f"jaxport does not support {spec.kind.name} inputs ({node.name})")

    nodes: list[Node] = []
    for node in ep.graph.nodes:
        if node.op != "call_function":
            continue
        nodes.append(
            Node(
                name=node.name,
                op=op_name(node.target),
                args=tuple(_arg(a) for a in node.args),
                kwargs=_kwargs(node),
                expected=_spec(node.meta.get("val")),
                module_path=_module_path(node),
                source=_source(node),
            )
        )

    output_node = next(n for n in ep.graph.nodes if n.op == "output")
    outputs: list[Any] = []
    buffer_updates: dict[str, Ref] = {}
    for value, spec in zip(output_node.args[0], sig.output_specs):
        if spec.kind == OutputKind.BUFFER_MUTATION:
            buffer_updates[spec.target] = _arg(value)
        elif spec.kind == OutputKind.USER_OUTPUT:
            outputs.append(_arg(value))
        elif spec.kind == OutputKind.TOKEN:
            continue
        else:
            raise ExportError(
                f"jaxport does not support models that {spec.kind.name.lower().replace('_', ' ')} "
                f"({spec.target}); a pure JAX function cannot change its inputs"
            )
    program = Program(state_inputs, constants, user_inputs, nodes, outputs, buffer_updates)
    return program, state


# -- input and output structure ------------------------------------------------------------------


def output_builder(spec) -> Callable[[list], Any]:
    """A function rebuilding torch's output structure from flat leaves, dataclass outputs as dicts."""

    def build(spec, leaves):
        if spec.is_leaf():
            return next(leaves)
        children = [build(child, leaves) for child in spec.children_specs]
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
    args_spec, kwargs_spec = in_spec.children_specs
    kwarg_names = list(kwargs_spec.context) if kwargs_spec.context else []
    n_args = args_spec.num_children

    def flatten(args: tuple, kwargs: dict) -> list:
        from ..errors import InputError

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
        ordered = {k: kwargs[k] for k in kwarg_names}
        leaves, spec = torch.utils._pytree.tree_flatten((tuple(args), ordered))
        if spec != in_spec:
            raise InputError(f"inputs have structure {spec}, but the model was exported with {in_spec}")
        return leaves

    return flatten
