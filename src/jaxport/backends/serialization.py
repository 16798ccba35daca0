"""Serialized export: a converted model as a `jax.export` (StableHLO) artifact plus its weights.

`export(model, example_args)` traces `model.apply` once into a `jax.export.Exported` of
`f(params, *inputs) -> [outputs]`. The parameters are arguments, not constants baked into the
StableHLO, so the artifact stays small and the weights stay an ordinary, separately replaceable
`weights.safetensors`. Input dims the converted program records as dynamic (those named in
`from_torch(..., dynamic_shapes=...)`) become symbolic sizes, so one artifact serves every batch
size (and sequence length) the torch model did.

`ExportedModel.save(directory)` writes:

  model.jaxexport       `Exported.serialize()`: the StableHLO program, its calling convention
                        and its input/output pytrees
  weights.safetensors   `params` by state_dict name (tied weights once, under the first name)
  signature.json        input names/shapes/dtypes in call order, output names, output structure
  manifest.json         each file's size and sha256, written last (`jaxport.files`)

The three files take the place of an earlier export in `directory` together, in one step, so a
reader never sees a half-written file or a mix of two exports. `load_exported` checks them against
the manifest before reading them; exports from before the manifest (jaxport 0.2.0) load
unchecked, with a `jaxport.files.UnverifiedFilesWarning`.

The artifact needs only JAX, NumPy and safetensors: no torch, no jaxport. To run it anywhere::

    import json
    import jax
    from safetensors.numpy import load_file

    d = "path/to/directory"
    with open(f"{d}/model.jaxexport", "rb") as f:
        exported = jax.export.deserialize(f.read())
    params = load_file(f"{d}/weights.safetensors")
    inputs = [s["name"] for s in json.load(open(f"{d}/signature.json"))["inputs"]]  # call order
    run = jax.jit(exported.call)               # jit once: an eager call re-dispatches every time
    outputs = run(params, *arrays)             # arrays in `inputs` order; a flat list of outputs

That standalone call returns the flat list of output arrays (in `signature.json`'s "outputs"
order). `jaxport.load_exported(directory)` returns an `ExportedModel` that also rebuilds the
nested output structure (dicts, tuples, lists) recorded in `signature.json`.

If the model was exported with `jax_enable_x64` on, the loading process must turn it on too.
`safetensors` is imported where weights are written or read: it is an optional dependency.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .. import versions
from ..errors import InputError, SerializationError, one_line
from ..files import open_directory, write_directory
from ..ir import flatten_by_name, interpret
from ..ops import _native
from .inputs import as_jax
from .model import JaxModel

EXPORT_FILE = "model.jaxexport"
WEIGHTS_FILE = "weights.safetensors"
SIGNATURE_FILE = "signature.json"
_FORMAT = 1

#: What `dynamic=` accepts: "auto"/True/False, or {input name: {dim: symbol name}}.
Dynamic = str | bool | Mapping[str, Mapping[int, str]]


class ExportedModel:
    """A model as a `jax.export.Exported` plus its weights, callable in this process.

    `exported` is the `jax.export.Exported` of `f(params, *inputs) -> [outputs]`; `params` the
    flat `{state_dict name: array}` it takes. Calling the `ExportedModel` runs the compiled
    artifact on its own `params`, with inputs passed as the original model took them (from
    `export`) or flat, by position or by input name (from `load`), and rebuilds the output
    structure. To run other weights, call `exported.call(params, *flat_inputs)` directly.

    `input_names`, `input_shapes` (ints, or the symbol name of a symbolic dim) and
    `input_dtypes` describe the flat inputs in call order; `output_names` the flat outputs.
    """

    def __init__(
        self,
        exported: jax.export.Exported,
        params: Mapping[str, Any],
        *,
        input_names: Sequence[str],
        input_shapes: Sequence[Sequence[int | str]],
        input_dtypes: Sequence[str],
        output_names: Sequence[str],
        output_tree: Any = None,
        name: str = "model",
        flatten_inputs: Callable[[tuple, dict], list] | None = None,
        build_outputs: Callable[[list], Any] | None = None,
    ):
        self.exported = exported
        self.params = dict(params)
        self.input_names = tuple(input_names)
        self.input_shapes = tuple(tuple(s) for s in input_shapes)
        self.input_dtypes = tuple(input_dtypes)
        self.output_names = tuple(output_names)
        self.output_tree = output_tree
        self.name = name
        self._flatten_inputs = flatten_inputs or flatten_by_name(self.input_names)
        if build_outputs is None:
            build_outputs = (list if output_tree is None
                             else lambda flat: _decode_tree(output_tree, flat))
        self._build_outputs = build_outputs
        # An eager Exported.call re-dispatches the whole program each time (~20 ms); jitted, it
        # is compiled once per input shape.
        self._call = jax.jit(exported.call)

    def _check(self, leaves: list) -> list:
        """Inputs as JAX arrays, checked by name against the exported shapes and dtypes."""
        arrays = []
        sizes: dict[str, tuple[int, str]] = {}
        for x, name, shape, dtype in zip(leaves, self.input_names, self.input_shapes, self.input_dtypes):
            x = as_jax(x, what=f"input '{name}'")
            if not hasattr(x, "shape"):
                x = jnp.asarray(x)
            want = "[" + ", ".join(map(str, shape)) + "]"
            if len(x.shape) != len(shape) or any(
                isinstance(s, int) and s != n for s, n in zip(shape, x.shape)
            ):
                raise InputError(f"input '{name}' has shape {tuple(x.shape)}, but {self.name} was "
                                 f"exported for {dtype}{want}")
            for s, n in zip(shape, x.shape):
                if isinstance(s, str):
                    seen = sizes.setdefault(s, (n, name))
                    if seen[0] != n:
                        raise InputError(f"input '{name}' has {s}={n} but input '{seen[1]}' has "
                                         f"{s}={seen[0]}; the model was exported with them equal")
            if jnp.dtype(x.dtype) != jnp.dtype(dtype):
                raise InputError(f"input '{name}' has dtype {jnp.dtype(x.dtype).name}, but "
                                 f"{self.name} was exported for {dtype}{want}")
            arrays.append(x)
        return arrays

    def call(self, *args, **kwargs) -> Any:
        """Run the artifact on `params` and the inputs; returns the outputs, structured."""
        leaves = self._flatten_inputs(args, kwargs)
        flat = self._call(self.params, *self._check(list(leaves)))
        return self._build_outputs(list(flat))

    __call__ = call

    def save(self, directory: str | os.PathLike) -> Path:
        """Write model.jaxexport, weights.safetensors, signature.json and their manifest into
        `directory` (created if missing; an export there is replaced as a whole, other files are
        kept). A kill or a full disk part way leaves the previous export as it was; a failed write
        is a `jaxport.files.WriteError` (an `OSError`). Returns the directory."""
        versions.require("safetensors")
        from safetensors.numpy import save_file

        out = Path(directory)
        params = {k: np.asarray(v) for k, v in self.params.items()}
        signature = {
            "format": _FORMAT,
            "name": self.name,
            "jax_enable_x64": bool(jax.config.jax_enable_x64),
            "inputs": [
                {"name": n, "shape": list(s), "dtype": d}
                for n, s, d in zip(self.input_names, self.input_shapes, self.input_dtypes)
            ],
            "outputs": list(self.output_names),
            "output_tree": self.output_tree,
        }
        write_directory(out, {
            EXPORT_FILE: bytes(self.exported.serialize()),
            WEIGHTS_FILE: lambda path: save_file(params, path),
            SIGNATURE_FILE: (json.dumps(signature, indent=1) + "\n").encode(),
        }, kind="export")
        return out

    def __repr__(self) -> str:
        ins = ", ".join(f"{n}: {d}[{', '.join(map(str, s))}]"
                        for n, s, d in zip(self.input_names, self.input_shapes, self.input_dtypes))
        return f"ExportedModel({self.name}: ({ins}) -> {len(self.output_names)} output(s))"


def load_exported(directory: str | os.PathLike) -> ExportedModel:
    """Load what `ExportedModel.save` wrote. Inputs go flat, by position or input name; outputs
    come back in the recorded structure. (The artifact itself needs no jaxport: see the module
    docstring for the few lines that run it with JAX and safetensors alone.) A missing, truncated
    or corrupt part is one `SerializationError` naming the file: each is checked against the
    export's manifest first, then read and checked for what it holds."""
    d = Path(directory)
    found = open_directory(d, (EXPORT_FILE, WEIGHTS_FILE, SIGNATURE_FILE), kind="export", error=SerializationError)
    d = found.directory
    missing = [f for f in (EXPORT_FILE, WEIGHTS_FILE, SIGNATURE_FILE) if not (d / f).is_file()]
    if missing:
        raise SerializationError(f"{d} holds no exported model: missing {', '.join(missing)} "
                                 "(write one with jaxport.export(...).save(directory))")
    signature = _read_signature(d / SIGNATURE_FILE, found.read(SIGNATURE_FILE))
    if signature.get("jax_enable_x64") and not jax.config.jax_enable_x64:
        raise SerializationError(f"{d} was exported with 64-bit types (jax_enable_x64); call "
                                 "jax.config.update('jax_enable_x64', True) before loading it")
    path = d / EXPORT_FILE
    try:
        exported = jax.export.deserialize(bytearray(found.read(EXPORT_FILE)))
        in_args, _ = jax.tree_util.tree_unflatten(exported.in_tree, list(exported.in_avals))
    except SerializationError:
        raise
    except Exception as e:  # noqa: BLE001 - flatbuffers and JAX raise struct.error, IndexError, ...
        raise SerializationError(f"{path} is not a readable jax.export artifact (truncated or corrupt?): "
                                 f"{type(e).__name__}: {one_line(e, 200)}") from None
    params = parse_safetensors(found.read(WEIGHTS_FILE), d / WEIGHTS_FILE, SerializationError)
    inputs = signature["inputs"]
    _check_artifact(d, in_args, params, inputs)
    return ExportedModel(
        exported,
        params,
        input_names=[i["name"] for i in inputs],
        input_shapes=[i["shape"] for i in inputs],
        input_dtypes=[i["dtype"] for i in inputs],
        output_names=signature["outputs"],
        output_tree=signature.get("output_tree"),
        name=signature.get("name", "model"),
    )


def parse_safetensors(data: bytes, path: str | os.PathLike, error: type[Exception]) -> dict[str, np.ndarray]:
    """The arrays of a `.safetensors` file's bytes (read from `path`); a truncated or corrupt file
    is one `error` naming it (safetensors checks its header against the bytes' length)."""
    versions.require("safetensors")
    from safetensors.numpy import load

    try:
        return load(data)
    except Exception as e:  # noqa: BLE001 - SafetensorError, a dtype NumPy lacks
        raise error(f"{path} is not a readable safetensors file (truncated or corrupt?): "
                    f"{type(e).__name__}: {one_line(e, 200)}") from None


def _read_signature(path: Path, data: bytes) -> dict:
    """signature.json's bytes (read from `path`), its fields checked (format, input names, shapes
    and dtypes, outputs)."""
    try:
        signature = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise SerializationError(f"{path} is not valid JSON ({e}): the export is corrupt") from None
    if not isinstance(signature, dict):
        raise SerializationError(f"{path} holds a {type(signature).__name__}, not an export signature")
    if signature.get("format") != _FORMAT:
        raise SerializationError(f"{path} has format {signature.get('format')!r}; "
                                 f"this jaxport reads format {_FORMAT}")
    inputs, outputs = signature.get("inputs"), signature.get("outputs")
    valid_inputs = isinstance(inputs, list) and all(
        isinstance(i, dict) and isinstance(i.get("name"), str) and isinstance(i.get("dtype"), str)
        and isinstance(i.get("shape"), list) and all(
            (type(n) is int and n >= 0) or isinstance(n, str) for n in i["shape"]) for i in inputs)
    if not valid_inputs:
        raise SerializationError(f"{path} has no valid 'inputs' (a list of name, shape and dtype): the export "
                                 "is corrupt")
    for i in inputs:
        try:
            np.dtype(jnp.dtype(i["dtype"]))
        except TypeError:
            raise SerializationError(f"{path}: input '{i['name']}' has the unknown dtype {i['dtype']!r}") from None
    if not isinstance(outputs, list) or not all(isinstance(o, str) for o in outputs):
        raise SerializationError(f"{path} has no valid 'outputs' (a list of names): the export is corrupt")
    if not isinstance(signature.get("name", ""), str):
        raise SerializationError(f"{path} has a 'name' that is not a string: the export is corrupt")
    return signature


def _check_artifact(d: Path, in_args, params: Mapping[str, np.ndarray], inputs: list) -> None:
    """The artifact's arguments, `(params, *inputs)`, against the weights and the signature."""
    wanted = in_args[0] if isinstance(in_args, (tuple, list)) and in_args else None
    if not isinstance(wanted, dict) or len(in_args) - 1 != len(inputs):
        raise SerializationError(f"{d / EXPORT_FILE} does not take (params, {len(inputs)} input(s)) as "
                                 f"{d / SIGNATURE_FILE} says: the parts come from different exports")
    if set(wanted) != set(params):
        missing, extra = sorted(set(wanted) - set(params)), sorted(set(params) - set(wanted))
        raise SerializationError(f"{d / WEIGHTS_FILE} does not hold the weights {d / EXPORT_FILE} takes: "
                                 f"missing {missing[:5]}, unexpected {extra[:5]}")
    for name, aval in wanted.items():
        value = params[name]
        if tuple(value.shape) != tuple(aval.shape) or np.dtype(value.dtype) != np.dtype(aval.dtype):
            raise SerializationError(f"{d / WEIGHTS_FILE}: weight '{name}' is {value.dtype}{list(value.shape)}, "
                                     f"but {d / EXPORT_FILE} takes {np.dtype(aval.dtype)}{list(aval.shape)}")


def export(
    model: JaxModel,
    example_args: Any = (),
    example_kwargs: Mapping[str, Any] | None = None,
    *,
    dynamic: Dynamic = "auto",
    platforms: Sequence[str] | None = None,
) -> ExportedModel:
    """Export `model` (a `JaxModel`) as a serializable `jax.export` artifact.

    Args:
      model: from `jaxport.from_torch` or `jaxport.from_onnx`.
      example_args: positional inputs as the model takes them; with `example_kwargs` they fix
        the input structure and the sizes of static dims (their values are not used).
      example_kwargs: keyword inputs as the model takes them.
      dynamic: which input dims are symbolic sizes in the artifact.
        "auto": exactly the dims the converted program records as dynamic (for torch models,
        those named in `from_torch(..., dynamic_shapes=...)`); every other dim is static.
        True: the same, but an error if no dim is dynamic (you wanted a symbolic batch).
        False: every dim static, at the example's sizes.
        {input name: {dim: symbol name}}: those dims symbolic, the same name meaning the same
        size; every other dim static, at the example's size.
      platforms: the platforms the artifact may run on (e.g. ("cpu", "cuda")); default: this
        machine's.

    Raises `SerializationError` for a model whose output shapes depend on tensor values (it
    cannot be compiled at all), for symbolic sizes asked of dims the model fixed, and when the
    model cannot be traced with symbolic sizes (the message names the op; `dynamic=False`
    exports at the example's sizes instead).
    """
    _check_exportable(model)
    if not isinstance(example_args, tuple):
        example_args = (example_args,)
    leaves = model._flatten_inputs(example_args, dict(example_kwargs or {}))
    specs = model.program.user_inputs
    names = [s.name for s in specs]
    examples = []
    for x, spec in zip(leaves, specs):
        x = as_jax(x, what=f"input '{spec.name}'")
        if not hasattr(x, "shape"):
            raise SerializationError(f"input '{spec.name}' is a {type(x).__name__}, not a tensor; "
                                     "only tensor inputs can be exported")
        if spec.spec is not None and not spec.spec.admits(tuple(x.shape)):
            raise InputError(f"example input '{spec.name}' has shape {tuple(x.shape)}, but the "
                             f"model expects {spec.spec.describe()}")
        examples.append(x)
    dtypes = [np.dtype(jax.dtypes.canonicalize_dtype(
        s.spec.dtype if s.spec is not None else x.dtype)) for s, x in zip(specs, examples)]

    # A torch program names each dynamic dim's size symbol (Input.dims): dims with the same
    # symbol share one jax symbol, bounded above as torch.export bounded it (Program.dim_ranges).
    # Without those names (ONNX), "auto" first gives every dynamic dim its own symbol (the most
    # general artifact); if tracing fails (an op combines two of them, e.g. input_ids and
    # attention_mask's batch), it retries with dims of equal example size sharing a symbol.
    attempts = _symbol_plans(model, examples, dynamic)
    errors: list[tuple[str, Exception]] = []
    for plan in attempts:
        shapes = _shapes(examples, plan)
        try:
            exported = _trace(model, shapes, dtypes, platforms, _constraints(model, plan))
        except Exception as e:  # reported below, with every attempt's symbols
            errors.append((_describe_plan(names, shapes), e))
            continue
        return _finish(model, exported, names, shapes, dtypes)
    described, error = errors[-1]
    if not any(isinstance(s, str) for shape in _shapes(examples, attempts[-1]) for s in shape):
        raise SerializationError(f"could not export {model.name} for inputs {described}: "
                                 f"{type(error).__name__}: {error}") from error
    tried = "" if len(errors) == 1 else f" (and with {errors[0][0]})"
    raise SerializationError(
        f"could not export {model.name} with symbolic sizes {described}{tried}: "
        f"{type(error).__name__}: {error}\n"
        "Some lowering does not support symbolic sizes yet: pass dynamic=False to export at the "
        "example's sizes, or dynamic={input: {dim: name}} to choose which dims are symbolic."
    ) from error


def _check_exportable(model: JaxModel) -> None:
    if not isinstance(model, JaxModel):
        raise TypeError(f"jaxport.export takes a JaxModel (from jaxport.from_torch or from_onnx), "
                        f"not {type(model).__name__}")
    model._require_weights()  # an artifact carries its weights
    if not model.jittable:
        nodes = model.program.value_dependent_nodes()
        where = "\n".join(f"  {n.op} at {n.where()}" for n in nodes[:5])
        raise SerializationError(
            f"{model.name} cannot be exported: {len(nodes)} op(s) return tensors whose shape depends "
            f"on tensor values, which XLA cannot compile:\n{where}\n"
            "Make those shapes static in the model (e.g. torch.nonzero_static, or a mask instead "
            "of boolean indexing)."
        )
    if model.training and model.random_nodes:
        first = model.random_nodes[0]
        raise SerializationError(
            f"{model.name} was converted in training mode and draws random numbers ({first.op} at "
            f"{first.where()}); export the inference model: jaxport.from_torch(..., train=False)"
        )


def _symbol_plans(model: JaxModel, examples: list, dynamic: Dynamic) -> list[dict[tuple[int, int], str]]:
    """The symbol assignments to try, each {(input index, dim): symbol name}."""
    specs = model.program.user_inputs
    recorded = [(i, d) for i, s in enumerate(specs) if s.spec is not None and s.spec.shape is not None
                for d, size in enumerate(s.spec.shape) if size is None]
    hint = ("pass dynamic_shapes= to jaxport.from_torch when converting, e.g. "
            "dynamic_shapes={'x': {0: torch.export.Dim('batch')}}")
    if dynamic is False:
        return [{}]
    if isinstance(dynamic, Mapping):
        return [_named_plan(model, examples, dynamic, hint)]
    if dynamic is not True and dynamic != "auto":
        raise TypeError(f"dynamic must be 'auto', True, False or {{input: {{dim: name}}}}, not {dynamic!r}")
    if dynamic is True and not recorded:
        raise SerializationError(f"{model.name} was converted with static shapes, so no input dim can "
                                 f"be symbolic in the export; {hint}")
    # The symbol of dim d of input 'x' is x_d (input names are placeholder names: identifiers);
    # a dim with the same source symbol as an earlier one takes that one's.
    by_source: dict[str, str] = {}
    separate = {}
    for i, d in recorded:
        own, source = f"{_identifier(specs[i].name)}_{d}", specs[i].dims.get(d)
        separate[(i, d)] = own if source is None else by_source.setdefault(source, own)
    plans = [separate]
    if all(d in specs[i].dims for i, d in recorded):
        return plans  # the source said which dims are equal: no guessing from example sizes
    by_size: dict[int, str] = {}
    shared = {}
    for i, d in recorded:
        shared[(i, d)] = by_size.setdefault(int(examples[i].shape[d]), separate[(i, d)])
    if len(set(shared.values())) < len(separate):
        plans.append(shared)
    return plans


def _named_plan(model: JaxModel, examples: list, dynamic: Mapping, hint: str) -> dict:
    specs = model.program.user_inputs
    index = {s.name: i for i, s in enumerate(specs)}
    plan = {}
    for name, dims in dynamic.items():
        if name not in index:
            raise SerializationError(f"dynamic names input '{name}', but {model.name}'s inputs are "
                                     f"{', '.join(index)}")
        i = index[name]
        spec = specs[i].spec
        for d, symbol in dims.items():
            rank = len(examples[i].shape)
            if not -rank <= d < rank:
                raise SerializationError(f"input '{name}' has {rank} dims; dynamic names dim {d}")
            d %= rank
            if spec is not None and spec.shape is not None and spec.shape[d] is not None:
                raise SerializationError(
                    f"dim {d} of input '{name}' is static (size {spec.shape[d]}) in the converted "
                    f"model, so it cannot be symbolic in the export; {hint}")
            if not str(symbol).isidentifier():
                raise SerializationError(f"symbol names must be identifiers, not {symbol!r}")
            plan[(i, d)] = str(symbol)
    return plan


def _identifier(name: str) -> str:
    text = "".join(c if c.isalnum() or c == "_" else "_" for c in name)
    return text if text[:1].isalpha() else f"d_{text}"


def _shapes(examples: list, plan: Mapping[tuple[int, int], str]) -> list[tuple[int | str, ...]]:
    """Each input's shape: the symbol name where `plan` has one, else the example's size."""
    return [tuple(plan.get((i, d), int(n)) for d, n in enumerate(x.shape)) for i, x in enumerate(examples)]


def _describe_plan(names: list[str], shapes: list[tuple]) -> str:
    return ", ".join(f"{n}[{', '.join(map(str, s))}]" for n, s in zip(names, shapes))


def _constraints(model: JaxModel, plan: Mapping[tuple[int, int], str]) -> list[str]:
    """jax.export constraints "symbol <= max" for the symbols whose source dims have a finite max."""
    specs, ranges = model.program.user_inputs, model.program.dim_ranges
    upper: dict[str, int] = {}
    for (i, d), symbol in plan.items():
        hi = ranges.get(specs[i].dims.get(d), (0, None))[1]
        if hi is not None and hi < 2**62:  # (some torch versions bound "unbounded" at maxsize)
            upper[symbol] = min(hi, upper.get(symbol, hi))
    return [f"{symbol} <= {hi}" for symbol, hi in sorted(upper.items())]


def _trace(model: JaxModel, shapes: list[tuple], dtypes: list, platforms,
           constraints: Sequence[str] = ()) -> jax.export.Exported:
    symbols = sorted({s for shape in shapes for s in shape if isinstance(s, str)})
    # One symbolic_shape call puts every symbol in one scope, so shapes can share them.
    dims = (dict(zip(symbols, jax.export.symbolic_shape(", ".join(symbols), constraints=constraints)))
            if symbols else {})
    args = [jax.ShapeDtypeStruct(tuple(dims.get(s, s) if isinstance(s, str) else s for s in shape), dt)
            for shape, dt in zip(shapes, dtypes)]
    params = {k: jax.ShapeDtypeStruct(v.shape, v.dtype) for k, v in model.params.items()}
    program, strict = model.program, model.strict

    def run(params, *inputs):
        flat, _updates = interpret(program, params, list(inputs), strict=strict)
        # Constant outputs (Python scalars) become arrays; None stays an empty pytree node.
        return [o if o is None or isinstance(o, jax.Array) else jnp.asarray(o) for o in flat]

    run.__name__ = _identifier(model.name)
    with _native.portable():  # the artifact runs where jaxport's compiled kernels are not
        return jax.export.export(jax.jit(run), platforms=platforms)(params, *args)


def _finish(model: JaxModel, exported, names, shapes, dtypes) -> ExportedModel:
    n = len(model.program.outputs)
    try:
        # The output builder applied to leaf indices gives the structure with indices as leaves.
        tree = _encode_tree(model._build_outputs(list(range(n))))
        output_names = _leaf_names(tree, n)
    except (TypeError, ValueError):
        tree, output_names = None, [str(i) for i in range(n)]
    return ExportedModel(
        exported,
        model.params,
        input_names=names,
        input_shapes=shapes,
        input_dtypes=[np.dtype(d).name for d in dtypes],
        output_names=output_names,
        output_tree=tree,
        name=model.name,
        flatten_inputs=model._flatten_inputs,
        build_outputs=model._build_outputs,
    )


# -- output structure as JSON: an int is a leaf index; {"tuple"|"list": [...]}, {"dict": {...}}


def _encode_tree(tree) -> Any:
    if tree is None or isinstance(tree, int) and not isinstance(tree, bool):
        return tree
    if isinstance(tree, dict):
        if not all(isinstance(k, str) for k in tree):
            raise TypeError("dict outputs with non-string keys have no JSON form")
        return {"dict": {k: _encode_tree(v) for k, v in tree.items()}}
    if isinstance(tree, list):
        return {"list": [_encode_tree(v) for v in tree]}
    if isinstance(tree, tuple):  # namedtuples too: their fields come back as a tuple
        return {"tuple": [_encode_tree(v) for v in tree]}
    raise TypeError(f"cannot record an output structure holding {type(tree).__name__}")


def _decode_tree(tree, flat: list) -> Any:
    if tree is None:
        return None
    if isinstance(tree, int):
        return flat[tree]
    if "dict" in tree:
        return {k: _decode_tree(v, flat) for k, v in tree["dict"].items()}
    items = [_decode_tree(v, flat) for v in tree.get("list", tree.get("tuple", []))]
    return items if "list" in tree else tuple(items)


def _leaf_names(tree, n: int) -> list[str]:
    """Dotted names of the flat outputs ("logits", "pair.1.0"); the index where there is none."""
    names = [str(i) for i in range(n)]

    def walk(node, path):
        if isinstance(node, int):
            names[node] = ".".join(path) or str(node)
        elif isinstance(node, dict):
            for key, children in node.items():
                items = children.items() if key == "dict" else enumerate(children)
                for k, v in items:
                    walk(v, [*path, str(k)])

    walk(tree, [])
    return names
