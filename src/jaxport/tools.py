"""What `jaxport inspect` and `jaxport verify` do, for `.onnx` files and `torch.export.save`d `.pt2`.

`summarize(path)` describes a model file without running it: inputs and outputs, parameter
count and size, an op histogram and the ops jaxport lacks. `verify(path)` runs the model
through jaxport and through its reference (onnxruntime for ONNX, PyTorch for `.pt2`) on the
same inputs and reports each output's error.
"""

from __future__ import annotations

import dataclasses
import os
from collections import Counter
from typing import Any

import numpy as np

from .errors import InputError, ModelFileError
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
    """`torch.export.load(path)`, after registering the pytree types its inputs and outputs name
    (`_pytree_types`), with torch's logged tracebacks turned into one `ModelFileError` line."""
    import torch

    from ._pytree_types import quiet_torch_logs, register_archive_types

    register_archive_types(path)
    with quiet_torch_logs() as records:
        try:
            return torch.export.load(path)
        except Exception as e:  # noqa: BLE001 - a zip, pickle or version error all mean "unreadable"
            # torch.export.load logs the real reason and raises "check the warnings above".
            logged = [r.exc_info[1] for r in records if r.exc_info and r.exc_info[1] is not None]
            cause = logged[-1] if logged else e
            reason = " ".join(f"{type(cause).__name__}: {cause}".split())
            raise ModelFileError(f"{path} is not a readable torch.export archive: {reason}") from None


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


def _random_input(shape, dtype: np.dtype, rng: np.random.Generator) -> np.ndarray:
    if dtype == np.bool_:
        return rng.random(shape) < 0.5
    if dtype.kind in "iu":
        return rng.integers(0, 10, size=shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def _compare(name: str, actual, expected, rtol: float, atol: float) -> OutputCheck:
    actual = np.asarray(actual)
    expected = np.asarray(expected)
    if actual.shape != expected.shape:
        return OutputCheck(name, actual.shape, str(actual.dtype), float("nan"), float("nan"), False,
                           f"shape {actual.shape}, reference {expected.shape}")
    a = actual.astype(np.float64) if actual.dtype.kind in "biuf" else actual
    e = expected.astype(np.float64) if expected.dtype.kind in "biuf" else expected
    diff = np.abs(a - e)
    finite = np.isfinite(diff)
    max_abs = float(diff[finite].max()) if finite.any() else 0.0
    scale = np.abs(e)
    rel = diff / np.where(scale > 0, scale, 1)
    max_rel = float(rel[finite].max()) if finite.any() else 0.0
    same_nonfinite = bool(np.array_equal(np.isnan(a), np.isnan(e)) and np.all(a[~finite] == e[~finite])
                          if a.dtype.kind == "f" else True)
    passed = bool(np.allclose(a, e, rtol=rtol, atol=atol, equal_nan=True)) and same_nonfinite
    return OutputCheck(name, actual.shape, str(actual.dtype), max_abs, max_rel, passed)


def _load_npz(path: str, names: list[str]) -> list[np.ndarray]:
    with np.load(path) as data:
        keys = list(data.keys())
        if all(n in keys for n in names):
            return [data[n] for n in names]
        if len(keys) == len(names):  # positional: arr_0, arr_1, ...
            return [data[k] for k in keys]
        raise InputError(f"{path} holds {', '.join(keys)}; the model's inputs are {', '.join(names)}")


def _onnx_dim_size(dim, sizes: dict[str, int]) -> int:
    if dim.HasField("dim_value"):
        return dim.dim_value
    return sizes.get(dim.dim_param, 1)


def verify(path: str, *, inputs_npz: str | None = None, rtol: float = 1e-4, atol: float = 1e-5,
           seed: int = 0, dims: dict[str, int] | None = None) -> Verification:
    """Run the model through jaxport and its reference on the same inputs."""
    rng = np.random.default_rng(seed)
    if file_kind(path) == "onnx":
        return _verify_onnx(path, inputs_npz, rtol, atol, rng, dims or {})
    return _verify_pt2(path, inputs_npz, rtol, atol, rng)


def _verify_onnx(path, inputs_npz, rtol, atol, rng, dims) -> Verification:
    import onnxruntime

    from .frontends import onnx as onnx_frontend

    proto = onnx_frontend.load(path)
    model = onnx_frontend.from_onnx(proto)
    initializers = {t.name for t in proto.graph.initializer}
    declared = [v for v in proto.graph.input if v.name not in initializers]
    names = [v.name for v in declared]
    if inputs_npz:
        inputs = _load_npz(inputs_npz, names)
    else:
        inputs = []
        for v in declared:
            tensor = v.type.tensor_type
            shape = tuple(_onnx_dim_size(d, dims) for d in tensor.shape.dim)
            inputs.append(_random_input(shape, onnx_frontend.np_dtype(tensor.elem_type), rng))
    try:
        session = onnxruntime.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
        expected = session.run(None, dict(zip(names, inputs)))
    except Exception as e:  # noqa: BLE001 - the reference's failure is reported, not raised
        raise ModelFileError(f"onnxruntime cannot run {path}: {' '.join(str(e).split())[:300]}") from None
    actual = model(*inputs)
    actual = [actual] if len(expected) == 1 else list(actual)
    checks = [_compare(name, a, e, rtol, atol) for name, a, e in zip(model.output_names, actual, expected)]
    return Verification(path, f"onnxruntime {onnxruntime.__version__}", checks, rtol, atol)


def _verify_pt2(path, inputs_npz, rtol, atol, rng) -> Verification:
    import torch

    from .convert import from_exported_program

    ep = load_exported_program(path)
    model = from_exported_program(ep)
    specs = model.program.user_inputs
    names = [s.name for s in specs]
    if inputs_npz:
        inputs = _load_npz(inputs_npz, names)
    else:
        inputs = [_random_input(tuple(d if d is not None else 2 for d in s.spec.shape), np.dtype(s.spec.dtype), rng)
                  for s in specs]
    in_spec = ep.call_spec.in_spec
    # The program's own (args, kwargs): a model exported with keyword inputs refuses positional ones.
    args, kwargs = (torch.utils._pytree.tree_unflatten(inputs, in_spec)
                    if in_spec is not None and in_spec.num_leaves == len(inputs) else (inputs, {}))
    torch_args, torch_kwargs = torch.utils._pytree.tree_map(
        lambda x: torch.from_numpy(np.ascontiguousarray(x)), (args, kwargs))
    try:
        with torch.no_grad():
            expected = ep.module()(*torch_args, **torch_kwargs)
    except Exception as e:  # noqa: BLE001 - the reference's failure is reported, not raised
        raise ModelFileError(f"PyTorch cannot run {path}: {type(e).__name__}: {' '.join(str(e).split())[:300]}") from None
    flat_expected = [t.numpy() for t in torch.utils._pytree.tree_leaves(expected) if isinstance(t, torch.Tensor)]
    actual = model(*args, **kwargs)
    import jax

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
