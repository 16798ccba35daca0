"""Standalone JAX source for a converted model: `emit(model, out_dir)`.

The generated `model.py` needs JAX, NumPy and `safetensors` (for the weights)
and nothing of jaxport or torch: every lowering the model uses is copied from
jaxport's op library, once, with the helpers it calls (`_sources.OpLibrary`).
`forward(params, *inputs)` is the program written out node by node, one
statement each, in the order the interpreter runs them, so it computes what
`JaxModel.apply` computes:

- values are named after where they come from (module path and op for torch,
  the node's name for ONNX); a comment opens each module's (or ONNX scope's)
  block, with the user's source line where torch recorded one;
- where the interpreter casts a lowering's result to the dtype the source graph
  recorded, the statement ends in the same `.astype`; where it evaluates a node
  at trace time (every argument concrete: ONNX shape arithmetic), the statement
  sits in a `with jax.ensure_compile_time_eval():` block; random ops get the key
  the interpreter would give them (`jax.random.fold_in(rng, node index)`);
- parameters are read as `params["state_dict.name"]`; small constants are
  written inline, larger ones are saved beside the weights.

Everything taken from a model file (node, value and graph names, module paths,
source lines, attribute names and strings) reaches the source only as a
sanitized identifier, an ASCII-escaped string literal or comment text reduced to
printable ASCII without quotes or backslashes, so a hostile model cannot inject
code.

`emit` writes model.py, the weights and a `manifest.json` (each file's size and sha256) into a
staging directory that takes the place of an earlier output in one step (`jaxport.files`), so a
reader never finds a half-written model; `jaxport.files.check_directory(out_dir)` checks the files
against the manifest.

`safetensors` is imported where the weights are written: it is an optional dependency.
"""

from __future__ import annotations

import builtins
import importlib.util
import keyword
import math
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .. import versions
from ..errors import JaxportError, OpUse, UnsupportedOpsError
from ..files import MANIFEST, write_directory
from ..ir import Node, Program, Ref, Subgraph, TensorSpec, interpret, references
from ..ops import registry
from ._sources import NotCopyable, OpLibrary
from .model import JaxModel

#: Constants up to this many values are written inline; larger ones go to constants.safetensors.
INLINE_CONSTANT_SIZE = 16
WEIGHTS_FILE = "weights.safetensors"
CONSTANTS_FILE = "constants.safetensors"
MODULE_FILE = "model.py"
#: Names the generated module defines or imports itself.
_RESERVED = {"CONSTANTS", "INPUTS", "OUTPUTS", "forward", "load_params", "jax", "jnp", "lax", "math", "np",
             "os", "load_file", "params", "rng", "key", "inputs", "outputs", "updates", "_here",
             "_as_recorded", "_recorded_results"}


class EmitError(JaxportError):
    """The model cannot be written as standalone source (the message says what and where)."""


@dataclass(frozen=True)
class Emitted:
    """What `emit` wrote, and how long generating the source took (without writing weights)."""

    module: Path
    weights: Path
    constants: Path | None
    source_seconds: float
    lines: int
    ops: int
    #: Whether `ruff format` (ruff's default style) formatted model.py; ruff is optional.
    formatted: bool
    #: Each file's size and sha256, written last (`jaxport.files.check_directory` reads it).
    manifest: Path | None = None


def emit(model: JaxModel, out_dir: str | Path, *, force: bool = False) -> Emitted:
    """Write `model` (a `JaxModel` from `from_torch` or `from_onnx`) as `out_dir/model.py`
    plus its weights (`weights.safetensors`, and `constants.safetensors` for large
    constants) and `manifest.json`. Refuses an existing, non-empty `out_dir` unless `force`;
    checks every op before writing anything. The files replace an earlier output as a whole
    (other files in `out_dir` are kept): a kill or a full disk part way leaves what was there; a
    failed write is a `jaxport.files.WriteError` (an `OSError`)."""
    model._require_weights()  # the generated module is written with its weights
    out = Path(out_dir)
    if out.exists() and (not out.is_dir() or any(out.iterdir())) and not force:
        raise EmitError(f"{out} exists and is not empty; choose another directory or pass force=True "
                        "(--force on the command line)")
    start = time.perf_counter()
    source, constants = generate(model)
    seconds = time.perf_counter() - start
    versions.require("safetensors")
    from safetensors.numpy import save_file

    written: dict[str, Any] = {}

    def write_module(path: str) -> None:
        module = Path(path)
        module.write_text(source)
        written["formatted"] = _ruff_format(module)
        if written["formatted"]:
            module.write_text(_number_sections(module.read_text()))
        written["lines"] = module.read_text().count("\n")

    params = {name: np.asarray(value) for name, value in model.params.items()}
    files = {MODULE_FILE: write_module, WEIGHTS_FILE: lambda path: save_file(params, path)}
    if constants:
        files[CONSTANTS_FILE] = lambda path: save_file(constants, path)
    write_directory(out, files, kind="emitted model", owned=[CONSTANTS_FILE])
    return Emitted(out / MODULE_FILE, out / WEIGHTS_FILE, out / CONSTANTS_FILE if constants else None, seconds,
                   written["lines"], len(model.program.nodes), written["formatted"], out / MANIFEST)


def _ruff_format(path: Path) -> bool:
    """Format `path` with ruff's default style where ruff is installed (jaxport does not need it:
    the source is valid and `ruff check`-clean either way, only long lines stay unwrapped)."""
    if importlib.util.find_spec("ruff") is not None:
        command = [sys.executable, "-m", "ruff"]
    elif shutil.which("ruff"):
        command = [shutil.which("ruff")]
    else:
        return False
    done = subprocess.run([*command, "format", "--isolated", "--quiet", str(path)], capture_output=True)
    return done.returncode == 0


# --- names and text from the model -----------------------------------------------------------


def _identifier(text: str, fallback: str = "value") -> str:
    """`text` as a lower-case Python identifier of ASCII letters, digits and underscores."""
    name = re.sub(r"[^0-9a-zA-Z]+", "_", text).strip("_").lower()
    name = re.sub(r"_+", "_", name)[:64].rstrip("_") or fallback
    return f"v_{name}" if name[0].isdigit() else name


def _text(text: str, limit: int = 160) -> str:
    """Comment and docstring text: printable ASCII only, no quotes or backslashes, one line."""
    cleaned = "".join(c if 32 <= ord(c) < 127 and c not in "\"'\\" else " " for c in str(text))
    cleaned = re.sub(r"\s+", " ", cleaned).strip()
    return cleaned if len(cleaned) <= limit else cleaned[: limit - 3] + "..."


class _Namer:
    def __init__(self, taken: set[str]):
        self.taken = set(taken)

    def fresh(self, text: str, fallback: str = "value") -> str:
        base = _identifier(text, fallback)
        if keyword.iskeyword(base) or hasattr(builtins, base) or base in ("l", "o", "i"):
            base = f"{base}_"
        name, counter = base, 2
        while name in self.taken:
            name, counter = f"{base}_{counter}", counter + 1
        self.taken.add(name)
        return name


def _string(text: str) -> str:
    """A double-quoted, ASCII-only Python string literal for any `text`."""
    literal = ascii(text)
    if literal.startswith("'") and '"' not in text:
        literal = '"' + literal[1:-1] + '"'
    return literal


def _where(source: str) -> str:
    """A torch source location without its directories: "linear.py:134 in forward: ..."."""
    return re.sub(r"^\S*[/\\]", "", source)


def _short_op(op: str) -> str:
    """"aten.linear.default" -> "linear", "onnx.MatMul-13" -> "matmul", "operator.getitem" -> "getitem"."""
    if op.startswith("aten.") or op.startswith("prims."):
        return op.split(".")[1]
    return op.rsplit(".", 1)[-1].split("-")[0]


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


# --- literals --------------------------------------------------------------------------------


def _dtype_literal(dtype) -> str:
    dtype = np.dtype(dtype)
    if dtype.name in ("bfloat16",) or dtype.name.startswith("float8") or dtype.name.startswith("int4") \
            or dtype.name.startswith("uint4") or dtype.name.startswith("float4"):
        return f"np.dtype(jnp.{dtype.name})"
    return f"np.dtype({_string(dtype.name)})"


def _float_literal(value: float) -> str:
    if math.isnan(value):
        return "math.nan"
    if math.isinf(value):
        return "math.inf" if value > 0 else "-math.inf"
    return repr(float(value))


class _Literals:
    """Python source for the non-tensor values nodes take (and small constants)."""

    def __init__(self, where: str):
        self.where = where

    def __call__(self, value) -> str:
        if value is None or isinstance(value, (bool, np.bool_)):
            return repr(None if value is None else bool(value))
        if isinstance(value, (int, np.integer)):
            return repr(int(value))
        if isinstance(value, (float, np.floating)):
            return _float_literal(float(value))
        if isinstance(value, (complex, np.complexfloating)):
            return f"complex({_float_literal(value.real)}, {_float_literal(value.imag)})"
        if isinstance(value, str):
            return _string(value)
        if isinstance(value, tuple):
            items = [self(v) for v in value]
            return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"
        if isinstance(value, list):
            return "[" + ", ".join(self(v) for v in value) + "]"
        if isinstance(value, dict):
            return "{" + ", ".join(f"{self(k)}: {self(v)}" for k, v in value.items()) + "}"
        if isinstance(value, np.dtype):
            return _dtype_literal(value)
        if isinstance(value, type) and issubclass(value, np.generic):
            return _dtype_literal(value)
        if isinstance(value, slice):
            return f"slice({self(value.start)}, {self(value.stop)}, {self(value.step)})"
        if value is Ellipsis:
            return "..."
        if isinstance(value, (np.ndarray, jax.Array)):
            return self.array(value)
        raise EmitError(f"{self.where}: cannot write a {type(value).__name__} argument as source")

    def array(self, value) -> str:
        array = np.asarray(value)
        body = self(array.tolist()) if array.ndim else self(array.item())
        text = f"np.array({body}, dtype={_dtype_literal(array.dtype)})"
        return f"jnp.asarray({text})" if isinstance(value, jax.Array) else text


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


def generate(model) -> tuple[str, dict[str, np.ndarray]]:
    """(the source of `model.py`, {name: value} of the constants too large to write inline)."""
    program: Program = model.program
    program.check_supported()
    library = OpLibrary()
    lowering_keys, uncopyable = {}, []
    with registry.applying(program.lowerings):  # the lowerings the model was converted with
        for node in _live_nodes(program):
            if node.op in lowering_keys:
                continue
            try:
                lowering_keys[node.op] = library.add(registry.lookup(node.op), user=registry.provenance(node.op))
            except NotCopyable as e:
                uncopyable.append(OpUse(f"{node.op} ({e})", node.name, node.module_path, node.source))
    if uncopyable:
        raise UnsupportedOpsError(uncopyable)
    names = library.emitted_names(_RESERVED)
    emitter = _Emitter(model, _trace(model), {op: names[key] for op, key in lowering_keys.items()},
                       _Namer(_RESERVED | set(names.values()) | set(library.imports)))
    env: dict[str, str] = {}
    for value, key in program.state_inputs:
        env[value] = f"params[{_string(key)}]"
    input_names = []
    for spec in program.user_inputs:
        input_names.append(emitter.namer.fresh(spec.name, "input"))
        env[spec.value] = input_names[-1]
    body = emitter.program(program, env, "rng")
    updates = {**program.buffer_updates, **program.input_updates}
    if updates:
        update_items = ", ".join(f"{_string(k)}: {env[r.name]}" for k, r in updates.items())
        body[-1] = f"{body[-1]}, {{{update_items}}}"
    text = _module_text(model, library, names, input_names, body, emitter.sections, emitter.uses_rng,
                        bool(emitter.large_constants), emitter.jax_constants, updates)
    return text, emitter.large_constants


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


#: Emitted when some node's result dtype was not known at emit time (an If branch the
#: analysis run did not take): the interpreter's cast, done when the model runs.
_RUNTIME_CAST = '''
def _as_recorded(value, dtypes):
    """A result cast to the dtype(s) the source graph recorded, as jaxport's interpreter does."""
    if isinstance(dtypes, tuple):
        if isinstance(value, (tuple, list)) and len(value) == len(dtypes):
            return type(value)(_as_recorded(v, d) for v, d in zip(value, dtypes))
        return value
    if dtypes is None:
        return value
    if np.isscalar(value):
        value = jnp.asarray(value)
    return value if value.dtype == dtypes else value.astype(dtypes)


def _recorded_results(out, dtypes):
    """A node's named results (ONNX), each cast as `_as_recorded` does."""
    results = out if isinstance(out, tuple) else (out,)
    return tuple(_as_recorded(r, d) for r, d in zip(results[: len(dtypes)], dtypes))
'''


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


def _input_example(spec) -> str | None:
    """Source for a random input of `spec`'s shape (symbolic dims 1), None if it has none."""
    if spec.spec is None or spec.spec.shape is None:
        return None
    shape = tuple(1 if d is None else d for d in spec.spec.shape)
    dtype = np.dtype(jax.dtypes.canonicalize_dtype(spec.spec.dtype))
    if dtype.kind == "f":
        return f"rng.standard_normal({shape!r}).astype({_dtype_literal(dtype)})"
    return f"np.zeros({shape!r}, {_dtype_literal(dtype)})"


def _module_text(model, library: OpLibrary, names, input_names, body, sections, uses_rng,
                 has_constants, jax_constants, updates: Mapping) -> str:
    program = model.program
    specs = [(name, spec.spec.describe() if spec.spec else "?") for name, spec in zip(input_names, program.user_inputs)]
    output_names = getattr(model, "output_names", None) or [f"output {i}" for i in range(len(program.outputs))]
    doc = [f'"""{_text(model.name, 80) or "model"}: generated by jaxport from a converted model.', ""]
    doc.append("Needs JAX, NumPy and safetensors only. Usage:" if not library.imported else
               "Needs JAX, NumPy, safetensors and the modules of your lowerings imported below. Usage:")
    doc.append("")
    doc.append("    params = load_params()  # the weights beside this file")
    doc.append(f"    outputs = jax.jit(forward)(params, {', '.join(input_names)})" if model.jittable
               else f"    outputs = forward(params, {', '.join(input_names)})  # not jittable: value-dependent shapes")
    doc.append("")
    doc.append("Inputs: " + ", ".join(f"{n} {_text(d)}" for n, d in specs) + ".")
    doc.append("Outputs, in order: " + ", ".join(_text(str(n), 60) for n in output_names) + ".")
    if updates:
        doc.append("forward also returns {name: new value} for the buffers the model updates.")
    if uses_rng:
        doc.append("Random ops draw from the keyword argument rng (default: jax.random.key(0)).")
    mode = "on" if jax.config.jax_enable_x64 else "off (the default)"
    doc.append(f"Written for JAX's x64 mode {mode}: its dtype casts follow that mode.")
    doc.append(f"The model runs {len(program.nodes)} ops through {len(names)} functions copied from")
    doc.append("jaxport's op library (below); forward() follows the model's modules in order.")
    if library.user_lowerings:
        doc += ["", "Lowerings of your own, copied below or imported (then needed where this runs):"]
        for key, (where, how) in sorted(library.user_lowerings.items()):
            doc.append(f"  {names[key]}: {how}; {_text(where.replace(chr(39), ''), 120)}")
    doc.append('"""')
    imports = {"import os", "import jax", "import jax.numpy as jnp", "import numpy as np",
               "from safetensors.numpy import load_file", *library.imports.values(), *library.import_lines(names)}
    blocks = library.render(names)
    if any("math." in text for text in (*blocks, *body)):
        imports.add("import math")
    lines = doc + [""] + _import_block(imports) + [""]
    lines.append("# --- Op library: copied from jaxport ---")
    for block in blocks:
        lines += ["", "", *block.rstrip().splitlines()]
    lines += ["", "", "# --- The model ---", "", ""]
    if any("_as_recorded(" in line or "_recorded_results(" in line for line in body):
        lines += _RUNTIME_CAST.strip("\n").split("\n") + ["", ""]
    lines.append("_here = os.path.dirname(os.path.abspath(__file__))")
    if has_constants:
        lines.append(f"CONSTANTS = load_file(os.path.join(_here, {_string(CONSTANTS_FILE)}))")
        for name in jax_constants:
            lines.append(f"CONSTANTS[{_string(name)}] = jnp.asarray(CONSTANTS[{_string(name)}])")
    lines.append(f"INPUTS = ({''.join(_string(n) + ', ' for n in input_names).rstrip()})")
    lines += ["", "", "def load_params(path=None):",
              '    """The weights as {name: jax.Array}; by default from the file beside this module."""',
              f"    weights = load_file(path or os.path.join(_here, {_string(WEIGHTS_FILE)}))",
              "    return {name: jnp.asarray(value) for name, value in weights.items()}", "", ""]
    signature = ", ".join(["params", *input_names]) + (", *, rng=None" if uses_rng else "")
    if program.matmul_precision:  # float32 products as the source computes them
        lines.append(f"@jax.default_matmul_precision({_string(program.matmul_precision)})")
    lines.append(f"def forward({signature}):")
    contents = ['    """The model: pure in params and inputs.']
    if len(sections) > 1:  # a table of contents, so a long forward() can be navigated by line
        contents += ["", "    " + _SECTIONS_TITLE]
        contents += [f"    {_text(label, 70) or '(top level)'}: line ?" for label, _ in sections]
    contents.append('    """')
    if uses_rng:
        contents += ["    if rng is None:", "        rng = jax.random.key(0)"]
    body_lines = [("    " + line) if line else "" for line in body]
    for line in contents:
        lines.append(line)
    lines += body_lines
    lines += ["", "", 'if __name__ == "__main__":', "    rng = np.random.default_rng(0)"]
    unknown = [name for name, spec in zip(input_names, program.user_inputs) if _input_example(spec) is None]
    if unknown:  # sequences and inputs of unknown rank: nothing to make up
        message = f"inputs {', '.join(unknown)} have no declared shape: call forward() with your own"
        lines.append(f"    raise SystemExit({_string(message)})")
    else:
        for name, spec in zip(input_names, program.user_inputs):
            lines.append(f"    {name} = {_input_example(spec)}")
        run = "jax.jit(forward)" if model.jittable else "forward"
        lines.append(f"    result = {run}(load_params(), {', '.join(input_names)})")
        lines.append("    for leaf in jax.tree_util.tree_leaves(result):")
        lines.append("        print(leaf.shape, leaf.dtype)")
    return _number_sections("\n".join(_collapse_blank(lines)) + "\n")


_SECTIONS_TITLE = "Sections (line numbers in this file):"
_BANNER = re.compile(r"^    # === .* ===$")


def _number_sections(text: str) -> str:
    """Fill forward()'s table of contents with the lines its section banners are on (again
    after formatting moves them)."""
    lines = text.split("\n")
    banners = [i + 1 for i, line in enumerate(lines) if _BANNER.match(line)]
    if ("    " + _SECTIONS_TITLE) not in lines:
        return text
    first = lines.index("    " + _SECTIONS_TITLE) + 1
    for entry, number in zip(range(first, first + len(banners)), banners):
        lines[entry] = lines[entry][: lines[entry].rindex(": line ")] + f": line {number}"
    return "\n".join(lines)


_STANDARD_LIBRARY = {"functools", "itertools", "math", "operator", "os"}


def _import_block(imports: set[str]) -> list[str]:
    """Import lines in isort's order: the standard library, then the rest; in each, plain
    imports before from-imports, alphabetically."""
    def order(line: str):
        return line.startswith("from "), line.split()[1].lower(), line

    standard = sorted((i for i in imports if i.split()[1].split(".")[0] in _STANDARD_LIBRARY), key=order)
    others = sorted((i for i in imports if i not in standard), key=order)
    return standard + [""] + others


def _collapse_blank(lines: list[str]) -> list[str]:
    """No blank line right after a block opener, none doubled inside forward."""
    out: list[str] = []
    for line in lines:
        if not line.strip() and out and (out[-1].rstrip().endswith(":") and out[-1].startswith("    ")):
            continue
        if not line.strip() and len(out) >= 2 and not out[-1].strip() and not out[-2].strip():
            continue
        out.append(line)
    return out
