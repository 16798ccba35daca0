"""A program written as statements, in the order and with the casts of the interpreter.

`_Emitter` writes the model's program as `forward()`'s body, one statement per live node, and
subgraphs as nested functions defined just before the node that calls them. To match the
interpreter bit for bit it first runs the program once (`_trace`, abstractly under
`jax.eval_shape` where the model can be jitted) and writes down what it saw: which nodes ran at
trace time (they go in `with jax.ensure_compile_time_eval():` blocks) and which lowering results
the interpreter casts to the recorded dtype (those statements end in the same `.astype`).
"""

from __future__ import annotations

import keyword
import re
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ..errors import JaxportError
from ..ir import Node, Program, Ref, Subgraph, TensorSpec, interpret, references
from ..ops import registry
from ._literals import (
    _dtype_literal,
    _identifier,
    _Literals,
    _Namer,
    _short_op,
    _string,
    _text,
    _where,
)

#: Constants up to this many values are written inline; larger ones go to constants.safetensors.
INLINE_CONSTANT_SIZE = 16


# --- the analysis run ------------------------------------------------------------------------


@dataclass
class _Facts:
    """What one node did when the program was traced: whether it ran at trace time (all its
    arguments concrete), and the dtypes its lowering returned before the interpreter's cast."""

    concrete: bool
    returned: Any


#: Facts for a node the analysis run never reached (an If branch its example inputs did not
#: take): its statement casts at run time, with `_as_recorded`, as the interpreter does.
_UNSEEN = _Facts(False, "unknown")


def _returned(out):
    if isinstance(out, (tuple, list)):
        return type(out)(_returned(o) for o in out)
    if hasattr(out, "dtype") and hasattr(out, "shape"):
        return np.dtype(out.dtype)
    if np.isscalar(out):
        return "scalar"
    return None


def _example_inputs(program: Program, concrete: bool) -> list | None:
    """Inputs of the declared shapes (symbolic dims 2) to trace with, or None where an
    input's rank is unknown (ONNX sequences). Concrete ones are ones: a zero trip count or
    an all-zero mask would leave parts of a model unrun."""
    examples = []
    for spec in program.user_inputs:
        if spec.spec is None or spec.spec.shape is None:
            return None
        shape = tuple(2 if d is None else d for d in spec.spec.shape)
        dtype = np.dtype(jax.dtypes.canonicalize_dtype(spec.spec.dtype))
        examples.append(jnp.ones(shape, dtype) if concrete else jax.ShapeDtypeStruct(shape, dtype))
    return examples


def _trace(model) -> dict[tuple[int, int], _Facts]:
    """Run the program once, abstractly where it can be jitted, recording `_Facts` per
    (id of its program, node index), subgraphs' nodes included. A node seen several times
    (a loop body traced twice) ran at trace time if it did in any of them: wrapping a
    traced computation in `ensure_compile_time_eval` changes nothing."""
    facts: dict[tuple[int, int], _Facts] = {}

    def observe(program, index, concrete, out):
        seen = facts.get((id(program), index))
        facts[(id(program), index)] = _Facts(concrete or (seen is not None and seen.concrete), _returned(out))

    program = model.program
    examples = _example_inputs(program, concrete=not model.jittable)
    if model.jittable and examples is not None:
        jax.eval_shape(lambda p, *xs: interpret(program, p, xs, observe=observe)[0], model.params, *examples)
    elif examples is not None:
        try:  # op by op, on made-up values: what it sees only spares some casts
            interpret(program, model.params, examples, observe=observe)
        except JaxportError:
            facts.clear()
    return facts


# --- the program -----------------------------------------------------------------------------


def _scope(node: Node, onnx: bool) -> str:
    """The block a node belongs to: its module path (torch) or its name's scope (ONNX)."""
    if not onnx:
        return node.module_path
    name = node.module_path
    return name.rsplit("/", 1)[0] if "/" in name.strip("/") else name


def _section(scope: str) -> str:
    """The part of a model a scope belongs to, for the contents: the module path up to its
    first layer number ("encoder.layer.3"), or its first component ("embeddings")."""
    parts = [p for p in re.split(r"[./]", scope) if p]
    for i, part in enumerate(parts[:4]):
        if part.isdigit():
            return ".".join(parts[: i + 1])
    return parts[0] if parts else ""


def _live_nodes(program: Program):
    """The nodes an output depends on, those of the subgraphs they run included."""
    live, _ = _live(program)
    for node, needed in zip(program.nodes, live):
        if needed:
            yield node
            for _, sub in node.subgraphs():
                yield from _live_nodes(sub.program)


class _Emitter:
    """Writes programs as statements: the model's as forward()'s body, subgraphs' as nested
    functions defined just before the node that calls them."""

    def __init__(self, model, facts: dict, functions: dict[str, str], namer: _Namer):
        self.jittable = model.jittable
        self.facts, self.functions, self.namer = facts, functions, namer
        self.onnx = any(node.op.startswith("onnx.") or node.outputs for node in model.program.walk())
        self.large_constants: dict[str, np.ndarray] = {}
        self.jax_constants: list[str] = []
        self.sections: list[tuple[str, int]] = []  # (section, its banner's index in forward's body)
        self.uses_rng = False

    def constants(self, program: Program, env: dict[str, str]) -> None:
        for value, constant in program.constants.items():
            if isinstance(constant, (np.ndarray, jax.Array)) and np.size(constant) > INLINE_CONSTANT_SIZE:
                key = value if value not in self.large_constants else f"{value}#{id(program)}"
                self.large_constants[key] = np.asarray(constant)
                if isinstance(constant, jax.Array):
                    self.jax_constants.append(key)
                env[value] = f"CONSTANTS[{_string(key)}]"
            else:
                env[value] = _Literals(f"constant {_text(value)}")(constant)

    def expression(self, value, env: dict[str, str], where: str, functions: dict[int, str]) -> str:
        if isinstance(value, Ref):
            return env[value.name]
        if isinstance(value, Subgraph):
            return functions[id(value)]
        if isinstance(value, (tuple, list)) and any(isinstance(v, (Ref, Subgraph)) for v in value):
            items = [self.expression(v, env, where, functions) for v in value]
            if isinstance(value, list):
                return "[" + ", ".join(items) + "]"
            return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"
        if isinstance(value, dict) and any(isinstance(v, (Ref, Subgraph)) for v in value.values()):
            return "{" + ", ".join(f"{_string(k)}: {self.expression(v, env, where, functions)}"
                                   for k, v in value.items()) + "}"
        return _Literals(where)(value)

    def program(self, program: Program, env: dict[str, str], rng: str, top: bool = True) -> list[str]:
        """Statements computing `program` from `env` (its inputs' expressions), ending in `return`."""
        self.constants(program, env)
        live, read = _live(program)
        body: list[str] = []
        scope, source, in_block = None, None, False
        for index, node in enumerate(program.nodes):
            if not live[index]:
                continue
            fact = self.facts.get((id(program), index), _UNSEEN)
            where = f"node {_text(node.name)}"
            node_scope = _scope(node, self.onnx)
            if top and (section := _section(node_scope)) != (self.sections[-1][0] if self.sections else None):
                body += ["", f"# === {_text(section, 90) or '(top level)'} ==="]
                self.sections.append((section, len(body) - 1))
                in_block = False
            if node_scope != scope or (node.source and node.source != source and not self.onnx):
                in_block = False
                body.append("")
                label = _text(node_scope) or "(top level)"
                if self.onnx:
                    note = f"{label}: {node.source}" if node_scope == node.module_path else label
                else:
                    note = f"{label}: {_where(node.source)}" if node.source else label
                body.append(f"# {_text(note, 96)}")
                scope, source = node_scope, node.source
            stem = self.stem(node, index)
            functions = {}
            for key, sub in node.subgraphs():
                in_block = False
                functions[id(sub)] = self.namer.fresh(f"{stem}_{key}")
                body += self.subgraph(sub, functions[id(sub)], env, f"jax.random.fold_in({rng}, {index})")
            call_args = [self.expression(a, env, where, functions) for a in node.args]
            for name, value in node.kwargs.items():
                text = self.expression(value, env, where, functions)
                if name.isidentifier() and not keyword.iskeyword(name):
                    call_args.append(f"{name}={text}")
                else:
                    call_args.append(f"**{{{_string(name)}: {text}}}")
            if (rng_keyword := registry.random_keyword(node.op)) is not None:
                self.uses_rng = True
                call_args.append(f"{rng_keyword}=jax.random.fold_in({rng}, {index})")
            call = f"{self.functions[node.op]}({', '.join(call_args)})"
            statements = _statements(node, fact, call, stem, self.namer, env, read)
            if fact.concrete and self.jittable:
                if not in_block:
                    body.append("with jax.ensure_compile_time_eval():  # shape arithmetic, known while tracing")
                    in_block = True
                body.extend("    " + s for s in statements)
            else:
                in_block = False
                body.extend(statements)
        outputs = [self.expression(o, env, "output", {}) for o in program.outputs]
        if top:
            result = outputs[0] if len(outputs) == 1 else "(" + ", ".join(outputs) + ")"
        else:  # subgraphs return their list of outputs, as the interpreter's do
            result = "[" + ", ".join(outputs) + "]"
        return body + ["", f"return {result}"]

    def stem(self, node: Node, index: int) -> str:
        """What a node's value is named after: module path and op (torch), node name (ONNX)."""
        op = _short_op(node.op)
        if not self.onnx:
            return f"{node.module_path}_{op}" if node.module_path else op
        if node.module_path and not _identifier(node.module_path).endswith(op.lower()):
            return f"{node.module_path}_{op}"
        return node.module_path or f"{op}_{index}"

    def subgraph(self, subgraph: Subgraph, name: str, env: dict[str, str], rng: str) -> list[str]:
        """A nested function for `subgraph`: its own inputs are parameters, the values it
        captures are read from the enclosing function."""
        program = subgraph.program
        own = len(program.user_inputs) - len(subgraph.captures)
        inner: dict[str, str] = {}
        parameters = []
        for spec in program.user_inputs[:own]:
            parameters.append(self.namer.fresh(spec.name, "input"))
            inner[spec.value] = parameters[-1]
        for spec, outer in zip(program.user_inputs[own:], subgraph.captures):
            inner[spec.value] = env[outer]
        key = self.namer.fresh(f"{name}_rng")
        lines = self.program(program, inner, key, top=False)
        if any(f"({key}, " in line for line in lines):
            lines = [f"{key} = {rng}", *lines]
        return ["", f"def {name}({', '.join(parameters)}):", *("    " + line if line else "" for line in lines)]


def _live(program: Program) -> tuple[list[bool], set[str]]:
    """(per node: whether an output or update depends on it, every value name read by a live
    node, an output or an update). Nodes are pure, so the others can be left out."""
    read = set(references((program.outputs, program.buffer_updates, program.input_updates)))
    live = [False] * len(program.nodes)
    for index in reversed(range(len(program.nodes))):
        node = program.nodes[index]
        if any(name in read for name in (node.outputs or (node.name,))):
            live[index] = True
            read.update(references((node.args, node.kwargs)))
    return live, read


def _result_names(node: Node, stem: str, namer: _Namer, env: dict[str, str], read: set[str]) -> list[str]:
    """Variables for a node's named results (ONNX), bound in `env`; "_" for those nobody reads."""
    targets = []
    for i, value in enumerate(node.outputs):
        if value and value in read:
            env[value] = namer.fresh(stem if len(node.outputs) == 1 else f"{stem}_{i}")
            targets.append(env[value])
        else:
            targets.append("_")
    return targets


def _statements(node: Node, fact: _Facts, call: str, stem: str, namer: _Namer,
                env: dict[str, str], read: set[str]) -> list[str]:
    """The assignment(s) for one node, with the interpreter's dtype casts."""
    expected = node.expected
    if fact is _UNSEEN:  # the analysis run never reached it: cast at run time, as the interpreter does
        if node.outputs:
            targets = _result_names(node, stem, namer, env, read)
            return [f"{', '.join(targets)}, = _recorded_results({call}, {_recorded(expected)})"]
        target = namer.fresh(stem)
        env[node.name] = target
        return [f"{target} = _as_recorded({call}, {_recorded(expected)})"]
    if node.outputs:  # ONNX: several named results
        targets = _result_names(node, stem, namer, env, read)
        returned = fact.returned if isinstance(fact.returned, tuple) else (fact.returned,)
        if len(node.outputs) == 1 and not isinstance(fact.returned, tuple):
            lines = [f"{targets[0]} = {_cast(call, returned[0], expected[0])}"]
        else:
            extra = ", *_" if len(returned) > len(node.outputs) else ""
            lines = [f"{', '.join(targets)}{',' if len(targets) == 1 and not extra else ''}{extra} = {call}"]
            for target, got, spec in zip(targets, returned, expected):
                if target != "_" and _cast(target, got, spec) != target:
                    lines.append(f"{target} = {_cast(target, got, spec)}")
        return lines
    target = namer.fresh(stem)
    env[node.name] = target
    if isinstance(expected, (tuple, list)) and isinstance(fact.returned, (tuple, list)) \
            and len(expected) == len(fact.returned):
        fixed = [_cast(f"{target}[{i}]", got, spec) for i, (got, spec) in enumerate(zip(fact.returned, expected))]
        lines = [f"{target} = {call}"]
        if any(f != f"{target}[{i}]" for i, f in enumerate(fixed)):
            kind = "list" if isinstance(fact.returned, list) else "tuple"
            lines.append(f"{target} = {kind}(({', '.join(fixed)},))")
        return lines
    return [f"{target} = {_cast(call, fact.returned, expected)}"]


def _recorded(expected) -> str:
    """The dtypes a node's results are recorded with, as `_as_recorded` takes them."""
    if isinstance(expected, TensorSpec):
        return _dtype_literal(jax.dtypes.canonicalize_dtype(expected.dtype))
    if isinstance(expected, (tuple, list)):
        return "(" + "".join(_recorded(e) + ", " for e in expected).rstrip() + ")"
    return "None"


def _cast(expr: str, returned, expected) -> str:
    """`expr` as the interpreter leaves it: cast to the recorded dtype where the lowering's differs."""
    if not isinstance(expected, TensorSpec):
        return expr
    want = np.dtype(jax.dtypes.canonicalize_dtype(expected.dtype))
    if returned == "scalar":
        expr, returned = f"jnp.asarray({expr})", None
    if returned is None or returned != want:
        return f"{expr}.astype({_dtype_literal(want)})"
    return expr
