"""What `verify` reports, and the tolerances it judges by.

Tolerances are per dtype (`TOLERANCES`): integers and booleans exactly, floats within
`atol + rtol * |reference|`, NaN where the reference has NaN counting as a match
(`jaxport.compare`). Node by node, the relative part is taken of each tensor's largest
magnitude (`compare(..., per_tensor=True)`): one op's rounding on an element near zero left by
cancellation is not a wrong lowering.

A localized report keeps every compared node's error (`node_errors`), which `node_data` and
`save_node_data` give as Model Explorer's node data (`node_data.py`).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ..compare import OutputCheck, as_numpy, compare, compare_all
from ..errors import InputError
from ..files import write_file
from .node_data import NodeError, model_node_data

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
        """The value on one line: dtype and shape, its min, max and mean when it has finite values,
        and its counts of NaN and infinite values when it holds any."""
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
    #: every compared node's error, on the reference's inputs and on jaxport's own values, in
    #: program order (`node_data`; left out of `as_dict`, which would grow by a row a node)
    node_errors: list[NodeError] = dataclasses.field(default_factory=list)

    @property
    def first_divergence(self) -> Divergence | None:
        """The first node, in program order, whose lowering diverges; None if none does."""
        return self.divergences[0] if self.divergences else None

    @property
    def passed(self) -> bool:
        """Every output within tolerance, no diverging node, and jaxport's own run not stopped by
        a failed lowering (`propagation_error`)."""
        return all(o.passed for o in self.outputs) and not self.diverging and not self.propagation_error

    def as_dict(self) -> dict[str, Any]:
        """The report as JSON-ready values (floats that are NaN become None), each node's error
        left out (`node_data`)."""
        report = dataclasses.asdict(dataclasses.replace(self, node_errors=[]))
        del report["node_errors"]
        report["passed"] = self.passed
        report["first_divergence"] = report["divergences"][0] if self.divergences else None
        return _json_ready(report)

    def to_json(self, indent: int | None = 2) -> str:
        """`as_dict()` as JSON text, indented by `indent` spaces (None: on one line)."""
        return json.dumps(self.as_dict(), indent=indent)

    def __str__(self) -> str:
        return format_report(self)

    def node_data(self, *, propagated: bool = False) -> dict[str, Any]:
        """Model Explorer's node data of each node's error, for the graph it draws of the program
        `verify` was given (its PyTorch adapter's graph "graph", nodes by FX node name). A node
        PyTorch's decompositions split, or an inlined grad-mode or autocast region, shows the
        worst of its parts (`jaxport.verification.node_data`). A report that is not localized,
        or whose nodes map to no node of an exported program's graph (an ONNX model's), raises
        an `InputError`.

        Args:
          propagated: each node's error on jaxport's own values (how a divergence spreads)
            instead of on the reference's inputs (where it starts).

        Returns:
          `{"graph": {"results": {node: {"value": relative error, "bgColor": colour}}}}`.
        """
        if not self.localized:
            raise InputError("node data needs each node's error: verify with localize=True "
                             "(jaxport verify --localize)")
        if not any(e.graph_node for e in self.node_errors):
            raise InputError(f"{self.model}: no compared node maps to a node of an exported program's graph; node "
                             "data is written for PyTorch models (a module, an ExportedProgram, a .pt2 file), "
                             "keyed as Model Explorer's PyTorch adapter keys their nodes")
        return model_node_data(self.node_errors, propagated=propagated)

    def save_node_data(self, path: str | os.PathLike, *, propagated: bool = False) -> Path:
        """Write `node_data` as JSON, whole or not at all; Model Explorer opens it with the model
        (`model-explorer model.pt2 --node_data_paths=PATH`).

        Args:
          path: the file to write.
          propagated: as for `node_data`.

        Returns:
          The path written.
        """
        data = json.dumps(self.node_data(propagated=propagated), indent=1, allow_nan=False)
        return write_file(path, data.encode())


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


# -- outputs ------------------------------------------------------------------------------------


def compare_outputs(actual: list, expected: list, names: Sequence[str] | None, rtol: float | None,
                    atol: float | None) -> list[OutputCheck]:
    """Each output against the reference's, with the tolerance of its dtype (`rtol`/`atol` where
    given)."""
    names = list(names) if names is not None else [f"output {i}" for i in range(max(len(actual), len(expected)))]
    checks = [compare(n, a, e, rtol=r, atol=t) for n, a, e in zip(names, actual, expected)
              for r, t in [tolerance(np.asarray(as_numpy(e)).dtype, rtol, atol)]]
    if len(actual) != len(expected):
        checks += compare_all(actual, expected)[len(checks):]
    return checks
