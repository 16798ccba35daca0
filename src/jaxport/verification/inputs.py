"""What `verify` runs on: its options, checked; the model file's kind; the inputs, bound by name
to the model's or made at random in its declared shapes, and checked against them before either
engine runs.

Error messages name the command line's options (`--dim`, `--seed`, `--inputs`): `jaxport verify`
is a thin layer over this package.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import sympy
import torch
from torch.export import ExportedProgram

from .. import dtypes
from ..compare import as_numpy
from ..errors import InputError, ModelFileError
from ..frontends import onnx as onnx_frontend
from ..ir import Input, TensorSpec

# -- options ------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Options:
    """What `verify` is asked besides the model and its inputs, as `Options.checked` accepts it."""

    localize: bool
    rtol: float | None
    atol: float | None
    seed: int
    dims: dict[str, int]

    @staticmethod
    def checked(localize, rtol, atol, seed, dims) -> Options:
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
        return Options(bool(localize), rtol, atol, seed, dims)


#: Why `dims` and given inputs exclude each other.
DIMS_WITH_INPUTS = "--dim sets the sizes of random inputs; with --inputs the arrays give every size"


# -- model files --------------------------------------------------------------------------------


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


# -- inputs by name -----------------------------------------------------------------------------

#: Inputs by name, with where they came from (an .npz path, "the inputs"), or None for random ones.
NamedInputs = tuple[str, dict[str, Any]]


def named_inputs(args: tuple, kwargs: Mapping[str, Any] | None) -> NamedInputs | None:
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


def bind_inputs(inputs: NamedInputs, names: list[str]) -> list[np.ndarray]:
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


def _did_you_mean(name: str, candidates: list[str]) -> str | None:
    """The candidate `name` most likely misspells: one differing only in case, else the closest."""
    same = [c for c in candidates if c.lower() == name.lower()]
    close = same or difflib.get_close_matches(name, candidates, n=1)
    return close[0] if close else None


# -- checks -------------------------------------------------------------------------------------


def check_inputs(path: str, specs: Sequence[Input], inputs: list[np.ndarray], ranges: dict) -> None:
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


# -- random inputs ------------------------------------------------------------------------------

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


def _unknown_dims(path: str, dims: Mapping[str, int], known: dict[str, str]) -> None:
    """Refuse --dim names the model has no symbolic dim of (known: {name: where it is used})."""
    for name in dims:
        if name not in known:
            close = _did_you_mean(name, list(known))
            listed = ", ".join(f"{k} ({v})" for k, v in known.items()) if known else "none: every size is fixed"
            raise InputError(f"--dim names '{name}', which is no symbolic dim of {path}"
                             + (f" (did you mean '{close}'?)" if close else "") + f"; its symbolic dims: {listed}")


def onnx_random_inputs(path: str, declared, options: Options) -> list[np.ndarray]:
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


def pt2_random_inputs(path: str, ep: ExportedProgram, specs: Sequence[Input], options: Options) -> list[np.ndarray]:
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
