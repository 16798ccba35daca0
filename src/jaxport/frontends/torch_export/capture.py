"""Capturing a module with `torch.export`, and decomposing just the ops jaxport lacks.

jaxport lowers the graph `torch.export` records (the training IR) directly wherever it has
lowerings for its ops, because `run_decompositions()` is slow (about 1.5 s on a small BERT) and
sometimes fails (GPT-2's view-stride error). Only the ops it lacks are decomposed, with
PyTorch's own decompositions, and what is still missing after that is reported all at once.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

import torch
from torch.export import ExportedProgram

from ...errors import ExportError, OpUse, UnsupportedOpsError
from ...ops import registry
from .. import aten_schema, foreach, hugging_face
from ..aten_schema import op_name
from .inplace import rebindable, view_writes
from .nodes import INLINED_HOPS, module_path, source


def export(
    module: torch.nn.Module,
    args: tuple,
    kwargs: dict | None = None,
    *,
    dynamic_shapes=None,
    strict: bool = False,
) -> ExportedProgram:
    """`torch.export.export`, with the exporter's reason as the error when it fails. Hugging Face
    models are traced in transformers' own export context (cache pytrees, export patches)."""
    if not isinstance(module, torch.nn.Module):
        raise TypeError(f"from_torch expects a torch.nn.Module, got {type(module).__name__}")
    if hugging_face.is_model(module):
        context = hugging_face.exporting(module, kwargs)
    else:
        context = contextlib.nullcontext(kwargs)
    try:
        with context as kwargs:
            return torch.export.export(
                module, tuple(args), kwargs or None, dynamic_shapes=dynamic_shapes, strict=strict
            )
    except Exception as e:  # the exporter's many error types all mean "could not capture"
        reason = str(e).strip() or type(e).__name__
        raise ExportError(
            f"torch.export could not capture {type(module).__name__} "
            f"({type(e).__name__}):\n{reason}"
        ) from None


def lowerable(ep: ExportedProgram, *, decompose: str = "auto") -> ExportedProgram:
    """The exported program with every op jaxport lacks decomposed, if PyTorch can.

    decompose: "auto" decomposes only what is missing; "core" always runs the
    full core-ATen decomposition; "none" never decomposes.
    """
    if decompose == "core":
        return ep.run_decompositions()
    if decompose == "none":
        return ep
    best_missing = missing_in_graph(ep)
    if not best_missing:
        return ep
    missing = {u.op for u in best_missing}
    table = {
        op: fn for op, fn in torch.export.default_decompositions().items() if str(op) in missing
    }
    attempts = [lambda: ep.run_decompositions(table), lambda: ep.run_decompositions()]
    for attempt in attempts:
        try:
            candidate = attempt()
        except Exception:  # PyTorch's decompositions fail on some graphs (GPT-2): report the best so far
            continue
        candidate_missing = missing_in_graph(candidate)
        if not candidate_missing:
            return candidate
        if len({u.op for u in candidate_missing}) < len({u.op for u in best_missing}):
            best_missing = candidate_missing
    raise UnsupportedOpsError(best_missing)


def original_nodes(original: ExportedProgram, lowered: ExportedProgram) -> dict[str, str]:
    """{name of a call_function node of `lowered`'s graph: the node of `original`'s graph it came
    from}, where `lowered` is `lowerable(original)`. The same program: every node is its own. A
    decomposed one: read from the provenance PyTorch's passes record (`node.meta["from_node"]`, a
    chain of the nodes each was made from, each naming the graph it was in), followed to the node
    of `original`'s graph; nodes with no such ancestor are left out."""
    if lowered is original:
        return {n.name: n.name for n in original.graph.nodes if n.op == "call_function"}
    names = {n.name for n in original.graph.nodes}
    nodes = {}
    for n in lowered.graph.nodes:
        if n.op == "call_function":
            found = _ancestor_in(n.meta.get("from_node") or (), id(original.graph), names)
            if found is not None:
                nodes[n.name] = found
    return nodes


def _ancestor_in(sources, graph_id: int, names: set[str]) -> str | None:
    """The first node of the graph `graph_id` in a `from_node` chain, depth first (a source
    without a graph id, from a torch that records none, is taken by its name)."""
    for made_from in sources:
        in_graph = getattr(made_from, "graph_id", graph_id) == graph_id
        if in_graph and made_from.name in names:
            return made_from.name
        found = _ancestor_in(getattr(made_from, "from_node", None) or (), graph_id, names)
        if found is not None:
            return found
    return None


def missing_decompositions() -> dict:
    """PyTorch's export decompositions for just the ops jaxport has no lowering for: the table
    `lowerable` would decompose with, for tracers that take one up front (AOTAutograd, whose
    backward graphs hold ops such as `native_layer_norm_backward`). Read from the registry at
    each call, so lowerings registered later are lowered whole."""
    names = registry.registered_names()
    table = {**torch.export.default_decompositions(), **foreach.decompositions()}
    return {op: fn for op, fn in table.items() if str(op) not in names}


def missing_in_graph(ep: ExportedProgram) -> list[OpUse]:
    """Ops without a lowering, and in-place writes into views that only functionalization can run."""
    return missing_in(ep.graph_module, registry.registered_names())


def missing_in(graph_module: torch.fx.GraphModule, names) -> list[OpUse]:
    writes = view_writes(graph_module.graph)
    uses = []
    for n in graph_module.graph.nodes:
        if n.op != "call_function":
            continue
        if isinstance(n.target, torch._ops.HigherOrderOperator):
            hop = getattr(n.target, "__name__", "")
            if hop in INLINED_HOPS:
                uses += missing_in(getattr(graph_module, n.args[INLINED_HOPS[hop]].target), names)
            if hop != "with_effects":
                continue
            name = op_name(n.args[1])
        else:
            name = op_name(n.target)
        if aten_schema.functional_variant(n.target) is not None:
            if not rebindable(n) and n not in writes:
                uses.append(OpUse(f"{name} (in-place write through a view)", n.name, module_path(n), source(n)))
            elif str(aten_schema.functional_variant(n.target)) not in names:
                uses.append(OpUse(str(aten_schema.functional_variant(n.target)), n.name, module_path(n), source(n)))
        elif name not in names:
            uses.append(OpUse(name, n.name, module_path(n), source(n)))
    return uses


# -- torch's logs --------------------------------------------------------------------------------


@contextlib.contextmanager
def quiet_torch_logs() -> Iterator[list[logging.LogRecord]]:
    """torch's loggers silenced; yields the records they would have printed (torch.export.load logs
    the real reason a load failed, with its traceback, and raises a vaguer error)."""
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    keep = Keep(logging.WARNING)
    loggers = [logging.getLogger("torch")] + [
        logger for name, logger in list(logging.root.manager.loggerDict.items())
        if name.startswith("torch.") and isinstance(logger, logging.Logger) and logger.handlers]
    saved = [(logger, logger.handlers) for logger in loggers]
    for logger in loggers:
        logger.handlers = [keep]
    try:
        yield records
    finally:
        for logger, handlers in saved:
            logger.handlers = handlers
