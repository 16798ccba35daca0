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
sanitized identifier, an `_string()` string literal or comment text reduced to
printable ASCII without quotes or backslashes, so a hostile model cannot inject
code.
"""

from __future__ import annotations

import builtins
import keyword
import math
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ..errors import JaxportError, OpUse, UnsupportedOpsError
from ..ops import registry
from ..program import Node, Program, Ref, Subgraph, TensorSpec, _all_concrete, interpret
from ._sources import NotCopyable, OpLibrary

#: Constants up to this many values are written inline; larger ones go to constants.safetensors.
INLINE_CONSTANT_SIZE = 16
WEIGHTS_FILE = "weights.safetensors"
CONSTANTS_FILE = "constants.safetensors"
MODULE_FILE = "model.py"
#: Names the generated module defines or imports itself.
_RESERVED = {"CONSTANTS", "INPUTS", "OUTPUTS", "forward", "load_params", "jax", "jnp", "lax", "math", "np",
             "os", "load_file", "params", "rng", "key", "inputs", "outputs", "updates", "_here"}


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


def emit(model, out_dir: str | Path, *, force: bool = False) -> Emitted:
    """Write `model` (a `JaxModel` from `from_torch` or `from_onnx`) as `out_dir/model.py`
    plus its weights (`weights.safetensors`, and `constants.safetensors` for large
    constants). Refuses an existing, non-empty `out_dir` unless `force`; checks every op
    before writing anything."""
    out = Path(out_dir)
    if out.exists() and (not out.is_dir() or any(out.iterdir())) and not force:
        raise EmitError(f"{out} exists and is not empty; choose another directory or pass force=True "
                        "(--force on the command line)")
    start = time.perf_counter()
    source, constants = generate(model)
    seconds = time.perf_counter() - start
    from safetensors.numpy import save_file

    out.mkdir(parents=True, exist_ok=True)
    module = out / MODULE_FILE
    module.write_text(source)
    formatted = _ruff_format(module)
    if formatted:
        module.write_text(_number_sections(module.read_text()))
    weights = out / WEIGHTS_FILE
    save_file({name: np.asarray(value) for name, value in model.params.items()}, str(weights))
    constants_path = None
    if constants:
        constants_path = out / CONSTANTS_FILE
        save_file(constants, str(constants_path))
    elif (out / CONSTANTS_FILE).exists():
        (out / CONSTANTS_FILE).unlink()
    lines = module.read_text().count("\n")
    return Emitted(module, weights, constants_path, seconds, lines, len(model.program.nodes), formatted)


def _ruff_format(path: Path) -> bool:
    """Format `path` with ruff's default style where ruff is installed (jaxport does not need it:
    the source is valid and `ruff check`-clean either way, only long lines stay unwrapped)."""
    import importlib.util
    import shutil
    import subprocess
    import sys

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


def _returned(out):
    if isinstance(out, (tuple, list)):
        return type(out)(_returned(o) for o in out)
    if hasattr(out, "dtype") and hasattr(out, "shape"):
        return np.dtype(out.dtype)
    if np.isscalar(out):
        return "scalar"
    return None


def _example_inputs(program: Program, concrete: bool) -> list:
    examples = []
    for spec in program.user_inputs:
        if spec.spec is None or spec.spec.shape is None:
            raise EmitError(f"input '{_text(spec.name)}' has no known rank; cannot write its program out")
        shape = tuple(2 if d is None else d for d in spec.spec.shape)
        dtype = np.dtype(jax.dtypes.canonicalize_dtype(spec.spec.dtype))
        examples.append(jnp.zeros(shape, dtype) if concrete else jax.ShapeDtypeStruct(shape, dtype))
    return examples


def _trace(model) -> list[_Facts]:
    """Run the program once, abstractly where it can be jitted, recording `_Facts` per node."""
    facts: list[_Facts] = []

    def lookup(op: str):
        fn = registry.lookup(op)

        def recorded(*args, **kwargs):
            out = fn(*args, **kwargs)
            facts.append(_Facts(_all_concrete(args, kwargs), _returned(out)))
            return out

        return recorded

    program = model.program
    if model.jittable:
        jax.eval_shape(lambda p, *xs: interpret(program, p, xs, lookup=lookup)[0],
                       model.params, *_example_inputs(program, False))
    else:
        facts_on_zeros = interpret(program, model.params, _example_inputs(program, True), lookup=lookup)
        del facts_on_zeros
    if len(facts) != len(program.nodes):
        raise EmitError(f"traced {len(facts)} node calls for {len(program.nodes)} nodes")
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


def _subgraph_nodes(program: Program) -> list[Node]:
    def has_subgraph(value) -> bool:
        if isinstance(value, Subgraph):
            return True
        return isinstance(value, (tuple, list)) and any(has_subgraph(v) for v in value)

    return [n for n in program.nodes
            if any(has_subgraph(v) for v in (*n.args, *n.kwargs.values()))]


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
    control_flow = _subgraph_nodes(program)
    if control_flow:
        raise UnsupportedOpsError([OpUse(f"{n.op} (control flow: code generation does not write "
                                         "subgraphs yet)", n.name, n.module_path, n.source)
                                   for n in control_flow])
    live, read = _live(program)
    library = OpLibrary()
    lowering_keys, uncopyable = {}, []
    for node, needed in zip(program.nodes, live):
        if not needed or node.op in lowering_keys:
            continue
        try:
            lowering_keys[node.op] = library.add(registry.lookup(node.op))
        except NotCopyable as e:
            uncopyable.append(OpUse(f"{node.op} ({e})", node.name, node.module_path, node.source))
    if uncopyable:
        raise UnsupportedOpsError(uncopyable)
    facts = _trace(model)
    onnx = any(node.op.startswith("onnx.") or node.outputs for node in program.nodes)
    names = library.emitted_names(_RESERVED)
    namer = _Namer(_RESERVED | set(names.values()) | set(library.imports))

    state = dict(program.state_inputs)  # value name -> params key
    env: dict[str, str] = {}  # program value name -> Python expression
    large_constants: dict[str, np.ndarray] = {}
    jax_constants: list[str] = []
    for value, constant in program.constants.items():
        if isinstance(constant, (np.ndarray, jax.Array)) and np.size(constant) > INLINE_CONSTANT_SIZE:
            large_constants[value] = np.asarray(constant)
            if isinstance(constant, jax.Array):
                jax_constants.append(value)
            env[value] = f"CONSTANTS[{_string(value)}]"
        else:
            env[value] = _Literals(f"constant {_text(value)}")(constant)
    for value, key in state.items():
        env[value] = f"params[{_string(key)}]"
    input_names = []
    for spec in program.user_inputs:
        input_names.append(namer.fresh(spec.name, "input"))
        env[spec.value] = input_names[-1]

    def expression(value, where: str) -> str:
        if isinstance(value, Ref):
            return env[value.name]
        if isinstance(value, (tuple, list)) and any(isinstance(v, Ref) for v in value):
            items = [expression(v, where) for v in value]
            if isinstance(value, list):
                return "[" + ", ".join(items) + "]"
            return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"
        if isinstance(value, dict) and any(isinstance(v, Ref) for v in value.values()):
            return "{" + ", ".join(f"{_string(k)}: {expression(v, where)}" for k, v in value.items()) + "}"
        return _Literals(where)(value)

    body: list[str] = []
    sections: list[tuple[str, int]] = []  # (section, its banner's index in body)
    scope, source, in_block = None, None, False
    uses_rng = False
    for index, (node, fact) in enumerate(zip(program.nodes, facts)):
        if not live[index]:
            continue
        where = f"node {_text(node.name)}"
        node_scope = _scope(node, onnx)
        if (section := _section(node_scope)) != (sections[-1][0] if sections else None):
            body += ["", f"# === {_text(section, 90) or '(top level)'} ==="]
            sections.append((section, len(body) - 1))
            in_block = False
        if node_scope != scope or (node.source and node.source != source and not onnx):
            if in_block:
                in_block = False
            body.append("")
            label = _text(node_scope) or "(top level)"
            if onnx:
                note = f"{label}: {node.source}" if node_scope == node.module_path else label
            else:
                note = f"{label}: {_where(node.source)}" if node.source else label
            body.append(f"# {_text(note, 96)}")
            scope, source = node_scope, node.source
        call_args = [expression(a, where) for a in node.args]
        for name, value in node.kwargs.items():
            text = expression(value, where)
            if name.isidentifier() and not keyword.iskeyword(name):
                call_args.append(f"{name}={text}")
            else:
                call_args.append(f"**{{{_string(name)}: {text}}}")
        if (rng_keyword := registry.random_keyword(node.op)) is not None:
            uses_rng = True
            call_args.append(f"{rng_keyword}=jax.random.fold_in(rng, {index})")
        call = f"{names[lowering_keys[node.op]]}({', '.join(call_args)})"
        if onnx:
            stem = node.module_path or f"{_short_op(node.op)}_{index}"
            if node.module_path and not _identifier(stem).endswith(_short_op(node.op).lower()):
                stem = f"{stem}_{_short_op(node.op)}"
        else:
            stem = f"{node.module_path}_{_short_op(node.op)}" if node.module_path else _short_op(node.op)
        statements = _statements(node, fact, call, stem, namer, env, read)
        if fact.concrete and model.jittable:
            if not in_block:
                body.append("with jax.ensure_compile_time_eval():  # shape arithmetic, known while tracing")
                in_block = True
            body.extend("    " + s for s in statements)
        else:
            in_block = False
            body.extend(statements)

    outputs = [expression(o, "output") for o in program.outputs]
    result = outputs[0] if len(outputs) == 1 else "(" + ", ".join(outputs) + ("," if len(outputs) == 1 else "") + ")"
    updates = {**program.buffer_updates, **program.input_updates}
    body.append("")
    if updates:
        update_items = ", ".join(f"{_string(k)}: {env[r.name]}" for k, r in updates.items())
        body.append(f"return {result}, {{{update_items}}}")
    else:
        body.append(f"return {result}")
    text = _module_text(model, library, names, input_names, body, sections, uses_rng,
                        bool(large_constants), jax_constants, updates)
    return text, large_constants


def _refs(value, into: set[str]) -> set[str]:
    if isinstance(value, Ref):
        into.add(value.name)
    elif isinstance(value, (tuple, list)):
        for v in value:
            _refs(v, into)
    elif isinstance(value, Mapping):
        for v in value.values():
            _refs(v, into)
    return into


def _live(program: Program) -> tuple[list[bool], set[str]]:
    """(per node: whether an output or update depends on it, every value name read by a live
    node, an output or an update). Nodes are pure, so the others can be left out."""
    read = _refs(program.outputs, set())
    _refs(dict(program.buffer_updates), read)
    _refs(dict(program.input_updates), read)
    live = [False] * len(program.nodes)
    for index in reversed(range(len(program.nodes))):
        node = program.nodes[index]
        if any(name in read for name in (node.outputs or (node.name,))):
            live[index] = True
            _refs(node.args, read)
            _refs(dict(node.kwargs), read)
    return live, read


def _statements(node: Node, fact: _Facts, call: str, stem: str, namer: _Namer,
                env: dict[str, str], read: set[str]) -> list[str]:
    """The assignment(s) for one node, with the interpreter's dtype casts."""
    expected = node.expected
    if node.outputs:  # ONNX: several named results
        targets = []
        for i, value in enumerate(node.outputs):
            if value and value in read:
                env[value] = namer.fresh(stem if len(node.outputs) == 1 else f"{stem}_{i}")
                targets.append(env[value])
            else:
                targets.append("_")
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


def _input_example(spec) -> str:
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
    doc.append("Needs JAX, NumPy and safetensors only. Usage:")
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
    doc.append(f"The model runs {len(program.nodes)} ops through {len(names)} functions copied from")
    doc.append("jaxport's op library (below); forward() follows the model's modules in order.")
    doc.append('"""')
    imports = {"import os", "import jax", "import jax.numpy as jnp", "import numpy as np",
               "from safetensors.numpy import load_file", *library.imports.values()}
    blocks = library.render(names)
    if any("math." in text for text in (*blocks, *body)):
        imports.add("import math")
    lines = doc + [""] + _import_block(imports) + [""]
    lines.append("# --- Op library: copied from jaxport ---")
    for block in blocks:
        lines += ["", "", *block.rstrip().splitlines()]
    lines += ["", "", "# --- The model ---", "", ""]
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
