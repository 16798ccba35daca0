"""`verify`: a model run through jaxport and through its reference on the same inputs, and, with
`localize=True`, the first node whose lowering gives another result than the reference's op.

References: PyTorch for a `torch.nn.Module`, an `ExportedProgram` or a `.pt2` file (the exported
graph, after the decompositions jaxport's translation applies, so its nodes are the program's);
onnxruntime for an `.onnx` file. `jaxport verify` is a thin layer over this package.

    node_data         each node's error (`NodeError`), and Model Explorer's node data of them
    report            `VerificationReport`, `Divergence`, `TensorStats`; the tolerances per dtype
                      (`TOLERANCES`); the text and JSON reports; `save_node_data`
    inputs            the options, checked; model files by extension; inputs bound by name or made
                      at random in the declared shapes, checked against the model's
    torch_reference   PyTorch running the exported graph node by node
    onnx_reference    onnxruntime sessions; every node's output exposed, fetched in chunks
    localize          the node-by-node walk: each jaxport node on the reference's inputs
    __init__          `verify`, `verify_file`: the model translated, run end to end or localized

Each module imports only those listed above it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import jax
import numpy as np
import torch
from torch.export import ExportedProgram

from .. import versions
from ..backends.model import JaxModel
from ..compare import as_numpy
from ..devices import module_device
from ..dlpack import to_torch
from ..errors import InputError, ModelFileError, one_line
from ..frontends import onnx as onnx_frontend
from ..frontends import torch_export
from ..frontends.pt2 import load_exported_program
from .inputs import (
    DIMS_WITH_INPUTS,
    NamedInputs,
    Options,
    bind_inputs,
    check_inputs,
    model_file_kind,
    named_inputs,
    onnx_random_inputs,
    pt2_random_inputs,
)
from .localize import localized_report
from .node_data import Deviation, NodeError
from .onnx_reference import ONNX_CHUNK_BYTES, OnnxReference, onnxruntime_session
from .report import (
    DESCRIBED_DIVERGENCES,
    TOLERANCES,
    Divergence,
    TensorStats,
    VerificationReport,
    compare_outputs,
    format_report,
    tensor_stats,
    tolerance,
)
from .torch_reference import ExportedReference, output_leaves

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
      args: the positional inputs. For a file or an `ExportedProgram` they may be left out
        (with `kwargs`): random inputs of the declared shapes are made then.
      kwargs: the keyword inputs (for a file: inputs by name).
      localize: also run both sides node by node and report the first node whose lowering,
        given the reference's inputs, differs from the reference beyond tolerance
        (`report.first_divergence`: node name, op, module path, source line, input and output
        statistics, the error).
      rtol: relative tolerance of floating-point values; by default per dtype (`TOLERANCES`).
      atol: absolute tolerance of floating-point values; by default per dtype (`TOLERANCES`).
      seed: the seed of the random inputs.
      dims: the sizes of the symbolic dims of the random inputs, by name: ONNX dim names,
        torch.export size symbols such as s0 (an ONNX dim not named is 1).

    Returns a `VerificationReport`; `str(report)` is the text report, `report.to_json()` the JSON.
    Invalid inputs, files and options raise a `JaxportError` of one line naming what is wrong.
    """
    options = Options.checked(localize, rtol, atol, seed, dims)
    if isinstance(model, (str, os.PathLike)):
        return verify_file(os.fspath(model), named_inputs(args, kwargs), options=options)
    if isinstance(model, ExportedProgram):
        return _verify_exported(model, "exported program", named_inputs(args, kwargs), None, options)
    if isinstance(model, torch.nn.Module):
        if not isinstance(args, tuple):
            args = (args,)
        if module_device(model).type == "meta":
            raise InputError(_NO_WEIGHTS.format(label=type(model).__name__))
        ep = torch_export.export(model, args, dict(kwargs or {}))
        return _verify_exported(ep, type(model).__name__, None, (args, dict(kwargs or {})), options)
    raise InputError(f"verify takes a torch.nn.Module, an ExportedProgram or the path of an .onnx or .pt2 "
                     f"file, not {type(model).__name__}")


def verify_file(path: str, inputs: NamedInputs | None = None, *, localize: bool = False, rtol: float | None = None,
                atol: float | None = None, seed: int = 0, dims: Mapping[str, int] | None = None,
                options: Options | None = None) -> VerificationReport:
    """`verify` of an `.onnx` or `.pt2` file, with inputs by name (`(where they came from,
    {name or arr_i: array})`, as `jaxport verify --inputs` reads an `.npz`) or random ones."""
    options = options or Options.checked(localize, rtol, atol, seed, dims)
    if inputs is not None and options.dims:
        raise InputError(DIMS_WITH_INPUTS)
    if model_file_kind(path) == "onnx":
        return _verify_onnx(path, inputs, options)
    return _verify_exported(load_exported_program(path), path, inputs, None, options)


# -- PyTorch: modules, exported programs, .pt2 files --------------------------------------------


def _verify_exported(ep: ExportedProgram, label: str, inputs: NamedInputs | None,
                     example: tuple[tuple, dict] | None, options: Options) -> VerificationReport:
    """An exported program against PyTorch: on the module's example inputs (`example`), the
    inputs given by name, or random ones."""
    given = ep
    if options.localize:
        # The graph as jaxport translates it (only the ops it lacks decomposed), so that the
        # reference's nodes are the program's.
        ep = torch_export.lowerable(ep)
    device = _reference_device(ep, label)
    translation = torch_export.translate(ep, decompose="none" if options.localize else "auto", name=label)
    model = JaxModel(translation)
    specs = model.program.user_inputs
    if example is not None:
        args, kwargs = example
        flat = [np.asarray(as_numpy(x)) if isinstance(x, torch.Tensor) else x
                for x in translation.flatten_inputs(args, kwargs)]
    else:
        flat = bind_inputs(inputs, [s.name for s in specs]) if inputs is not None else \
            pt2_random_inputs(label, ep, specs, options)
        check_inputs(label, specs, flat, model.program.dim_ranges)
    reference = f"PyTorch {torch.__version__}"
    if options.localize:
        walk = ExportedReference(ep, flat, model.program, label, device)
        # Each program node's node in the graph given (what Model Explorer draws): the FX node it
        # was translated from, and that node's origin before the decompositions.
        original = torch_export.original_nodes(given, ep)
        graph_nodes = {n.name: original[n.origin] for n in model.program.nodes if n.origin in original}
        return localized_report(model, flat, walk, label, reference, options, graph_nodes=graph_nodes)
    in_spec = ep.call_spec.in_spec
    # The program's own (args, kwargs): a model exported with keyword inputs refuses positional ones.
    args, kwargs = (torch.utils._pytree.tree_unflatten(flat, in_spec)
                    if in_spec is not None and in_spec.num_leaves == len(flat) else (flat, {}))
    torch_args, torch_kwargs = torch.utils._pytree.tree_map(lambda x: _as_torch(x, device), (args, kwargs))
    try:
        with torch.no_grad():
            expected = ep.module()(*torch_args, **torch_kwargs)
    except Exception as e:  # noqa: BLE001 - the reference's failure is reported, not raised
        raise ModelFileError(f"PyTorch cannot run {label}: {type(e).__name__}: {one_line(e, 300)}") from None
    actual = model(*args, **kwargs)
    checks = compare_outputs(jax.tree_util.tree_leaves(actual), output_leaves(expected), None, options.rtol,
                             options.atol)
    return VerificationReport(label, reference, checks, options.rtol, options.atol)


def _as_torch(x: Any, device: torch.device) -> Any:
    """An input as PyTorch's reference takes it: on the device the model was exported on."""
    return to_torch(np.asarray(x)).to(device) if isinstance(x, (np.ndarray, jax.Array)) else x


def _reference_device(ep: ExportedProgram, label: str) -> torch.device:
    """Where PyTorch runs `ep`: where its weights are, else where its recorded inputs were (a model
    exported on a GPU is checked on it); one on the meta device has no weights to run."""
    recorded = [node.meta.get("val") for node in ep.graph.nodes if node.op == "placeholder"]
    device = module_device(None, (list(ep.state_dict.values()), list(ep.constants.values()), recorded))
    if device.type == "meta":
        raise InputError(_NO_WEIGHTS.format(label=label))
    return device


_NO_WEIGHTS = ("verify runs {label} in PyTorch as the reference, and its weights are on the meta device (no values): "
               "load them first (module.to_empty(device=...) and load_state_dict, or from_pretrained)")


# -- ONNX ---------------------------------------------------------------------------------------


def _verify_onnx(path: str, inputs: NamedInputs | None, options: Options) -> VerificationReport:
    onnxruntime = versions.require("onnxruntime")  # optional (`jaxport[onnx]`)

    proto, translation = onnx_frontend.translate(path)
    model = JaxModel(translation)
    initializers = {t.name for t in proto.graph.initializer}
    declared = [v for v in proto.graph.input if v.name not in initializers]
    names = [v.name for v in declared]
    if inputs is not None:
        flat = bind_inputs(inputs, names)
        check_inputs(path, model.program.user_inputs, flat, {})
    else:
        flat = onnx_random_inputs(path, declared, options)
    reference = f"onnxruntime {onnxruntime.__version__}"
    if options.localize:
        walk = OnnxReference(path, proto, dict(zip(names, flat)))
        return localized_report(model, flat, walk, path, reference, options, model.output_names)
    expected = onnxruntime_session(path, proto).run(None, dict(zip(names, flat)))
    actual = model(*flat)
    actual = [actual] if len(expected) == 1 else list(actual)
    checks = compare_outputs(actual, expected, model.output_names, options.rtol, options.atol)
    return VerificationReport(path, reference, checks, options.rtol, options.atol)


__all__ = [
    "DESCRIBED_DIVERGENCES", "Deviation", "Divergence", "NodeError", "ONNX_CHUNK_BYTES", "TOLERANCES", "TensorStats",
    "VerificationReport", "format_report", "model_file_kind", "tensor_stats", "tolerance", "verify", "verify_file",
]
