"""Localization: both sides run node by node, and the first node whose lowering gives another
result than the reference's op reported.

Each jaxport node is evaluated on the *reference's* values of its inputs and its result compared
with the reference's result for the same node, so a wrong lowering is named where it is, not
where rounding accumulated over many correct nodes first crosses a tolerance. Beside it runs
jaxport's own propagation (each node on jaxport's values, as `apply` runs op by op), whose
outputs are compared end to end. Values are held only until their last reader has run, on both
sides, so memory is that of one run, not of every intermediate. Nodes jaxport adds or rewrites
(write-backs of in-place view writes, the bodies of inlined higher-order ops, size arithmetic it
folds) have no reference value of their own: they are computed, so later nodes have inputs, but
not compared, and the report counts them.

Every node compared is also measured (`NodeError`, in `report.node_errors`): its error on the
reference's inputs, and that of jaxport's own value of it, for Model Explorer's node data.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Protocol

import jax
import numpy as np
import torch

from ..backends.inputs import as_jax
from ..backends.model import JaxModel
from ..compare import OutputCheck, as_numpy, compare
from ..errors import JaxportError, one_line
from ..ir import Input, Node, Program, Ref, interpret, references
from ..ops import registry
from .inputs import Options
from .node_data import Deviation, NodeError
from .report import (
    DESCRIBED_DIVERGENCES,
    Divergence,
    TensorStats,
    VerificationReport,
    compare_outputs,
    tensor_stats,
    tolerance,
)


class Reference(Protocol):
    """What `localized_report` asks of a reference (`torch_reference.ExportedReference`,
    `onnx_reference.OnnxReference`)."""

    def has(self, node: Node) -> bool:
        """Whether it has a value for any of the node's results."""

    def values(self, node: Node) -> dict[str, Any]:
        """{value name: the reference's value} of the node's results; asked in program order."""

    def outputs(self) -> list:
        """The model's flat outputs."""


def localized_report(model: JaxModel, inputs: list, reference: Reference, label: str, reference_name: str,
                     options: Options, output_names: Sequence[str] | None = None,
                     graph_nodes: Mapping[str, str] | None = None) -> VerificationReport:
    """Walk the program in order with two environments: `fed`, where every value the reference
    has is the reference's (so each node runs on the reference's inputs), and `own`, jaxport's
    own values throughout (its end-to-end run). Values are dropped after their last reader.
    `graph_nodes`: {program node: the node of the graph verify was given it came from}, recorded
    with each node's error."""
    with _torch_threads(max(1, (os.cpu_count() or 2) // 2)):
        return _walk(model, inputs, reference, label, reference_name, options, output_names, graph_nodes or {})


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


def _walk(model: JaxModel, inputs: list, reference: Reference, label: str, reference_name: str,
          options: Options, output_names: Sequence[str] | None, graph_nodes: Mapping[str, str]) -> VerificationReport:
    """`localized_report`'s walk, under the lowerings the program was made with."""
    with registry.applying(model.program.lowerings):
        return _walk_nodes(model, inputs, reference, label, reference_name, options, output_names, graph_nodes)


def _walk_nodes(model: JaxModel, inputs: list, reference: Reference, label: str, reference_name: str,
                options: Options, output_names: Sequence[str] | None,
                graph_nodes: Mapping[str, str]) -> VerificationReport:
    start = time.perf_counter()
    report = VerificationReport(label, reference_name, [], options.rtol, options.atol, localized=True,
                                nodes=len(model.program.nodes))
    walk = _Walk(model, inputs, reference, options, report, graph_nodes)
    for index, node in enumerate(model.program.nodes):
        walk.step(index, node)
        if walk.stopped:
            break
    expected = reference.outputs()
    if walk.own is not None:
        report.outputs = compare_outputs(walk.own_outputs(), expected, output_names, options.rtol,
                                         options.atol)
    report.seconds = time.perf_counter() - start
    return report


class _Walk:
    """The two environments of `localized_report` and what the walk found, node by node."""

    def __init__(self, model: JaxModel, inputs: list, reference: Reference, options: Options,
                 report: VerificationReport, graph_nodes: Mapping[str, str]):
        program = self.program = model.program
        self.reference, self.options, self.report = reference, options, report
        self.graph_nodes = graph_nodes
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
        #: a node without a reference value failed: the walk cannot go past it
        self.stopped = False

    def step(self, index: int, node: Node) -> None:
        run = _node_runner(self.program, node)
        if self.own is not None:
            try:
                self.own.update(run(self.own))
            except JaxportError as e:
                self.report.propagation_error, self.own = one_line(e, 500), None
        if not self.reference.has(node):
            self.report.without_reference += 1
            try:
                computed = run(self.fed)
            except JaxportError as e:
                # Nothing stands in for its results: later nodes would have no inputs.
                self._record(_failed(index, node, e, {}, self.fed, walk_ends=True), node)
                self.stopped = True
                return
            self.fed.update(computed)
            self.unreferenced.update(computed)
        else:
            self._compare(index, node, run)
        self._drop(node)

    def _compare(self, index: int, node: Node, run: Callable[[Mapping[str, Any]], dict[str, Any]]) -> None:
        """The node on the reference's inputs against the reference, and jaxport's own value of
        it too (both measured, `NodeError`); then the reference's values (those it has) stand
        for the node's results."""
        expected = self.reference.values(node)
        computed: dict[str, Any] = {}
        if id(node) in self.random:  # another generator's draws: not comparable
            self.report.random += 1
        else:
            self.report.compared += 1
            try:
                computed = run(self.fed)
                checks = _checks(computed, expected, self.options)
                problem, local = _diverges(index, node, checks, self.fed), _deviation(checks)
            except JaxportError as e:
                problem, local = _failed(index, node, e, expected, self.fed), Deviation(math.nan, math.inf, False)
            if problem is not None:
                self._record(problem, node)
            propagated = None
            if self.own is not None:
                own = {name: self.own.get(name) for name in expected}
                propagated = _deviation(_checks(own, expected, self.options))
            self.report.node_errors.append(
                NodeError(node.name, node.op, self.graph_nodes.get(node.name, ""), local, propagated))
        self.fed.update({name: _fed_value(value, computed.get(name)) for name, value in expected.items()})
        self.unreferenced.difference_update(expected)
        extra = {name: value for name, value in computed.items() if name not in expected}
        self.fed.update(extra)
        self.unreferenced.update(extra)

    def _record(self, problem: Divergence, node: Node) -> None:
        unreferenced = tuple(n for n in _reads(node) if n in self.unreferenced)
        self.report.diverging += 1
        if len(self.report.divergences) < DESCRIBED_DIVERGENCES:
            self.report.divergences.append(dataclasses.replace(problem, unreferenced_inputs=unreferenced))

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
    return references((node.args, node.kwargs))


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


@dataclasses.dataclass(frozen=True)
class _Check:
    """One of a node's values against the reference's: `check` None where the node has another
    number of values there than the reference (`problem` says)."""

    value: str
    check: OutputCheck | None
    problem: str
    rtol: float
    atol: float
    actual: Any
    reference: Any


def _checks(computed: Mapping[str, Any], expected: Mapping[str, Any], options: Options) -> list[_Check]:
    """Each of the node's values (each element of a tuple) against the reference's, with the
    tolerance of the reference's dtype, the relative part of each tensor's largest magnitude."""
    checks = []
    for name, reference in expected.items():
        actual = dict(_leaves(computed.get(name), name))
        wanted = dict(_leaves(reference, name))
        if actual.keys() != wanted.keys():
            checks.append(_Check(name, None, f"{len(actual)} value(s), reference {len(wanted)}", 0.0, 0.0,
                                 computed.get(name), reference))
            continue
        for leaf, want in wanted.items():
            got = actual[leaf]
            if want is None and got is None:
                continue
            rtol, atol = tolerance(np.asarray(as_numpy(want)).dtype, options.rtol, options.atol)
            check = compare(leaf, got, want, rtol=rtol, atol=atol, per_tensor=True)
            checks.append(_Check(leaf, check, check.problem or "values differ beyond tolerance", rtol, atol, got, want))
    return checks


def _diverges(index: int, node: Node, checks: Sequence[_Check], fed: Mapping[str, Any]) -> Divergence | None:
    """The first of the node's values that differs from the reference's, or None."""
    for c in checks:
        if c.check is None:
            return _divergence(index, node, c.value, c.problem, math.nan, math.nan, (0.0, 0.0), fed, c.actual,
                               c.reference)
        if not c.check.passed:
            return _divergence(index, node, c.value, c.problem, c.check.max_abs, c.check.max_rel, (c.rtol, c.atol),
                               fed, c.actual, c.reference)
    return None


def _deviation(checks: Sequence[_Check]) -> Deviation:
    """The node's error over all its values: the largest relative error and ratio to tolerance."""
    relative, ratio, passed = 0.0, 0.0, True
    for c in checks:
        if c.check is None or math.isnan(c.check.max_abs):  # another shape or number of values
            return Deviation(math.nan, math.inf, False)
        bound = c.atol + c.rtol * max(c.check.scale, 1.0)  # what `compare(per_tensor=True)` allows
        over = c.check.max_abs / bound if bound > 0 else (0.0 if c.check.max_abs == 0 else math.inf)
        relative, ratio = max(relative, c.check.scaled_error), max(ratio, over)
        passed = passed and c.check.passed
    return Deviation(relative, ratio, passed)


def _failed(index: int, node: Node, error: JaxportError, expected: dict, fed: Mapping[str, Any],
            walk_ends: bool = False) -> Divergence:
    """A divergence for a lowering that fails on the reference's inputs (for a node without a
    reference value, which the walk cannot go past, `walk_ends`)."""
    name, reference = next(iter(expected.items())) if expected else (_writes(node)[0], None)
    ends = " (it has no reference value to go on with: the walk ends here)" if walk_ends else ""
    return _divergence(index, node, name, f"the lowering fails on the reference's inputs: {one_line(error, 500)}{ends}",
                       math.nan, math.nan, (0.0, 0.0), fed, None, reference)


def _divergence(index: int, node: Node, value: str, problem: str, max_abs: float, max_rel: float,
                tolerances: tuple[float, float], fed: Mapping[str, Any], actual: Any, reference: Any) -> Divergence:
    def stats(x: Any) -> TensorStats | None:
        return None if x is None or isinstance(x, (tuple, list)) else tensor_stats(x)

    inputs = tuple((name, tensor_stats(fed[name])) for name in _reads(node)
                   if name in fed and not isinstance(fed[name], (tuple, list)) and fed[name] is not None)
    return Divergence(index, node.name, node.op, node.module_path, node.source, value, problem, max_abs, max_rel,
                      *tolerances, inputs, stats(actual), stats(reference), registry.provenance(node.op) or "")
