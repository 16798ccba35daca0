"""Each node's error against the reference, and Model Explorer's "node data" of those errors.

The node-by-node walk (`localize`) measures every node it compares twice: on the reference's
inputs (`NodeError.local`: only a wrong lowering differs there, so this is where a divergence
starts) and on jaxport's own values (`NodeError.propagated`: what earlier nodes' differences
carried to it, so this is how a divergence spreads). Each is a `Deviation`: the largest absolute
difference relative to the reference's largest finite magnitude (`relative`), and the same
difference over the tolerance it is judged by (`ratio`, beyond tolerance above 1).

Google's Model Explorer (`ai-edge-model-explorer`) colours a graph's nodes from a "node data"
JSON file, `{graph id: {"results": {node id: {"value": number, "bgColor": css colour}}}}` (its
`node_data_builder.ModelNodeData`, `GraphNodeData` and `NodeDataResult`). Its PyTorch adapter
draws an exported program's graph as the graph "graph" whose node ids are the FX node names, so
the results are keyed by the node of the graph `verify` was given that each jaxport node came
from (`NodeError.graph_node`): where PyTorch's decompositions split one node into several, or an
inlined grad-mode or autocast region holds several, that node shows the worst of them.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable
from typing import Any

#: The id Model Explorer's PyTorch adapter gives an exported program's graph (its
#: `PytorchExportedProgramAdapterImpl.create_graph`).
GRAPH_ID = "graph"

#: The colours, by how an error compares with its tolerance: (largest ratio, colour, meaning).
#: Beyond tolerance, red from 100 times it (or a result that cannot be measured).
BANDS: tuple[tuple[float, str, str], ...] = (
    (0.01, "#1a9850", "within 1/100 of the tolerance"),
    (0.1, "#91cf60", "within 1/10 of the tolerance"),
    (1.0, "#fee08b", "within the tolerance"),
    (100.0, "#fc8d59", "beyond the tolerance, by up to 100 times"),
    (math.inf, "#d73027", "beyond 100 times the tolerance, or not measurable"),
)

#: The value a node shows whose result cannot be measured (the lowering failed on the
#: reference's inputs; the result's shape or number of values differs): as large as the
#: reference's values themselves.
UNMEASURABLE = 1.0


@dataclasses.dataclass(frozen=True)
class Deviation:
    """How far one node's results are from the reference's."""

    #: the largest absolute difference relative to the reference's largest finite magnitude (the
    #: largest over the node's values); NaN where it cannot be measured
    relative: float
    #: the largest absolute difference over the tolerance (`atol + rtol * max(magnitude, 1)`, the
    #: bound a node is judged by): above 1 is beyond tolerance; infinite where not measurable
    ratio: float
    #: within tolerance, with NaN, infinities, shape and dtype as the reference's
    passed: bool

    @property
    def colour(self) -> str:
        """The colour of its band (`BANDS`); a result within tolerance by its ratio that still
        fails (NaN or an infinity placed otherwise, another dtype) is beyond tolerance."""
        ratio = self.ratio if self.passed or self.ratio > 1.0 else math.inf
        return next(colour for bound, colour, _ in BANDS if ratio <= bound)

    @property
    def value(self) -> float:
        """What Model Explorer shows: `relative`, or `UNMEASURABLE`."""
        return self.relative if math.isfinite(self.relative) else UNMEASURABLE


@dataclasses.dataclass(frozen=True)
class NodeError:
    """A node of jaxport's program compared with the reference: on the reference's inputs
    (`local`) and on jaxport's own values (`propagated`; None once jaxport's own run stopped)."""

    #: the program's node, its op, and the node of the graph `verify` was given that it came from
    #: ("" where none: ONNX models, nodes whose provenance PyTorch did not record)
    node: str
    op: str
    graph_node: str
    local: Deviation
    propagated: Deviation | None


def _worst(errors: Iterable[Deviation]) -> Deviation:
    def rank(e: Deviation) -> tuple:
        return (not e.passed, e.ratio, e.relative if math.isfinite(e.relative) else math.inf)

    return max(errors, key=rank)


def model_node_data(errors: Iterable[NodeError], *, propagated: bool = False) -> dict[str, Any]:
    """Model Explorer's node data of `errors` (`local` ones, or `propagated`) for an exported
    program's graph: each graph node's worst error, its `value` the relative error (to 4
    significant digits) and its `bgColor` its band's colour (`BANDS`). Nodes without a graph node
    are left out."""
    by_node: dict[str, list[Deviation]] = {}
    for e in errors:
        error = e.propagated if propagated else e.local
        if e.graph_node and error is not None:
            by_node.setdefault(e.graph_node, []).append(error)
    results = {}
    for name, found in by_node.items():
        worst = _worst(found)
        results[name] = {"value": float(f"{max(e.value for e in found):.4g}"), "bgColor": worst.colour}
    return {GRAPH_ID: {"results": results}}


__all__ = ["BANDS", "Deviation", "GRAPH_ID", "NodeError", "UNMEASURABLE", "model_node_data"]
