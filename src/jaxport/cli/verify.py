"""`jaxport verify`: a model file run through jaxport and through its reference on the same inputs.

The reference is onnxruntime for ONNX and PyTorch (the exported program's own module) for `.pt2`.
Inputs come from an `.npz` (bound strictly by name) or are made at random in the declared shapes,
their sizes checked before anything is allocated; each output is judged by `jaxport.compare`.
`onnxruntime` is imported inside the function that runs it: it is an optional dependency.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import math
import re

import jax
import numpy as np
import sympy
import torch

from .. import dtypes
from ..backends.model import JaxModel
from ..compare import OutputCheck, compare_all
from ..convert import from_exported_program
from ..dlpack import to_numpy, to_torch
from ..errors import InputError, ModelFileError, one_line
from ..frontends import onnx as onnx_frontend
from ..frontends.pt2 import load_exported_program
from ..ir import TensorSpec
from .files import file_kind
from .npz import read_npz


@dataclasses.dataclass
class Verification:
    file: str
    reference: str
    outputs: list[OutputCheck]
    rtol: float
    atol: float

    @property
    def passed(self) -> bool:
        return all(o.passed for o in self.outputs)


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


def _bind_npz(path: str, arrays: dict[str, np.ndarray], names: list[str]) -> list[np.ndarray]:
    """The arrays in input order: by input name, or positionally as arr_0, arr_1, ... (as
    `numpy.savez(path, *arrays)` names them). Unknown, missing and extra names are errors."""
    keys = list(arrays)
    positional = [f"arr_{i}" for i in range(len(names))]
    if set(keys) == set(names):
        return [arrays[n] for n in names]
    if set(keys) == set(positional) and not set(keys) & set(names):
        return [arrays[k] for k in positional]
    hint = f"the model's inputs are {', '.join(names) or '(none)'} (or name the arrays arr_0, arr_1, ... in that order)"
    if not keys:
        raise InputError(f"{path} holds no arrays; {hint}")
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
    raise InputError(f"{path} {' and '.join(parts)}; {hint}")


def _check_inputs(path: str, specs, inputs: list[np.ndarray], ranges: dict) -> None:
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


def _describe_shape(spec, dims: dict[int, str]) -> str:
    if spec.shape is None:
        return "[...]"
    return "[" + ", ".join(str(n) if n is not None else dims.get(d, "?") for d, n in enumerate(spec.shape)) + "]"


def _unknown_dims(path: str, dims: dict[str, int], known: dict[str, str]) -> None:
    """Refuse --dim names the model has no symbolic dim of (known: {name: where it is used})."""
    for name in dims:
        if name not in known:
            close = _did_you_mean(name, list(known))
            listed = ", ".join(f"{k} ({v})" for k, v in known.items()) if known else "none: every size is fixed"
            raise InputError(f"--dim names '{name}', which is no symbolic dim of {path}"
                             + (f" (did you mean '{close}'?)" if close else "") + f"; its symbolic dims: {listed}")


def _onnx_dim_size(dim, sizes: dict[str, int]) -> int:
    if dim.HasField("dim_value"):
        return dim.dim_value
    return sizes.get(dim.dim_param, 1)


def verify(path: str, *, inputs_npz: str | None = None, rtol: float = 1e-4, atol: float = 1e-5,
           seed: int = 0, dims: dict[str, int] | None = None) -> Verification:
    """Run the model through jaxport and its reference on the same inputs: those of `inputs_npz`
    (by input name, or arr_0, arr_1, ...), else random ones, with `dims` giving the sizes of
    named symbolic dims (ONNX dim names, torch.export's size symbols such as s0)."""
    if type(seed) is not int or seed < 0:
        raise InputError(f"--seed {seed}: a seed is a non-negative integer")
    for name, value in (("rtol", rtol), ("atol", atol)):
        if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
            raise InputError(f"--{name} {value}: a tolerance is a finite non-negative number")
    rng = np.random.default_rng(seed)
    dims = dict(dims or {})
    for name, size in dims.items():
        if type(size) is not int or size < 0:
            raise InputError(f"--dim {name}={size}: a size is a non-negative integer")
    if inputs_npz and dims:
        raise InputError("--dim sets the sizes of random inputs; with --inputs the arrays give every size")
    kind = file_kind(path)
    arrays = read_npz(inputs_npz) if inputs_npz else None
    if kind == "onnx":
        return _verify_onnx(path, arrays, inputs_npz, rtol, atol, rng, dims)
    return _verify_pt2(path, arrays, inputs_npz, rtol, atol, rng, dims)


def _verify_onnx(path, arrays, inputs_npz, rtol, atol, rng, dims) -> Verification:
    import onnxruntime  # optional

    proto, translation = onnx_frontend.translate(path)
    model = JaxModel(translation)
    initializers = {t.name for t in proto.graph.initializer}
    declared = [v for v in proto.graph.input if v.name not in initializers]
    names = [v.name for v in declared]
    if arrays is not None:
        inputs = _bind_npz(inputs_npz, arrays, names)
        _check_inputs(path, model.program.user_inputs, inputs, {})
    else:
        known = {}
        for v in declared:
            for i, d in enumerate(v.type.tensor_type.shape.dim):
                if not d.HasField("dim_value") and d.dim_param:
                    known.setdefault(d.dim_param, f"{v.name} dim {i}")
        _unknown_dims(path, dims, known)
        inputs = []
        for v in declared:
            tensor = v.type.tensor_type
            shape = tuple(_onnx_dim_size(d, dims) for d in tensor.shape.dim)
            inputs.append(_random_input(v.name, shape, onnx_frontend.np_dtype(tensor.elem_type), rng))
    try:
        # onnxruntime logs its warnings and refusals on stderr; a refusal is reported below instead.
        options, run_options = onnxruntime.SessionOptions(), onnxruntime.RunOptions()
        options.log_severity_level = run_options.log_severity_level = 4
        session = onnxruntime.InferenceSession(proto.SerializeToString(), options, providers=["CPUExecutionProvider"])
        expected = session.run(None, dict(zip(names, inputs)), run_options)
    except Exception as e:  # noqa: BLE001 - the reference's failure is reported, not raised
        raise ModelFileError(f"onnxruntime cannot run {path}: {_onnxruntime_reason(e)}") from None
    actual = model(*inputs)
    actual = [actual] if len(expected) == 1 else list(actual)
    checks = compare_all(actual, expected, names=model.output_names, rtol=rtol, atol=atol)
    return Verification(path, f"onnxruntime {onnxruntime.__version__}", checks, rtol, atol)


def _onnxruntime_reason(error: Exception) -> str:
    """onnxruntime's message without the C++ source location and signature it starts with."""
    text = one_line(error)
    if "onnxruntime_src/" in text and ") " in text:
        text = text[:text.index(" : ", text.index("FAIL") if "FAIL" in text else 0) + 3] \
            + text.rsplit(") ", 1)[1] if "FAIL" in text else text.rsplit(") ", 1)[1]
    return text[:300]


def _pt2_random_inputs(path: str, ep, specs, rng, dims: dict[str, int]) -> list[np.ndarray]:
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
    _unknown_dims(path, dims, known)
    ranges = {str(k): v for k, v in ep.range_constraints.items()}
    values = {}
    for name in known:
        if name in dims:
            values[name] = dims[name]
            continue
        bounds = ranges.get(name)
        lower, upper = (bounds.lower, bounds.upper) if bounds is not None else (0, None)
        lo = int(lower) if isinstance(lower, (int, sympy.Integer)) else 0
        hi = int(upper) if isinstance(upper, (int, sympy.Integer)) else None
        values[name] = max(lo, 2) if hi is None else min(max(lo, 2), hi)
    inputs = []
    for spec, shape in zip(specs, exprs):
        sizes = tuple(int(d.xreplace({s: values.get(str(s), 2) for s in d.free_symbols}))
                      if isinstance(d, sympy.Expr) else (2 if d is None else int(d)) for d in shape)
        inputs.append(_random_input(spec.name, sizes, np.dtype(spec.spec.dtype), rng))
    return inputs


def _verify_pt2(path, arrays, inputs_npz, rtol, atol, rng, dims) -> Verification:
    ep = load_exported_program(path)
    model = from_exported_program(ep)
    specs = model.program.user_inputs
    names = [s.name for s in specs]
    if arrays is not None:
        inputs = _bind_npz(inputs_npz, arrays, names)
    else:
        inputs = _pt2_random_inputs(path, ep, specs, rng, dims)
    _check_inputs(path, specs, inputs, model.program.dim_ranges)
    in_spec = ep.call_spec.in_spec
    # The program's own (args, kwargs): a model exported with keyword inputs refuses positional ones.
    args, kwargs = (torch.utils._pytree.tree_unflatten(inputs, in_spec)
                    if in_spec is not None and in_spec.num_leaves == len(inputs) else (inputs, {}))
    torch_args, torch_kwargs = torch.utils._pytree.tree_map(to_torch, (args, kwargs))
    try:
        with torch.no_grad():
            expected = ep.module()(*torch_args, **torch_kwargs)
    except Exception as e:  # noqa: BLE001 - the reference's failure is reported, not raised
        raise ModelFileError(f"PyTorch cannot run {path}: {type(e).__name__}: {one_line(e, 300)}") from None
    flat_expected = [to_numpy(t) if isinstance(t, torch.Tensor) else t for t in torch.utils._pytree.tree_leaves(expected)
                     if isinstance(t, (torch.Tensor, int, float, bool))]
    actual = model(*args, **kwargs)
    flat_actual = jax.tree_util.tree_leaves(actual)
    checks = compare_all(flat_actual, flat_expected, rtol=rtol, atol=atol)
    return Verification(path, f"PyTorch {torch.__version__}", checks, rtol, atol)


def format_verification(result: Verification) -> str:
    lines = [f"{result.file}: jaxport against {result.reference} (rtol {result.rtol:g}, atol {result.atol:g})"]
    width = max((len(o.name) for o in result.outputs), default=6)
    lines.append(f"  {'output':<{width}}  {'shape':<18} {'dtype':<9} {'max abs err':>12} {'max rel err':>12}  verdict")
    for o in result.outputs:
        verdict = "ok" if o.passed else "MISMATCH" + (f" ({o.problem})" if o.problem else "")
        lines.append(f"  {o.name:<{width}}  {str(list(o.shape)):<18} {o.dtype:<9} {o.max_abs:>12.3g} "
                     f"{o.max_rel:>12.3g}  {verdict}")
    lines.append("PASS" if result.passed else "FAIL")
    return "\n".join(lines)


def _dims(values: list[str]) -> dict[str, int]:
    dims = {}
    for value in values:
        name, _, size = value.partition("=")
        if not name or not re.fullmatch(r"[0-9]+", size):
            raise InputError(f"--dim expects NAME=SIZE with SIZE a non-negative integer, got {value!r}")
        if name in dims:
            raise InputError(f"--dim gives {name} twice")
        dims[name] = int(size)
    return dims


def run(opts) -> int:
    """`jaxport verify`: 0 when every output matches, 1 when one does not."""
    result = verify(opts.file, inputs_npz=opts.inputs, rtol=opts.rtol, atol=opts.atol, seed=opts.seed,
                    dims=_dims(opts.dim))
    if opts.json:
        report = dataclasses.asdict(result)
        report["passed"] = result.passed
        print(json.dumps(report, indent=2, default=str))
    else:
        print(format_verification(result))
    return 0 if result.passed else 1
