"""What `jaxport inspect` and `jaxport verify` do, for `.onnx` files and `torch.export.save`d `.pt2`.

`summarize(path)` describes a model file without running it: inputs and outputs, parameter
count and size, an op histogram and the ops jaxport lacks. `verify(path)` runs the model
through jaxport and through its reference (onnxruntime for ONNX, PyTorch for `.pt2`) on the
same inputs and reports each output's error.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections import Counter
from typing import Any

import numpy as np

from . import _narrowing
from .errors import InputError, ModelFileError, one_line
from .ops import registry


def file_kind(path: str) -> str:
    """"onnx" or "pt2", from the file's extension (refusing anything else)."""
    if not os.path.isfile(path):
        raise ModelFileError(f"{path}: no such file")
    ext = os.path.splitext(path)[1].lower()
    if ext == ".onnx":
        return "onnx"
    if ext in (".pt2", ".pt", ".ep"):
        return "pt2"
    raise ModelFileError(f"{path}: expected an .onnx file or a torch.export.save'd .pt2 file")


def load_exported_program(path: str):
    """The `ExportedProgram` a `torch.export.save`d archive holds, read without running code from
    the file (`_pt2_archive`: no unrestricted unpickling, no guards or sizes evaluated), after
    registering the pytree types its inputs and outputs name (`_pytree_types`). An unreadable
    archive is one `ModelFileError` line naming the member."""
    from . import _pt2_archive
    from ._pytree_types import register_archive_types

    register_archive_types(path)
    return _pt2_archive.load(path)


def load_model(path: str):
    """A `JaxModel` from an .onnx file (`from_onnx`) or a `.pt2` archive (`from_exported_program`)."""
    if file_kind(path) == "onnx":
        from .frontends.onnx import from_onnx

        return from_onnx(path)
    from .convert import from_exported_program

    return from_exported_program(load_exported_program(path))


# -- inspect ------------------------------------------------------------------------------------


def _value(name: str, shape, dtype) -> dict:
    dims = None if shape is None else ["?" if d is None else d for d in shape]
    return {"name": name, "shape": dims, "dtype": dtype}


def _onnx_type(type_proto) -> tuple[Any, str]:
    kind = type_proto.WhichOneof("value")
    if kind != "tensor_type":
        return None, kind or "unknown"
    import onnx

    tensor = type_proto.tensor_type
    dtype = onnx.TensorProto.DataType.Name(tensor.elem_type).lower()
    if not tensor.HasField("shape"):
        return None, dtype
    dims = [d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in tensor.shape.dim]
    return dims, dtype


def _summarize_onnx(path: str) -> dict:
    from .frontends import onnx as onnx_frontend

    proto = onnx_frontend.load(path)
    graph = proto.graph
    opsets = {("ai.onnx" if e.domain in ("", "ai.onnx") else e.domain): e.version for e in proto.opset_import}
    initializers = {t.name for t in graph.initializer}
    histogram: Counter[str] = Counter()
    missing: dict[str, list[str]] = {}

    def visit(g):
        for index, node in enumerate(g.node):
            domain = "ai.onnx" if node.domain in ("", "ai.onnx") else node.domain
            key = node.op_type if domain == "ai.onnx" else f"{domain}::{node.op_type}"
            histogram[key] += 1
            opset = opsets.get(domain, 1 if domain == "ai.onnx" else None)
            found = opset is not None and registry.onnx_implementation(
                node.op_type, "" if domain == "ai.onnx" else domain, opset) is not None
            if not found:
                missing.setdefault(key, []).append(node.name or f"{node.op_type}_{index}")
            for attr in node.attribute:
                if attr.HasField("g"):
                    visit(attr.g)
                for sub in attr.graphs:
                    visit(sub)

    visit(graph)
    sizes = [(int(np.prod(t.dims)) if t.dims else 1, t.data_type) for t in graph.initializer]
    import onnx

    n_bytes = sum(n * np.dtype(onnx.helper.tensor_dtype_to_np_dtype(dt)).itemsize
                  for n, dt in sizes if dt != onnx.TensorProto.STRING)
    return {
        "file": path,
        "format": "onnx",
        "producer": f"{proto.producer_name} {proto.producer_version}".strip(),
        "ir_version": proto.ir_version,
        "opsets": opsets,
        "inputs": [_value(v.name, *_onnx_type(v.type)) for v in graph.input if v.name not in initializers],
        "outputs": [_value(v.name, *_onnx_type(v.type)) for v in graph.output],
        "parameters": {"tensors": len(sizes), "values": sum(n for n, _ in sizes), "bytes": int(n_bytes)},
        "ops": dict(histogram.most_common()),
        "unsupported": {op: names for op, names in sorted(missing.items())},
    }


def _summarize_pt2(path: str) -> dict:
    import torch

    from .frontends import torch_export

    ep = load_exported_program(path)
    user_inputs = [s for s in ep.graph_signature.input_specs
                   if s.kind == torch.export.graph_signature.InputKind.USER_INPUT]
    nodes = {n.name: n for n in ep.graph.nodes}

    def describe(name: str) -> dict:
        val = nodes[name].meta.get("val") if name in nodes else None
        if isinstance(val, torch.Tensor):
            shape = [int(d) if isinstance(d, int) else None for d in val.shape]
            return _value(name, shape, str(val.dtype).removeprefix("torch."))
        return _value(name, None, type(val).__name__)

    outputs = [s.arg.name for s in ep.graph_signature.output_specs
               if s.kind == torch.export.graph_signature.OutputKind.USER_OUTPUT and hasattr(s.arg, "name")]
    state = dict(ep.state_dict)
    state.update({k: v for k, v in ep.constants.items() if isinstance(v, torch.Tensor)})
    histogram = Counter(torch_export.op_name(n.target) for n in ep.graph.nodes if n.op == "call_function")
    lowered = torch_export.lowerable(ep)
    program, _ = torch_export.to_program(lowered)
    missing: dict[str, list[str]] = {}
    for use in program.unsupported():
        missing.setdefault(use.op, []).append(use.node + (f" at {use.source}" if use.source else ""))
    return {
        "file": path,
        "format": "pt2",
        "inputs": [describe(s.arg.name) for s in user_inputs],
        "outputs": [describe(name) for name in outputs],
        "parameters": {"tensors": len(state), "values": sum(t.numel() for t in state.values()),
                       "bytes": sum(t.numel() * t.element_size() for t in state.values())},
        "ops": dict(histogram.most_common()),
        "unsupported": missing,
    }


def summarize(path: str) -> dict:
    """A JSON-able description of a model file (see the module docstring)."""
    return _summarize_onnx(path) if file_kind(path) == "onnx" else _summarize_pt2(path)


def format_summary(info: dict) -> str:
    """The summary as text for people."""

    def values(items):
        return [f"  {v['name']}: {v['dtype']}"
                + ("" if v["shape"] is None else "[" + ", ".join(str(d) for d in v["shape"]) + "]")
                for v in items]

    p = info["parameters"]
    lines = [f"{info['file']} ({info['format']})"]
    if info.get("producer"):
        lines.append(f"producer: {info['producer']}, IR version {info['ir_version']}")
    if info.get("opsets"):
        lines.append("opsets: " + ", ".join(f"{d} {v}" for d, v in info["opsets"].items()))
    lines += ["inputs:", *values(info["inputs"]), "outputs:", *values(info["outputs"])]
    lines.append(f"parameters: {p['values']:,} values in {p['tensors']} tensors ({p['bytes'] / 2**20:.2f} MiB)")
    lines.append(f"ops ({sum(info['ops'].values())} nodes, {len(info['ops'])} kinds):")
    width = max((len(op) for op in info["ops"]), default=0)
    lines += [f"  {op:<{width}}  {count}" for op, count in info["ops"].items()]
    if info["unsupported"]:
        lines.append(f"unsupported by jaxport ({len(info['unsupported'])} op(s)):")
        for op, places in info["unsupported"].items():
            shown = ", ".join(places[:3]) + (f", ... ({len(places)} uses)" if len(places) > 3 else "")
            lines.append(f"  {op}: {shown}")
    else:
        lines.append("jaxport supports every op in this model")
    return "\n".join(lines)


# -- verify -------------------------------------------------------------------------------------


@dataclasses.dataclass
class OutputCheck:
    name: str
    shape: tuple
    dtype: str
    max_abs: float
    max_rel: float
    passed: bool
    problem: str = ""


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


def _as_float(x: np.ndarray) -> np.ndarray:
    import jax.numpy as jnp

    if jnp.issubdtype(x.dtype, jnp.complexfloating):
        return x.astype(np.complex128)
    if x.dtype == np.bool_ or jnp.issubdtype(x.dtype, jnp.number):
        return x.astype(np.float64)
    return x


def _compare(name: str, actual, expected, rtol: float, atol: float) -> OutputCheck:
    """One output against the reference: same shape, same dtype (as JAX stores the reference's),
    NaN in the same places, infinities in the same places with the same sign, the rest close."""
    import jax

    # A Python number (a size the model returns) has no dtype of its own to compare.
    numbers = not isinstance(actual, (np.ndarray, np.generic, jax.Array)) or not isinstance(
        expected, (np.ndarray, np.generic, jax.Array))
    actual = np.asarray(actual)
    expected = np.asarray(expected)
    if actual.shape != expected.shape:
        return OutputCheck(name, actual.shape, str(actual.dtype), float("nan"), float("nan"), False,
                           f"shape {actual.shape}, reference {expected.shape}")
    a, e = _as_float(actual), _as_float(expected)
    if a.dtype.kind not in "fc" or e.dtype.kind not in "fc":  # strings and other non-numbers
        same = bool(np.array_equal(actual, expected))
        return OutputCheck(name, actual.shape, str(actual.dtype), 0.0 if same else float("nan"),
                           0.0 if same else float("nan"), same, "" if same else "values differ")
    nan_a, nan_e = np.isnan(a), np.isnan(e)
    inf_a, inf_e = np.isinf(a), np.isinf(e)
    finite = ~(nan_a | nan_e | inf_a | inf_e)
    diff = np.abs(a[finite] - e[finite])
    scale = np.abs(e[finite])
    max_abs = float(diff.max()) if diff.size else 0.0
    max_rel = float((diff / np.where(scale > 0, scale, 1)).max()) if diff.size else 0.0
    problems = []
    if (n := int(np.count_nonzero(nan_a != nan_e))):
        problems.append(f"NaN at {n} place(s) where the other has a number")
    if (n := int(np.count_nonzero((inf_a != inf_e) | (inf_a & inf_e & (a != e))))):
        problems.append(f"infinity differs at {n} place(s)")
    want = np.dtype(jax.dtypes.canonicalize_dtype(expected.dtype)) if expected.dtype != object else expected.dtype
    if actual.dtype != want and not numbers:
        problems.append(f"dtype {actual.dtype}, reference {expected.dtype}")
    close = bool(np.all(diff <= atol + rtol * scale))
    return OutputCheck(name, actual.shape, str(actual.dtype), max_abs, max_rel, close and not problems,
                       "; ".join(problems))


def read_npz(path: str) -> dict[str, np.ndarray]:
    """The arrays of an `.npz` file (as `numpy.savez` writes), read without unpickling: each array's
    header is checked (no Python objects, a size that matches the bytes stored) before its data is
    read. Anything else is one `InputError` naming the file and the array."""
    import zipfile
    import zlib

    if not os.path.isfile(path):
        raise InputError(f"{path}: no such file")
    try:
        archive = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError, ValueError, EOFError) as e:
        reason = "it is empty" if os.path.getsize(path) == 0 else f"{type(e).__name__}: {e}"
        raise InputError(f"{path} is not an .npz file of arrays (as numpy.savez writes): {reason}") from None
    arrays: dict[str, np.ndarray] = {}
    with archive:
        for info in archive.infolist():
            key = info.filename.removesuffix(".npy")
            try:
                with archive.open(info) as f:
                    version = np.lib.format.read_magic(f)
                    if version == (1, 0):
                        shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
                    elif version == (2, 0):
                        shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
                    else:
                        raise ValueError(f"unsupported .npy format version {version}")
                    if dtype.hasobject:
                        raise InputError(f"{path}: array '{key}' holds Python objects (a pickle), which verify "
                                         "does not load; save plain numeric arrays")
                    if any(n < 0 for n in shape):
                        raise InputError(f"{path}: array '{key}' is corrupt: its header gives the negative "
                                         f"shape {list(shape)}")
                    nbytes = math.prod(shape) * dtype.itemsize
                    stored = info.file_size - f.tell()
                    if stored != nbytes:
                        raise InputError(f"{path}: array '{key}' is truncated or corrupt: its header says "
                                         f"{dtype}{list(shape)} ({nbytes:,} bytes) but it stores {stored:,} bytes")
                    data = f.read(nbytes)
            except InputError:
                raise
            except (ValueError, OSError, EOFError, zipfile.BadZipFile, zlib.error, SyntaxError) as e:
                raise InputError(f"{path}: array '{key}' cannot be read "
                                 f"({type(e).__name__}: {one_line(e, 200)})") from None
            arrays[key] = np.frombuffer(data, dtype=dtype).reshape(shape, order="F" if fortran else "C").copy()
    return arrays


def _did_you_mean(name: str, candidates: list[str]) -> str | None:
    """The candidate `name` most likely misspells: one differing only in case, else the closest."""
    import difflib

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
    from .program import TensorSpec

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
        _narrowing.check_array(x, f"{path}: input '{spec.name}'", InputError)
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
    import onnxruntime

    from .frontends import onnx as onnx_frontend

    proto, model = onnx_frontend.load_and_convert(path)
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
    checks = [_compare(name, a, e, rtol, atol) for name, a, e in zip(model.output_names, actual, expected)]
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
    import sympy
    import torch

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
    import jax
    import torch

    from ._torch_utils import to_numpy, to_torch
    from .convert import from_exported_program

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
    checks = [_compare(f"output {i}", a, e, rtol, atol) for i, (a, e) in enumerate(zip(flat_actual, flat_expected))]
    if len(flat_actual) != len(flat_expected):
        checks.append(OutputCheck("outputs", (), "", float("nan"), float("nan"), False,
                                  f"{len(flat_actual)} outputs, reference {len(flat_expected)}"))
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
