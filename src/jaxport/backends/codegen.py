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
code (`_literals`).

Here: `emit` (the files) and `generate` (the module's text around `forward()`'s body). The
body is `_emitter`'s, the copied lowerings `_sources.OpLibrary`'s.

`emit` writes model.py, the weights and a `manifest.json` (each file's size and sha256) into a
staging directory that takes the place of an earlier output in one step (`jaxport.files`), so a
reader never finds a half-written model; `jaxport.files.check_directory(out_dir)` checks the files
against the manifest.

`safetensors` is imported where the weights are written: it is an optional dependency.
"""

from __future__ import annotations

import importlib.util
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
import numpy as np

from .. import versions
from ..errors import OpUse, UnsupportedOpsError
from ..files import MANIFEST, write_directory
from ..ir import Program
from ..ops import registry
from ._emitter import INLINE_CONSTANT_SIZE, _Emitter, _live_nodes, _trace
from ._literals import EmitError, _dtype_literal, _Namer, _string, _text
from ._sources import NotCopyable, OpLibrary
from .model import JaxModel

__all__ = ["CONSTANTS_FILE", "INLINE_CONSTANT_SIZE", "MODULE_FILE", "WEIGHTS_FILE", "EmitError", "Emitted", "emit",
           "generate"]

WEIGHTS_FILE = "weights.safetensors"
CONSTANTS_FILE = "constants.safetensors"
MODULE_FILE = "model.py"
#: Names the generated module defines or imports itself.
_RESERVED = {"CONSTANTS", "INPUTS", "OUTPUTS", "forward", "load_params", "jax", "jnp", "lax", "math", "np",
             "os", "load_file", "params", "rng", "key", "inputs", "outputs", "updates", "_here",
             "_as_recorded", "_recorded_results"}


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


# --- the module ------------------------------------------------------------------------------


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
