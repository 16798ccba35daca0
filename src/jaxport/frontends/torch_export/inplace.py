"""In-place ops in an exported graph, as functional ones: `x.add_(y)` rebound to `add(x, y)`, and
writes through views (`t[:, :4] = s`) as scatters into the viewed tensor, where that is exact."""

from __future__ import annotations

import operator
from collections.abc import Callable

import torch

from .. import aten_schema
from ..aten_schema import op_name


def is_view(node) -> bool:
    target = getattr(node, "target", None)
    if not isinstance(target, torch._ops.OpOverload):
        return node.op == "placeholder"
    return aten_schema.returns_view(target)


def rebindable(node: torch.fx.Node) -> bool:
    """An in-place op jaxport can run as its functional twin: it writes a fresh, unaliased value."""
    if aten_schema.functional_variant(node.target) is None:
        return False
    index = aten_schema.written_argument(node.target)
    if index is None or index >= len(node.args):
        return False
    written = node.args[index]
    return isinstance(written, torch.fx.Node) and not is_view(written)


def _scatter(op: str) -> Callable:
    return lambda base, value, view_args, view_kwargs: (op, (base, value, *view_args), view_kwargs)


def _permute_back(base, value, view_args, view_kwargs):
    dims = [d % len(view_args[0]) for d in view_args[0]]
    return "aten.permute.default", (value, [dims.index(i) for i in range(len(dims))]), {}


#: View ops whose writes have a functional form: (base, new value of the view, the view's other
#: arguments and keyword arguments) -> (op, args, kwargs) giving the base's new value. Scatters
#: for views that pick elements; the inverse view for those that only rearrange all of them.
WRITE_BACK: dict[str, Callable] = {
    "aten.as_strided.default": _scatter("aten.as_strided_scatter.default"),
    "aten.diagonal.default": _scatter("aten.diagonal_scatter.default"),
    "aten.permute.default": _permute_back,
    "aten.select.int": _scatter("aten.select_scatter.default"),
    "aten.slice.Tensor": _scatter("aten.slice_scatter.default"),
    "aten.t.default": lambda base, value, view_args, view_kwargs: ("aten.t.default", (value,), {}),
    "aten.transpose.int": lambda base, value, view_args, view_kwargs: ("aten.transpose.int", (value, *view_args), {}),
    "aten.unsqueeze.default": lambda base, value, view_args, view_kwargs: ("aten.squeeze.dim", (value, *view_args), {}),
}


def view_writes(graph: torch.fx.Graph) -> dict[torch.fx.Node, list[torch.fx.Node]]:
    """The in-place writes through views that run exactly as scatters, each with its chain of
    views (the written one first) down to the tensor they view.

    `t[:, :4] = s` is `t = slice_scatter(t, s, 1, 0, 4)`, which is what functionalization makes
    of it, without re-tracing the whole program (seconds on a model with many such writes). A
    write qualifies when each view in its chain has a scatter, the viewed tensor is one the graph
    computes (an input's mutation would have to be returned; an in-place op's result is the
    tensor it wrote), and no other alias of that tensor made before the write is read after it
    (it would still hold the old values).
    """
    order = {node: i for i, node in enumerate(graph.nodes)}
    writes = {}
    for node in graph.nodes:
        if node.op != "call_function" or aten_schema.functional_variant(node.target) is None or rebindable(node):
            continue
        index = aten_schema.written_argument(node.target)
        chain: list[torch.fx.Node] = []
        base = node.args[index] if index is not None and index < len(node.args) else None
        while isinstance(base, torch.fx.Node) and base.op == "call_function" and op_name(base.target) in WRITE_BACK:
            chain.append(base)
            base = base.args[0]
        same = same_tensor(base)
        root = same[-1]
        if not chain or not isinstance(root, torch.fx.Node) or root.op != "call_function" or is_view(root):
            continue
        stale = [
            alias for alias in aliases(root)
            if alias not in chain and alias not in same and order[alias] < order[node]
            and any(order[u] > order[node] for u in alias.users)
        ]
        if not stale:
            writes[node] = chain
    return writes


def same_tensor(node) -> list:
    """`node`, then the tensors it is an in-place result of (`x.masked_fill_(m, 0)` is `x`):
    the graph's names for one tensor, all rebound when a write through a view changes it."""
    names = [node]
    while isinstance(node, torch.fx.Node) and node.op == "call_function" and rebindable(node):
        node = node.args[aten_schema.written_argument(node.target)]
        names.append(node)
    return names


def aliases(tensor: torch.fx.Node) -> set[torch.fx.Node]:
    """The nodes that share `tensor`'s memory: its views, their views, in-place results, items."""
    found: set[torch.fx.Node] = set()
    todo = [tensor]
    while todo:
        node = todo.pop()
        for user in node.users:
            shares = user.op == "call_function" and (
                (is_view(user) and user.args[:1] == (node,)) or user.target is operator.getitem
            )
            if shares and user not in found:
                found.add(user)
                todo.append(user)
    return found
