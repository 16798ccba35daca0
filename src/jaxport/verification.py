"""`verify`: a model run through jaxport and through its reference on the same inputs, and, with
`localize=True`, the first node whose lowering gives another result than the reference's op.

References: PyTorch for a `torch.nn.Module`, an `ExportedProgram` or a `.pt2` file (the exported
graph, after the decompositions jaxport's translation applies, so its nodes are the program's);
onnxruntime for an `.onnx` file.

Localization runs both sides node by node. Each jaxport node is evaluated on the *reference's*
values of its inputs and its result compared with the reference's result for the same node, so
a wrong lowering is named where it is, not where rounding accumulated over many correct nodes
first crosses a tolerance. Beside it runs jaxport's own propagation (each node on jaxport's
values, as `apply` runs op by op), whose outputs are compared end to end. Values are held only
until their last reader has run, on both sides, so memory is that of one run, not of every
intermediate. Nodes jaxport adds or rewrites (write-backs of in-place view writes, the bodies of
inlined higher-order ops, size arithmetic it folds) have no reference value of their own: they
are computed, so later nodes have inputs, but not compared, and the report counts them.

Tolerances are per dtype (`TOLERANCES`): integers and booleans exactly, floats within
`atol + rtol * |reference|`, NaN where the reference has NaN counting as a match
(`jaxport.compare`). Node by node, the relative part is taken of each tensor's largest
magnitude (`compare(..., per_tensor=True)`): one op's rounding on an element near zero left by
cancellation is not a wrong lowering.

Error messages name the command line's options (`--dim`, `--seed`): `jaxport verify` is a thin
layer over this module. `onnxruntime` (an optional dependency) is imported inside the functions
that run it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import functools
import json
import math
import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Protocol

import jax
import jax.numpy as jnp
import numpy as np
import sympy
import torch
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind, OutputKind

from . import dtypes
from .backends.inputs import as_jax
from .backends.model import JaxModel
from .compare import OutputCheck, as_numpy, compare, compare_all
from .dlpack import to_numpy, to_torch
from .errors import InputError, JaxportError, ModelFileError, one_line
from .frontends import onnx as onnx_frontend
from .frontends import torch_export
from .frontends.pt2 import load_exported_program
from .frontends.torch_export.nodes import INLINED_HOPS
from .ir import Input, Node, Program, Ref, Subgraph, TensorSpec, interpret
from .ops import registry

# -- tolerances ---------------------------------------------------------------------------------

#: (rtol, atol) by the dtype jaxport computes in; integers and booleans compare exactly. float64
#: is float32 with JAX's x64 mode off (`jax.dtypes.canonicalize_dtype`), and judged as float32.
TOLERANCES: dict[np.dtype, tuple[float, float]] = {
    np.dtype(jnp.bfloat16): (1.6e-2, 1e-2),
    np.dtype(np.float16): (1e-2, 1e-3),
    np.dtype(np.float32): (1e-4, 1e-5),
    np.dtype(np.float64): (1e-7, 1e-9),
}


def tolerance(dtype: Any, rtol: float | None = None, atol: float | None = None) -> tuple[float, float]:
    """(rtol, atol) for values of the reference's `dtype`: exact for integers and booleans; for
    floating and complex values `rtol`/`atol` where given, else `TOLERANCES` by the dtype JAX
    computes in (a complex dtype by its parts')."""
    dtype = np.dtype(dtype)
    if jnp.issubdtype(dtype, jnp.complexfloating):
        dtype = np.dtype(np.float32 if dtype.itemsize == 8 else np.float64)
    elif not jnp.issubdtype(dtype, jnp.floating):  # bfloat16's NumPy kind is "V", so ask JAX
        return 0.0, 0.0
    default = TOLERANCES.get(np.dtype(jax.dtypes.canonicalize_dtype(dtype)), TOLERANCES[np.dtype(np.float32)])
    return (default[0] if rtol is None else rtol), (default[1] if atol is None else atol)


# -- the report ---------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class TensorStats:
    """What a value looks like: shape, dtype, the range and mean of its finite values (None when
    it has none, or is not numeric), and how many NaN and infinite values it holds."""

    shape: tuple[int, ...]
    dtype: str
    min: float | None
    max: float | None
    mean: float | None
    nan: int
    inf: int

    def describe(self) -> str:
        text = f"{self.dtype}{list(self.shape)}"
        if self.min is not None:
            text += f" min {self.min:.4g} max {self.max:.4g} mean {self.mean:.4g}"
        if self.nan or self.inf:
            text += f" ({self.nan} NaN, {self.inf} inf)"
        return text


def tensor_stats(value: Any) -> TensorStats:
    """`TensorStats` of an array (JAX, NumPy, torch) or a Python number."""
    x = np.asarray(as_numpy(value))
    if not (x.dtype == np.bool_ or jnp.issubdtype(x.dtype, jnp.number)):
        return TensorStats(tuple(x.shape), str(x.dtype), None, None, None, 0, 0)
    f = np.abs(x).astype(np.float64) if x.dtype.kind == "c" else x.astype(np.float64)
    finite = f[np.isfinite(f)]
    stats = (float(finite.min()), float(finite.max()), float(finite.mean())) if finite.size else (None,) * 3
    return TensorStats(tuple(x.shape), str(x.dtype), *stats, int(np.isnan(f).sum()), int(np.isinf(f).sum()))


@dataclasses.dataclass(frozen=True)
class Divergence:
    """A node whose lowering, run on the reference's inputs, gives another result than the reference."""

    #: the node's position in the program
    index: int
    node: str
    op: str
    #: the module (PyTorch) or ONNX node name it came from, and its source line / ONNX op and opset
    module_path: str
    source: str
    #: which of the node's values differs: its name, `name[i]` for an element of a tuple
    value: str
    #: what differs: values beyond tolerance; shape, dtype, NaN or infinity placement; or the
    #: lowering's error on the reference's inputs
    problem: str
    max_abs: float
    max_rel: float
    rtol: float
    atol: float
    #: (value name, stats) of each input, as the node received them (the reference's values)
    inputs: tuple[tuple[str, TensorStats], ...]
    jaxport: TensorStats | None
    reference: TensorStats | None
    #: where the lowering comes from when it is not jaxport's own (`jaxport.lowerings`,
    #: `jaxport.register_lowering`); "" for jaxport's own
    lowering: str = ""
    #: inputs that jaxport computed without a reference value to compare or feed (nodes it adds
    #: or rewrites): the difference may be theirs
    unreferenced_inputs: tuple[str, ...] = ()

    def describe(self) -> list[str]:
        """The divergence as indented report lines."""
        where = f"node {self.node} ({self.op})"
        if self.module_path:
            where += f" in module '{self.module_path}'"
        lines = [where]
        if self.source:
            lines.append(f"  at {self.source}")
        if self.lowering:
            lines.append(f"  lowering: {self.lowering}")
        lines.append(f"  {self.value}: {self.problem}")
        if not math.isnan(self.max_abs):
            lines.append(f"  max abs err {self.max_abs:.3g}, max rel err {self.max_rel:.3g} "
                         f"(rtol {self.rtol:g}, atol {self.atol:g}, relative to the tensor's largest magnitude)")
        for name, stats in self.inputs:
            lines.append(f"  input {name}: {stats.describe()}")
        if self.unreferenced_inputs:
            lines.append(f"  inputs computed by jaxport without a reference value, which may be where the difference "
                         f"arises: {', '.join(self.unreferenced_inputs)}")
        if self.jaxport is not None:
            lines.append(f"  jaxport:   {self.jaxport.describe()}")
        if self.reference is not None:
            lines.append(f"  reference: {self.reference.describe()}")
        return lines


#: How many divergences a report describes in full; it counts every one.
DESCRIBED_DIVERGENCES = 20


@dataclasses.dataclass
class VerificationReport:
    """What `verify` found: the end-to-end comparison of every output and, when localized, the
    node-by-node one. `passed` needs both: every output within tolerance and no diverging node."""

    #: the model file, or the module's class name
    model: str
    #: "PyTorch 2.x" or "onnxruntime 1.x"
    reference: str
    #: each output of jaxport's run (its own values throughout) against the reference's
    outputs: list[OutputCheck]
    #: the tolerances asked for; None: per dtype (`TOLERANCES`)
    rtol: float | None = None
    atol: float | None = None
    localized: bool = False
    #: nodes in the program; those compared with a reference value; those without one (nodes
    #: jaxport adds or rewrites, bodies of inlined higher-order ops); random ones (not comparable)
    nodes: int = 0
    compared: int = 0
    without_reference: int = 0
    random: int = 0
    #: how many nodes diverge; the first `DESCRIBED_DIVERGENCES` of them, in program order
    diverging: int = 0
    divergences: list[Divergence] = dataclasses.field(default_factory=list)
    #: why jaxport's own (propagated) run stopped, if a lowering failed on its own values
    propagation_error: str = ""
    #: the most node results the walk held at once on the reference-fed side (weights and
    #: inputs not counted): values are dropped after their last reader
    peak_intermediates: int = 0
    seconds: float = 0.0

    @property
    def first_divergence(self) -> Divergence | None:
        """The first node, in program order, whose lowering diverges; None if none does."""
        return self.divergences[0] if self.divergences else None

    @property
    def passed(self) -> bool:
        return all(o.passed for o in self.outputs) and not self.diverging and not self.propagation_error

    def as_dict(self) -> dict[str, Any]:
        """The report as JSON-ready values (floats that are NaN become None)."""
        report = dataclasses.asdict(self)
        report["passed"] = self.passed
        report["first_divergence"] = report["divergences"][0] if self.divergences else None
        return _json_ready(report)

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.as_dict(), indent=indent)

    def __str__(self) -> str:
        return format_report(self)


def _json_ready(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _json_ready(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_ready(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value)


def format_report(report: VerificationReport) -> str:
    """The report as text: the divergences (when localized), then the table of outputs, then
    PASS or FAIL."""
    given = [f"{name} {value:g}" for name, value in (("rtol", report.rtol), ("atol", report.atol)) if value is not None]
    tolerances = ", ".join(given) + (", otherwise" if given else "tolerances") + " per dtype"
    lines = [f"{report.model}: jaxport against {report.reference} ({tolerances})"]
    if report.localized:
        lines.append(f"node by node: {report.nodes} nodes, {report.compared} compared on the reference's inputs, "
                     f"{report.without_reference} without a reference value, {report.random} random; "
                     f"at most {report.peak_intermediates} intermediate values held ({report.seconds:.2f} s)")
        first = report.first_divergence
        if first is None:
            lines.append("no node diverges")
        else:
            lines.append(f"first diverging node ({report.diverging} diverge in all):")
            lines += ["  " + line for line in first.describe()]
            others = report.divergences[1:]
            if others:
                listed = ", ".join(f"{d.node} ({d.module_path})" if d.module_path else d.node for d in others)
                more = report.diverging - len(report.divergences)
                lines.append(f"  then: {listed}" + (f", and {more} more" if more else ""))
        if report.propagation_error:
            lines.append(f"jaxport's own run stopped: {report.propagation_error}")
        lines.append("end to end (jaxport's own values throughout):")
    width = max((len(o.name) for o in report.outputs), default=6)
    lines.append(f"  {'output':<{width}}  {'shape':<18} {'dtype':<9} {'max abs err':>12} {'max rel err':>12}  verdict")
    for o in report.outputs:
        verdict = "ok" if o.passed else "MISMATCH" + (f" ({o.problem})" if o.problem else "")
        lines.append(f"  {o.name:<{width}}  {str(list(o.shape)):<18} {o.dtype:<9} {o.max_abs:>12.3g} "
                     f"{o.max_rel:>12.3g}  {verdict}")
    lines.append("PASS" if report.passed else "FAIL")
    return "\n".join(lines)


# -- the API ------------------------------------------------------------------------------------


def verify(
    model: torch.nn.Module | ExportedProgram | str | os.PathLike,
    args: tuple = (),
    kwargs: Mapping[str, Any] | None = None,
    *,
    localize: bool = False,
    rtol: float | None = None,
    atol: float | None = None,
    seed: int = 0,
    dims: Mapping[str, int] | None = None,
) -> VerificationReport:
    """Run `model` through jaxport and through its reference on the same inputs and compare.

    Args:
      model: a `torch.nn.Module` (exported as `jaxport.from_torch` exports it, with `args` and
        `kwargs` as the example inputs it runs on), an `ExportedProgram`, or the path of an
        `.onnx` file or a `torch.export.save`d `.pt2` file.
      args, kwargs: the inputs. For a file or an `ExportedProgram` they may be left out: random
        inputs of the declared shapes are made then (`seed`; `dims` sizes named symbolic dims:
        ONNX dim names, torch.export size symbols such as s0).
      localize: also run both sides node by node and report the first node whose lowering,
        given the reference's inputs, differs from the reference beyond tolerance
        (`report.first_divergence`: node name, op, module path, source line, input and output
        statistics, the error).
      rtol, atol: tolerances for floating-point values; by default per dtype (`TOLERANCES`).

    Returns a `VerificationReport`; `str(report)` is the text report, `report.to_json()` the JSON.
    Invalid inputs, files and options raise a `JaxportError` of one line naming what is wrong.
    """
    options = _Options.checked(localize, rtol, atol, seed, dims)
    if isinstance(model, (str, os.PathLike)):
        return verify_file(os.fspath(model), _named_inputs(args, kwargs), options=options)
    if isinstance(model, ExportedProgram):
        return _verify_exported(model, "exported program", _named_inputs(args, kwargs), None, options)
    if isinstance(model, torch.nn.Module):
        if not isinstance(args, tuple):
            args = (args,)
        ep = torch_export.export(model, args, dict(kwargs or {}))
        return _verify_exported(ep, type(model).__name__, None, (args, dict(kwargs or {})), options)
    raise InputError(f"verify takes a torch.nn.Module, an ExportedProgram or the path of an .onnx or .pt2 "
                     f"file, not {type(model).__name__}")


@dataclasses.dataclass(frozen=True)
class _Options:
    localize: bool
    rtol: float | None
    atol: float | None
    seed: int
    dims: dict[str, int]

    @staticmethod
    def checked(localize, rtol, atol, seed, dims) -> _Options:
        """The options, each checked: one `InputError` naming the first bad one."""
        if type(seed) is not int or seed < 0:
            raise InputError(f"--seed {seed}: a seed is a non-negative integer")
        for name, value in (("rtol", rtol), ("atol", atol)):
            if value is not None and not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
                raise InputError(f"--{name} {value}: a tolerance is a finite non-negative number")
        dims = dict(dims or {})
        for name, size in dims.items():
            if type(size) is not int or size < 0:
                raise InputError(f"--dim {name}={size}: a size is a non-negative integer")
        return _Options(bool(localize), rtol, atol, seed, dims)


#: Why `dims` and given inputs exclude each other.
DIMS_WITH_INPUTS = "--dim sets the sizes of random inputs; with --inputs the arrays give every size"

#: Inputs by name, with where they came from (an .npz path, "the inputs"), or None for random ones.
NamedInputs = tuple[str, dict[str, Any]]


def _named_inputs(args: tuple, kwargs: Mapping[str, Any] | None) -> NamedInputs | None:
    """`args` as positional arr_0, arr_1, ... (as `numpy.savez` names them) and `kwargs` by name;
    None when both are empty (random inputs)."""
    if not isinstance(args, tuple):
        args = (args,)
    if not args and not kwargs:
        return None
    if args and kwargs:
        raise InputError("verify takes a file's inputs either by position (args) or by name (kwargs), not both")
    arrays = {f"arr_{i}": a for i, a in enumerate(args)} if args else dict(kwargs)
    return "the inputs", {k: np.asarray(as_numpy(v)) for k, v in arrays.items()}


def verify_file(path: str, inputs: NamedInputs | None = None, *, localize: bool = False, rtol: float | None = None,
                atol: float | None = None, seed: int = 0, dims: Mapping[str, int] | None = None,
                options: _Options | None = None) -> VerificationReport:
    """`verify` of an `.onnx` or `.pt2` file, with inputs by name (`(where they came from,
    {name or arr_i: array})`, as `jaxport verify --inputs` reads an `.npz`) or random ones."""
    options = options or _Options.checked(localize, rtol, atol, seed, dims)
    if inputs is not None and options.dims:
        raise InputError(DIMS_WITH_INPUTS)
    if model_file_kind(path) == "onnx":
        return _verify_onnx(path, inputs, options)
    return _verify_exported(load_exported_program(path), path, inputs, None, options)


def model_file_kind(path: str) -> str:
    """"onnx" or "pt2", from the file's extension (refusing anything else)."""
    if not os.path.isfile(path):
        raise ModelFileError(f"{path}: no such file")
    ext = os.path.splitext(path)[1].lower()
    if ext == ".onnx":
        return "onnx"
    if ext in (".pt2", ".pt", ".ep"):
        return "pt2"
    raise ModelFileError(f"{path}: expected an .onnx file or a torch.export.save'd .pt2 file")


# -- inputs -------------------------------------------------------------------------------------

#: The most bytes of random inputs `verify` makes for one input; larger sizes need --inputs.
RANDOM_INPUT_LIMIT = 2**32


def _random_input(name: str, shape: tuple, dtype: np.dtype, rng: np.random.Generator) -> np.ndarray:
    """Random values of `shape`, its sizes checked before anything is allocated."""
    if any(n < 0 for n in shape):
        raise InputError(f"input '{name}' would have the negative size {list(shape)}")
    nbytes = math.prod(shape) * dtype.itemsize
    if nbytes > RANDOM_INPUT_LIMIT:
        raise InputError(f"input '{name}' of shape {list(shape)} would take {nbytes:,} bytes of random values "
                         f"(the limit is {RANDOM_INPUT_LIMIT:,}); choose smaller sizes with --dim or pass --inputs")
    if dtype == np.bool_:
        return np.asarray(rng.random(shape) < 0.5)
    if dtype.kind in "iu":
        return np.asarray(rng.integers(0, 10, size=shape).astype(dtype))
    return np.asarray(rng.standard_normal(shape).astype(dtype))


def _did_you_mean(name: str, candidates: list[str]) -> str | None:
    """The candidate `name` most likely misspells: one differing only in case, else the closest."""
    same = [c for c in candidates if c.lower() == name.lower()]
    close = same or difflib.get_close_matches(name, candidates, n=1)
    return close[0] if close else None


def _bind(inputs: NamedInputs, names: list[str]) -> list[np.ndarray]:
    """The arrays in input order: by input name, or positionally as arr_0, arr_1, ... (as
    `numpy.savez(path, *arrays)` names them). Unknown, missing and extra names are errors."""
    where, arrays = inputs
    keys = list(arrays)
    positional = [f"arr_{i}" for i in range(len(names))]
    if set(keys) == set(names):
        return [arrays[n] for n in names]
    if set(keys) == set(positional) and not set(keys) & set(names):
        return [arrays[k] for k in positional]
    hint = f"the model's inputs are {', '.join(names) or '(none)'} (or name the arrays arr_0, arr_1, ... in that order)"
    if not keys:
        raise InputError(f"{where} holds no arrays; {hint}")
    missing = [n for n in names if n not in arrays]
    unknown = []
    for key in keys:
        if key not in names:
            close = _did_you_mean(key, missing or names)
            unknown.append(f"'{key}'" + (f" (did you mean '{close}'?)" if close else ""))
    parts = []
    if unknown:
        parts.append(f"holds {', '.join(unknown)}, which the model has no input of that name for")
    if missing:
        parts.append(f"lacks {', '.join(repr(n) for n in missing)}")
    raise InputError(f"{where} {' and '.join(parts)}; {hint}")


def _check_inputs(path: str, specs: Sequence[Input], inputs: list[np.ndarray], ranges: dict) -> None:
    """Each input against what the model declares (exact dtype, shape, the range and equality of
    each symbolic size), before either engine runs: one `InputError` naming the input."""
    sizes: dict[str, tuple[int, str]] = {}
    for spec, x in zip(specs, inputs):
        want = spec.spec
        if not isinstance(want, TensorSpec):
            continue
        expected = f"{np.dtype(want.dtype).name}{_describe_shape(want, spec.dims)}"
        if np.dtype(x.dtype) != np.dtype(want.dtype):
            raise InputError(f"{path}: input '{spec.name}' has dtype {x.dtype}, but the model expects {expected}")
        if not want.admits(tuple(x.shape)):
            raise InputError(f"{path}: input '{spec.name}' has shape {list(x.shape)}, but the model expects {expected}")
        dtypes.check_array(x, f"{path}: input '{spec.name}'", InputError)
        for d, symbol in spec.dims.items():
            n = int(x.shape[d])
            lo, hi = ranges.get(symbol, (0, None))
            if n < lo or (hi is not None and n > hi):
                bound = f">= {lo}" if hi is None else f"in [{lo}, {hi}]"
                raise InputError(f"{path}: input '{spec.name}' has size {n} in dim {d}, but the model expects "
                                 f"{expected} with {symbol} {bound}")
            first = sizes.setdefault(symbol, (n, spec.name))
            if first[0] != n:
                raise InputError(f"{path}: input '{spec.name}' has size {n} in dim {d}, but input '{first[1]}' "
                                 f"has {first[0]} for the same size {symbol}")


def _describe_shape(spec: TensorSpec, dims: dict[int, str]) -> str:
    if spec.shape is None:
        return "[...]"
    return "[" + ", ".join(str(n) if n is not None else dims.get(d, "?") for d, n in enumerate(spec.shape)) + "]"


def _unknown_dims(path: str, dims: Mapping[str, int], known: dict[str, str]) -> None:
    """Refuse --dim names the model has no symbolic dim of (known: {name: where it is used})."""
    for name in dims:
        if name not in known:
            close = _did_you_mean(name, list(known))
            listed = ", ".join(f"{k} ({v})" for k, v in known.items()) if known else "none: every size is fixed"
            raise InputError(f"--dim names '{name}', which is no symbolic dim of {path}"
                             + (f" (did you mean '{close}'?)" if close else "") + f"; its symbolic dims: {listed}")


def _onnx_random_inputs(path: str, declared, options: _Options) -> list[np.ndarray]:
    """Random inputs of the ONNX graph's declared shapes, a named dim's size from `dims` (else 1)."""
    known: dict[str, str] = {}
    for v in declared:
        for i, d in enumerate(v.type.tensor_type.shape.dim):
            if not d.HasField("dim_value") and d.dim_param:
                known.setdefault(d.dim_param, f"{v.name} dim {i}")
    _unknown_dims(path, options.dims, known)
    rng = np.random.default_rng(options.seed)
    inputs = []
    for v in declared:
        tensor = v.type.tensor_type
        shape = tuple(d.dim_value if d.HasField("dim_value") else options.dims.get(d.dim_param, 1)
                      for d in tensor.shape.dim)
        inputs.append(_random_input(v.name, shape, onnx_frontend.np_dtype(tensor.elem_type), rng))
    return inputs


def _pt2_random_inputs(path: str, ep: ExportedProgram, specs: Sequence[Input], options: _Options) -> list[np.ndarray]:
    """Random inputs of the program's shapes: each size symbol `dims` gives, else 2 moved into the
    range torch.export recorded for it, and derived sizes (2*s0) computed from those."""
    placeholders = {n.name: n for n in ep.graph.nodes if n.op == "placeholder"}
    exprs = []
    known: dict[str, str] = {}
    for spec in specs:
        if spec.spec is None or spec.spec.shape is None:
            raise InputError(f"{path}: input '{spec.name}' is not a tensor of known rank, so verify cannot make a "
                             "random one; pass the inputs with --inputs")
        val = placeholders[spec.value].meta.get("val") if spec.value in placeholders else None
        shape = [d.node.expr if isinstance(d, torch.SymInt) else d for d in val.shape] \
            if isinstance(val, torch.Tensor) else list(spec.spec.shape)
        exprs.append(shape)
        for i, d in enumerate(shape):
            for symbol in getattr(d, "free_symbols", ()):
                known.setdefault(str(symbol), f"{spec.name} dim {i}" + ("" if d == symbol else f": {d}"))
    _unknown_dims(path, options.dims, known)
    ranges = {str(k): v for k, v in ep.range_constraints.items()}
    values = {}
    for name in known:
        if name in options.dims:
            values[name] = options.dims[name]
            continue
        bounds = ranges.get(name)
        lower, upper = (bounds.lower, bounds.upper) if bounds is not None else (0, None)
        lo = int(lower) if isinstance(lower, (int, sympy.Integer)) else 0
        hi = int(upper) if isinstance(upper, (int, sympy.Integer)) else None
        values[name] = max(lo, 2) if hi is None else min(max(lo, 2), hi)
    rng = np.random.default_rng(options.seed)
    inputs = []
    for spec, shape in zip(specs, exprs):
        sizes = tuple(int(d.xreplace({s: values.get(str(s), 2) for s in d.free_symbols}))
                      if isinstance(d, sympy.Expr) else (2 if d is None else int(d)) for d in shape)
        inputs.append(_random_input(spec.name, sizes, np.dtype(spec.spec.dtype), rng))
    return inputs


# -- PyTorch: modules, exported programs, .pt2 files --------------------------------------------


def _verify_exported(ep: ExportedProgram, label: str, inputs: NamedInputs | None,
                     example: tuple[tuple, dict] | None, options: _Options) -> VerificationReport:
    """An exported program against PyTorch: on the module's example inputs (`example`), the
    inputs given by name, or random ones."""
    if options.localize:
        # The graph as jaxport translates it (only the ops it lacks decomposed), so that the
        # reference's nodes are the program's.
        ep = torch_export.lowerable(ep)
    translation = torch_export.translate(ep, decompose="none" if options.localize else "auto", name=label)
    model = JaxModel(translation)
    specs = model.program.user_inputs
    if example is not None:
        args, kwargs = example
        flat = [np.asarray(as_numpy(x)) if isinstance(x, torch.Tensor) else x
                for x in translation.flatten_inputs(args, kwargs)]
    else:
        flat = _bind(inputs, [s.name for s in specs]) if inputs is not None else \
            _pt2_random_inputs(label, ep, specs, options)
        _check_inputs(label, specs, flat, model.program.dim_ranges)
    reference = f"PyTorch {torch.__version__}"
    if options.localize:
        walk = _ExportedReference(ep, flat, model.program, label)
        return _localize(model, flat, walk, label, reference, options)
    in_spec = ep.call_spec.in_spec
    # The program's own (args, kwargs): a model exported with keyword inputs refuses positional ones.
    args, kwargs = (torch.utils._pytree.tree_unflatten(flat, in_spec)
                    if in_spec is not None and in_spec.num_leaves == len(flat) else (flat, {}))
    torch_args, torch_kwargs = torch.utils._pytree.tree_map(_as_torch, (args, kwargs))
    try:
        with torch.no_grad():
            expected = ep.module()(*torch_args, **torch_kwargs)
    except Exception as e:  # noqa: BLE001 - the reference's failure is reported, not raised
        raise ModelFileError(f"PyTorch cannot run {label}: {type(e).__name__}: {one_line(e, 300)}") from None
    actual = model(*args, **kwargs)
    checks = _compare_outputs(jax.tree_util.tree_leaves(actual), _output_leaves(expected), None, options)
    return VerificationReport(label, reference, checks, options.rtol, options.atol)


def _as_torch(x: Any) -> Any:
    return to_torch(x) if isinstance(x, (np.ndarray, jax.Array)) else x


def _output_leaves(output: Any) -> list:
    """The values a model's output holds, as `jax.tree_util.tree_leaves` lists jaxport's."""
    return [to_numpy(t) if isinstance(t, torch.Tensor) else t for t in torch.utils._pytree.tree_leaves(output)
            if isinstance(t, (torch.Tensor, int, float, bool))]


def _compare_outputs(actual: list, expected: list, names: Sequence[str] | None, options: _Options) -> list[OutputCheck]:
    """Each output against the reference's, with the tolerance of its dtype."""
    names = list(names) if names is not None else [f"output {i}" for i in range(max(len(actual), len(expected)))]
    checks = [compare(n, a, e, rtol=r, atol=t) for n, a, e in zip(names, actual, expected)
              for r, t in [tolerance(np.asarray(as_numpy(e)).dtype, options.rtol, options.atol)]]
    if len(actual) != len(expected):
        checks += compare_all(actual, expected)[len(checks):]
    return checks


class _ExportedReference:
    """PyTorch running an exported graph node by node, the bodies of the higher-order ops jaxport
    inlines (grad-mode and autocast regions) included, so that their nodes have reference values
    too; each value is freed after its last user, and those of the nodes the program has
    counterparts for are handed over as NumPy copies."""

    def __init__(self, ep: ExportedProgram, user_inputs: list, program: Program, label: str):
        self.label = label
        self.signature = ep.graph_signature
        fx_nodes = dict(_graph_nodes(ep.graph_module, ""))
        # A program node named as an FX node stands for its value (an in-place op as its
        # functional twin), except higher-order ops: jaxport runs what they wrap instead.
        self.counterparts = {node.name for node in program.nodes if node.name in fx_nodes
                             and not isinstance(fx_nodes[node.name].target, torch._ops.HigherOrderOperator)}
        self.events = self._events(ep, self._placeholder_values(ep, user_inputs))
        self.ready: dict[str, Any] = {}
        self.output: list | None = None

    def _placeholder_values(self, ep: ExportedProgram, user_inputs: list) -> list:
        """The graph's inputs in placeholder order: weights, constants, then the user's inputs.
        Buffers and inputs are copies, so in-place ops in the graph leave the caller's alone."""
        users = iter(user_inputs)
        values = []
        for spec in self.signature.input_specs:
            if spec.kind in (InputKind.PARAMETER, InputKind.BUFFER):
                tensor = ep.state_dict.get(spec.target)
                tensor = ep.constants[spec.target] if tensor is None else tensor
                values.append(tensor.clone() if spec.kind == InputKind.BUFFER else tensor)
            elif spec.kind == InputKind.CONSTANT_TENSOR:
                values.append(ep.constants[spec.target])
            elif spec.kind == InputKind.USER_INPUT:
                x = next(users)
                values.append(to_torch(np.array(x)) if isinstance(x, (np.ndarray, jax.Array)) else x)
            elif spec.kind == InputKind.TOKEN:
                values.append(torch.empty(0))
            else:
                raise ModelFileError(f"verify cannot run {self.label}'s {spec.kind.name} input node by node")
        return values

    def has(self, node: Node) -> bool:
        return node.name in self.counterparts

    def values(self, node: Node) -> dict[str, Any]:
        """{node name: the reference's value}, running the graph up to the node."""
        while node.name not in self.ready:
            self._step()
        return {node.name: self.ready.pop(node.name)}

    def outputs(self) -> list:
        """The graph's user outputs (flat), running the rest of the graph."""
        while self.output is None:
            self._step()
        return self.output

    def _step(self) -> None:
        try:
            name, value = next(self.events)
        except StopIteration:
            raise ModelFileError(f"{self.label}: the reference's graph ended before its output") from None
        if name is None:
            self.output = value
        else:
            self.ready[name] = value

    def _events(self, ep: ExportedProgram, inputs: list) -> Iterator[tuple[str | None, Any]]:
        """(name, value) of each counterpart as it is computed, then (None, the user outputs)."""
        flat = yield from self._run(ep.graph_module, inputs, "", contextlib.nullcontext)
        yield None, _output_leaves([v for v, spec in zip(flat, self.signature.output_specs)
                                    if spec.kind == OutputKind.USER_OUTPUT])

    def _run(self, graph: torch.fx.GraphModule, inputs: Sequence[Any], prefix: str,
             context: Callable[[], contextlib.AbstractContextManager]) -> Iterator[tuple[str, Any]]:
        """Run `graph` node by node, names prefixed as jaxport's translator prefixes an inlined
        body's (each op inside `context`: an autocast region's); returns its outputs."""
        env: dict[torch.fx.Node, Any] = {}
        last_users = _last_users(graph.graph)
        placeholders = iter(inputs)
        for fx_node in graph.graph.nodes:
            if fx_node.op == "placeholder":
                env[fx_node] = next(placeholders)
            elif fx_node.op == "get_attr":
                env[fx_node] = functools.reduce(getattr, fx_node.target.split("."), graph)
            elif fx_node.op == "call_function":
                args, kwargs = torch.fx.node.map_arg((fx_node.args, fx_node.kwargs), env.__getitem__)
                name = prefix + fx_node.name
                hop = getattr(fx_node.target, "__name__", "")
                if isinstance(fx_node.target, torch._ops.HigherOrderOperator) and hop in INLINED_HOPS:
                    body = INLINED_HOPS[hop]
                    inner = _region(hop, args, context)
                    env[fx_node] = tuple((yield from self._run(args[body], args[body + 1:], f"{name}_", inner)))
                else:
                    env[fx_node] = self._call(fx_node, name, args, kwargs, context)
                    if name in self.counterparts:
                        # A copy: a later in-place op in the graph must not change what was compared.
                        yield name, _numpy_copy(env[fx_node])
            elif fx_node.op == "output":
                return list(torch.fx.node.map_arg(fx_node.args[0], env.__getitem__))
            for done in last_users.get(fx_node, ()):
                del env[done]
        raise ModelFileError(f"{self.label}: a graph without an output node")

    def _call(self, fx_node: torch.fx.Node, name: str, args: tuple, kwargs: dict,
              context: Callable[[], contextlib.AbstractContextManager]) -> Any:
        try:
            with torch.no_grad(), context():
                return fx_node.target(*args, **kwargs)
        except Exception as e:  # noqa: BLE001 - the reference's failure is reported, not raised
            raise ModelFileError(f"PyTorch cannot run {self.label} at node {name}: "
                                 f"{type(e).__name__}: {one_line(e, 300)}") from None


def _region(hop: str, args: tuple, outer: Callable[[], contextlib.AbstractContextManager]):
    """The context an inlined higher-order op's body runs in: an autocast region's autocast (a
    grad-mode region changes no values: the walk runs without gradients throughout)."""
    if hop != "wrap_with_autocast":
        return outer
    device_type, dtype, enabled, cache_enabled = args[:4]

    @contextlib.contextmanager
    def region() -> Iterator[None]:
        with outer(), torch.autocast(device_type, dtype=dtype, enabled=enabled, cache_enabled=cache_enabled):
            yield

    return region


def _graph_nodes(graph: torch.fx.GraphModule, prefix: str) -> Iterator[tuple[str, torch.fx.Node]]:
    """(name, node) of every call_function node, inlined bodies' included under the names
    jaxport's translator gives them."""
    for fx_node in graph.graph.nodes:
        if fx_node.op != "call_function":
            continue
        yield prefix + fx_node.name, fx_node
        hop = getattr(fx_node.target, "__name__", "")
        if isinstance(fx_node.target, torch._ops.HigherOrderOperator) and hop in INLINED_HOPS:
            body = getattr(graph, fx_node.args[INLINED_HOPS[hop]].target)
            yield from _graph_nodes(body, f"{prefix}{fx_node.name}_")


def _last_users(graph: torch.fx.Graph) -> dict[torch.fx.Node, list[torch.fx.Node]]:
    """{node: the values whose last reader it is}, as `torch.fx.Interpreter` frees them."""
    last_use: dict[torch.fx.Node, torch.fx.Node] = {}
    for node in reversed(graph.nodes):
        for read in node.all_input_nodes:
            last_use.setdefault(read, node)
    freed: dict[torch.fx.Node, list[torch.fx.Node]] = {}
    for value, user in last_use.items():
        if user.op != "output":
            freed.setdefault(user, []).append(value)
    return freed


def _numpy_copy(value: Any) -> Any:
    """A reference value as NumPy arrays that own their memory (tuples and lists kept)."""
    if isinstance(value, torch.Tensor):
        return np.array(to_numpy(value), copy=True)
    if isinstance(value, (tuple, list)):
        return type(value)(_numpy_copy(v) for v in value)
    return value


# -- ONNX ---------------------------------------------------------------------------------------


def _verify_onnx(path: str, inputs: NamedInputs | None, options: _Options) -> VerificationReport:
    import onnxruntime  # optional

    proto, translation = onnx_frontend.translate(path)
    model = JaxModel(translation)
    initializers = {t.name for t in proto.graph.initializer}
    declared = [v for v in proto.graph.input if v.name not in initializers]
    names = [v.name for v in declared]
    if inputs is not None:
        flat = _bind(inputs, names)
        _check_inputs(path, model.program.user_inputs, flat, {})
    else:
        flat = _onnx_random_inputs(path, declared, options)
    reference = f"onnxruntime {onnxruntime.__version__}"
    if options.localize:
        walk = _OnnxReference(path, proto, dict(zip(names, flat)))
        return _localize(model, flat, walk, path, reference, options, model.output_names)
    expected = _onnxruntime_session(path, proto).run(None, dict(zip(names, flat)), _quiet_run_options())
    actual = model(*flat)
    actual = [actual] if len(expected) == 1 else list(actual)
    checks = _compare_outputs(actual, expected, model.output_names, options)
    return VerificationReport(path, reference, checks, options.rtol, options.atol)


def _onnxruntime_session(path: str, proto, optimize: bool = True):
    """An onnxruntime CPU session of `proto`; its refusal as one `ModelFileError` line."""
    import onnxruntime  # optional

    try:
        # onnxruntime logs its warnings and refusals on stderr; a refusal is reported below instead.
        options = onnxruntime.SessionOptions()
        options.log_severity_level = 4
        if not optimize:
            # Node by node, each value is the op's own: no fusions across nodes.
            options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
        return _RunChecked(path, onnxruntime.InferenceSession(proto.SerializeToString(), options,
                                                              providers=["CPUExecutionProvider"]))
    except Exception as e:  # noqa: BLE001 - the reference's failure is reported, not raised
        raise ModelFileError(f"onnxruntime cannot run {path}: {_onnxruntime_reason(e)}") from None


def _quiet_run_options():
    import onnxruntime  # optional

    run_options = onnxruntime.RunOptions()
    run_options.log_severity_level = 4
    return run_options


@dataclasses.dataclass
class _RunChecked:
    """An onnxruntime session whose failures to run are one `ModelFileError` line."""

    path: str
    session: Any

    def run(self, names, feeds, run_options=None) -> list:
        try:
            return self.session.run(names, feeds, run_options or _quiet_run_options())
        except Exception as e:  # noqa: BLE001 - the reference's failure is reported, not raised
            raise ModelFileError(f"onnxruntime cannot run {self.path}: {_onnxruntime_reason(e)}") from None


def _onnxruntime_reason(error: Exception) -> str:
    """onnxruntime's message without the C++ source location and signature it starts with."""
    text = one_line(error)
    if "onnxruntime_src/" in text and ") " in text:
        text = text[:text.index(" : ", text.index("FAIL") if "FAIL" in text else 0) + 3] \
            + text.rsplit(") ", 1)[1] if "FAIL" in text else text.rsplit(") ", 1)[1]
    return text[:300]


#: The most bytes of intermediate values onnxruntime hands back from one run when localizing;
#: more are fetched in further runs, in node order.
ONNX_CHUNK_BYTES = 2**30


class _OnnxReference:
    """onnxruntime with every node's output exposed as a graph output, fetched a chunk of nodes at
    a time (at most `ONNX_CHUNK_BYTES` by the shapes ONNX infers), each value handed over once."""

    def __init__(self, path: str, proto, feeds: dict[str, np.ndarray]):
        import onnx  # optional

        self.feeds = feeds
        self.graph_outputs = [v.name for v in proto.graph.output]
        produced = [name for node in proto.graph.node for name in node.output if name]
        exposed = onnx.ModelProto()
        exposed.CopyFrom(proto)
        listed = set(self.graph_outputs)
        exposed.graph.output.extend(onnx.ValueInfoProto(name=n) for n in produced if n not in listed)
        self.session = _onnxruntime_session(path, exposed, optimize=False)
        self.chunks = _chunks(produced, _value_bytes(proto, feeds), ONNX_CHUNK_BYTES)
        self.chunk_of = {name: i for i, chunk in enumerate(self.chunks) for name in chunk}
        self.ready: dict[str, Any] = {}
        self.final: dict[str, Any] = {}

    def has(self, node: Node) -> bool:
        return any(name in self.chunk_of for name in node.outputs if name)

    def values(self, node: Node) -> dict[str, Any]:
        found = {}
        for name in node.outputs:
            if name in self.chunk_of:
                if name not in self.ready:
                    chunk = self.chunks[self.chunk_of[name]]
                    self.ready.update(zip(chunk, self.session.run(chunk, self.feeds)))
                found[name] = self.ready.pop(name)
                if name in self.graph_outputs:
                    self.final[name] = found[name]
        return found

    def outputs(self) -> list:
        missing = [n for n in self.graph_outputs if n not in self.final]
        if missing:
            self.final.update(zip(missing, self.session.run(missing, self.feeds)))
        return [self.final[n] for n in self.graph_outputs]


def _value_bytes(proto, feeds: Mapping[str, np.ndarray]) -> dict[str, int]:
    """Each value's size in bytes by the shapes ONNX infers (named dims from the inputs' sizes);
    a value of unknown size counts as the largest known one."""
    import onnx  # optional

    try:
        inferred = onnx.shape_inference.infer_shapes(proto).graph
    except Exception:  # noqa: BLE001 - sizes are an estimate: without inference, all unknown
        inferred = proto.graph
    named: dict[str, int] = {}
    for value in inferred.input:
        if value.name in feeds:
            for d, size in zip(value.type.tensor_type.shape.dim, np.shape(feeds[value.name])):
                if d.dim_param:
                    named[d.dim_param] = int(size)
    sizes: dict[str, int | None] = {}
    for value in (*inferred.value_info, *inferred.output):
        tensor = value.type.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") else named.get(d.dim_param) for d in tensor.shape.dim]
        known = tensor.HasField("shape") and tensor.elem_type and all(d is not None for d in dims)
        sizes[value.name] = math.prod(dims) * onnx_frontend.np_dtype(tensor.elem_type).itemsize if known else None
    largest = max([s for s in sizes.values() if s is not None] + [np.asarray(x).nbytes for x in feeds.values()],
                  default=0)
    return {name: largest if size is None else size for name, size in sizes.items()} | {"": largest}


def _chunks(names: list[str], sizes: Mapping[str, int], budget: int) -> list[list[str]]:
    """`names` cut in order into runs of at most `budget` bytes (a larger value alone)."""
    chunks: list[list[str]] = [[]]
    total = 0
    for name in names:
        size = sizes.get(name, sizes[""])
        if chunks[-1] and total + size > budget:
            chunks.append([])
            total = 0
        chunks[-1].append(name)
        total += size
    return [c for c in chunks if c]


# -- localization -------------------------------------------------------------------------------


class _Reference(Protocol):
    """What `_localize` asks of a reference (`_ExportedReference`, `_OnnxReference`)."""

    def has(self, node: Node) -> bool:
        """Whether it has a value for any of the node's results."""

    def values(self, node: Node) -> dict[str, Any]:
        """{value name: the reference's value} of the node's results; asked in program order."""

    def outputs(self) -> list:
        """The model's flat outputs."""


def _localize(model: JaxModel, inputs: list, reference: _Reference, label: str, reference_name: str,
              options: _Options, output_names: Sequence[str] | None = None) -> VerificationReport:
    """Walk the program in order with two environments: `fed`, where every value the reference
    has is the reference's (so each node runs on the reference's inputs), and `own`, jaxport's
    own values throughout (its end-to-end run). Values are dropped after their last reader."""
    with _torch_threads(max(1, (os.cpu_count() or 2) // 2)):
        return _walk(model, inputs, reference, label, reference_name, options, output_names)


@contextlib.contextmanager
def _torch_threads(count: int) -> Iterator[None]:
    """PyTorch's intra-op threads at most `count` for a while. Node by node, PyTorch's and XLA's
    ops alternate, and PyTorch's OpenMP workers spin between its ops, on the cores XLA's ops then
    need: with all cores each, a 1,000-node model of small ops took twice as long on 2 cores."""
    saved = torch.get_num_threads()
    torch.set_num_threads(min(saved, count))
    try:
        yield
    finally:
        torch.set_num_threads(saved)


def _walk(model: JaxModel, inputs: list, reference: _Reference, label: str, reference_name: str,
          options: _Options, output_names: Sequence[str] | None) -> VerificationReport:
    """`_localize`'s walk, under the lowerings the program was made with."""
    with registry.applying(model.program.lowerings):
        return _walk_nodes(model, inputs, reference, label, reference_name, options, output_names)


def _walk_nodes(model: JaxModel, inputs: list, reference: _Reference, label: str, reference_name: str,
                options: _Options, output_names: Sequence[str] | None) -> VerificationReport:
    start = time.perf_counter()
    report = VerificationReport(label, reference_name, [], options.rtol, options.atol, localized=True,
                                nodes=len(model.program.nodes))
    walk = _Walk(model, inputs, reference, options, report)
    for index, node in enumerate(model.program.nodes):
        walk.step(index, node)
    expected = reference.outputs()
    if walk.own is not None:
        report.outputs = _compare_outputs(walk.own_outputs(), expected, output_names, options)
    report.seconds = time.perf_counter() - start
    return report


class _Walk:
    """The two environments of `_localize` and what the walk found, node by node."""

    def __init__(self, model: JaxModel, inputs: list, reference: _Reference, options: _Options,
                 report: VerificationReport):
        program = self.program = model.program
        self.reference, self.options, self.report = reference, options, report
        self.random = {id(n) for n in program.random_nodes()}
        self.initial = {value: model.params[name] for value, name in program.state_inputs}
        self.initial.update(program.constants)
        self.initial.update((spec.value, as_jax(x, f"input '{spec.name}'"))
                            for spec, x in zip(program.user_inputs, inputs))
        self.fed: dict[str, Any] = dict(self.initial)
        self.own: dict[str, Any] | None = dict(self.initial)
        #: values on the fed side that jaxport computed without a reference value
        self.unreferenced: set[str] = set()
        self.remaining = _readers(program)
        self.kept = {o.name for o in program.outputs if isinstance(o, Ref)}
        self.intermediates = 0

    def step(self, index: int, node: Node) -> None:
        run = _node_runner(self.program, node)
        if self.own is not None:
            try:
                self.own.update(run(self.own))
            except JaxportError as e:
                self.report.propagation_error, self.own = one_line(e, 500), None
        if not self.reference.has(node):
            self.report.without_reference += 1
            computed = run(self.fed)
            self.fed.update(computed)
            self.unreferenced.update(computed)
        else:
            self._compare(index, node, run)
        self._drop(node)

    def _compare(self, index: int, node: Node, run: Callable[[Mapping[str, Any]], dict[str, Any]]) -> None:
        """The node on the reference's inputs against the reference; then the reference's values
        (those it has) stand for the node's results."""
        expected = self.reference.values(node)
        computed: dict[str, Any] = {}
        if id(node) in self.random:  # another generator's draws: not comparable
            self.report.random += 1
        else:
            self.report.compared += 1
            try:
                computed = run(self.fed)
                problem = _diverges(index, node, computed, expected, self.fed, self.options)
            except JaxportError as e:
                problem = _failed(index, node, e, expected, self.fed)
            if problem is not None:
                unreferenced = tuple(n for n in _reads(node) if n in self.unreferenced)
                self.report.diverging += 1
                if len(self.report.divergences) < DESCRIBED_DIVERGENCES:
                    self.report.divergences.append(dataclasses.replace(problem, unreferenced_inputs=unreferenced))
        self.fed.update({name: _fed_value(value, computed.get(name)) for name, value in expected.items()})
        self.unreferenced.difference_update(expected)
        extra = {name: value for name, value in computed.items() if name not in expected}
        self.fed.update(extra)
        self.unreferenced.update(extra)

    def _drop(self, node: Node) -> None:
        """Forget the values no later node reads (the own side keeps the program's outputs)."""
        self.intermediates += len(_writes(node))
        self.report.peak_intermediates = max(self.report.peak_intermediates, self.intermediates)
        for name in _reads(node):
            self.remaining[name] -= 1
        for name in [*_reads(node), *_writes(node)]:
            if self.remaining.get(name):
                continue
            if name in self.fed:
                del self.fed[name]
                self.intermediates -= name not in self.initial
            self.unreferenced.discard(name)
            if self.own is not None and name not in self.kept:
                self.own.pop(name, None)

    def own_outputs(self) -> list:
        """jaxport's own values of the program's outputs (constants as they are, Nones left out)."""
        outputs = [self.own[o.name] if isinstance(o, Ref) else o for o in self.program.outputs]
        return [o for o in outputs if o is not None]


def _reads(node: Node) -> list[str]:
    """The environment's values a node reads: its arguments' references and its subgraphs' captures."""
    names: list[str] = []

    def visit(value: Any) -> None:
        if isinstance(value, Ref):
            names.append(value.name)
        elif isinstance(value, Subgraph):
            names.extend(value.captures)
        elif isinstance(value, (list, tuple)):
            for v in value:
                visit(v)
        elif isinstance(value, dict):
            for v in value.values():
                visit(v)

    visit(node.args)
    visit(node.kwargs)
    return list(dict.fromkeys(names))


def _writes(node: Node) -> list[str]:
    """The names a node's results are bound to."""
    return [name for name in node.outputs if name] or ([] if node.outputs else [node.name])


def _readers(program: Program) -> dict[str, int]:
    """How many nodes read each value."""
    counts: dict[str, int] = {}
    for node in program.nodes:
        for name in _reads(node):
            counts[name] = counts.get(name, 0) + 1
    return counts


def _node_runner(program: Program, node: Node) -> Callable[[Mapping[str, Any]], dict[str, Any]]:
    """The node as a one-node program run by `interpret` (so its dtype casts, compile-time
    evaluation and error context are the interpreter's), on the values of an environment."""
    reads, writes = _reads(node), _writes(node)
    single = Program([], {}, [Input(name, name, None) for name in reads], [node], [Ref(n) for n in writes],
                     matmul_precision=program.matmul_precision, lowerings=program.lowerings)

    def run(env: Mapping[str, Any]) -> dict[str, Any]:
        outputs, _ = interpret(single, {}, [env[name] for name in reads])
        return dict(zip(writes, outputs))

    return run


def _fed_value(reference: Any, computed: Any) -> Any:
    """The reference's value as jaxport's nodes take it: a JAX array (or NumPy array, where
    jaxport's own result is one: ONNX shape arithmetic stays concrete) in jaxport's dtype."""
    if isinstance(reference, (tuple, list)):
        others = computed if isinstance(computed, (tuple, list)) and len(computed) == len(reference) \
            else [None] * len(reference)
        return type(reference)(_fed_value(r, c) for r, c in zip(reference, others))
    if not isinstance(reference, (np.ndarray, np.generic)):
        return reference
    same_shape = computed is not None and np.shape(computed) == np.shape(reference)
    dtype = computed.dtype if same_shape and hasattr(computed, "dtype") else \
        jax.dtypes.canonicalize_dtype(reference.dtype)
    if isinstance(computed, (np.ndarray, np.generic)):
        return np.asarray(reference).astype(dtype)
    return jax.device_put(np.asarray(reference, dtype=dtype))


def _leaves(value: Any, name: str) -> Iterator[tuple[str, Any]]:
    """(name, leaf) of a value that may be a tuple or list of values: `name[i]` for element i."""
    if isinstance(value, (tuple, list)):
        for i, v in enumerate(value):
            yield from _leaves(v, f"{name}[{i}]")
    else:
        yield name, value


def _diverges(index: int, node: Node, computed: dict, expected: dict, fed: Mapping[str, Any],
              options: _Options) -> Divergence | None:
    """The first of the node's values that differs from the reference's, or None."""
    for name, reference in expected.items():
        actual = dict(_leaves(computed.get(name), name))
        wanted = dict(_leaves(reference, name))
        if actual.keys() != wanted.keys():
            return _divergence(index, node, name, f"{len(actual)} value(s), reference {len(wanted)}",
                               math.nan, math.nan, (0.0, 0.0), fed, computed.get(name), reference)
        for leaf, want in wanted.items():
            got = actual[leaf]
            if want is None and got is None:
                continue
            rtol, atol = tolerance(np.asarray(as_numpy(want)).dtype, options.rtol, options.atol)
            check = compare(leaf, got, want, rtol=rtol, atol=atol, per_tensor=True)
            if not check.passed:
                return _divergence(index, node, leaf, check.problem or "values differ beyond tolerance",
                                   check.max_abs, check.max_rel, (rtol, atol), fed, got, want)
    return None


def _failed(index: int, node: Node, error: JaxportError, expected: dict, fed: Mapping[str, Any]) -> Divergence:
    """A divergence for a lowering that fails on the reference's inputs."""
    name, reference = next(iter(expected.items()))
    return _divergence(index, node, name, f"the lowering fails on the reference's inputs: {one_line(error, 500)}",
                       math.nan, math.nan, (0.0, 0.0), fed, None, reference)


def _divergence(index: int, node: Node, value: str, problem: str, max_abs: float, max_rel: float,
                tolerances: tuple[float, float], fed: Mapping[str, Any], actual: Any, reference: Any) -> Divergence:
    def stats(x: Any) -> TensorStats | None:
        return None if x is None or isinstance(x, (tuple, list)) else tensor_stats(x)

    inputs = tuple((name, tensor_stats(fed[name])) for name in _reads(node)
                   if name in fed and not isinstance(fed[name], (tuple, list)) and fed[name] is not None)
    return Divergence(index, node.name, node.op, node.module_path, node.source, value, problem, max_abs, max_rel,
                      *tolerances, inputs, stats(actual), stats(reference), registry.provenance(node.op) or "")


__all__ = [
    "DESCRIBED_DIVERGENCES", "Divergence", "ONNX_CHUNK_BYTES", "TOLERANCES", "TensorStats", "VerificationReport",
    "format_report", "model_file_kind", "tensor_stats", "tolerance", "verify", "verify_file",
]
