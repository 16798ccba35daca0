"""PyTorch as the reference for a module, an `ExportedProgram` or a `.pt2` file, node by node:
the exported graph (after the decompositions jaxport's translation applies, so its nodes are the
program's) run one FX node at a time, the bodies of inlined higher-order ops included, each value
freed after its last user.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import jax
import numpy as np
import torch
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind, OutputKind

from ..dlpack import to_numpy, to_torch
from ..errors import ModelFileError, one_line
from ..frontends.torch_export.nodes import INLINED_HOPS
from ..ir import Node, Program


class ExportedReference:
    """PyTorch running an exported graph node by node, the bodies of the higher-order ops jaxport
    inlines (grad-mode and autocast regions) included, so that their nodes have reference values
    too; each value is freed after its last user, and those of the nodes the program has
    counterparts for are handed over as NumPy copies."""

    def __init__(self, ep: ExportedProgram, user_inputs: list, program: Program, label: str,
                 device: torch.device):
        self.label = label
        self.device = device
        self.signature = ep.graph_signature
        fx_nodes = dict(_graph_nodes(ep.graph_module, ""))
        # A program node named as an FX node stands for its value (an in-place op as its
        # functional twin), except higher-order ops: jaxport runs what they wrap instead.
        self.counterparts = {node.name for node in program.nodes if node.name in fx_nodes
                             and not isinstance(fx_nodes[node.name].target, torch._ops.HigherOrderOperator)}
        self.events = self._events(ep, self._placeholder_values(ep, user_inputs))
        self.ready: dict[str, Any] = {}
        self.output: list | None = None

    def _placeholder_values(self, ep: ExportedProgram, user_inputs: list) -> list:
        """The graph's inputs in placeholder order: weights, constants, then the user's inputs.
        Buffers and inputs are copies, so in-place ops in the graph leave the caller's alone."""
        users = iter(user_inputs)
        values = []
        for spec in self.signature.input_specs:
            if spec.kind in (InputKind.PARAMETER, InputKind.BUFFER):
                tensor = ep.state_dict.get(spec.target)
                tensor = ep.constants[spec.target] if tensor is None else tensor
                values.append(tensor.clone() if spec.kind == InputKind.BUFFER else tensor)
            elif spec.kind == InputKind.CONSTANT_TENSOR:
                values.append(ep.constants[spec.target])
            elif spec.kind == InputKind.USER_INPUT:
                x = next(users)
                values.append(to_torch(np.array(x)).to(self.device) if isinstance(x, (np.ndarray, jax.Array)) else x)
            elif spec.kind == InputKind.TOKEN:
                values.append(torch.empty(0, device=self.device))
            else:
                raise ModelFileError(f"verify cannot run {self.label}'s {spec.kind.name} input node by node")
        return values

    def has(self, node: Node) -> bool:
        return node.name in self.counterparts

    def values(self, node: Node) -> dict[str, Any]:
        """{node name: the reference's value}, running the graph up to the node."""
        while node.name not in self.ready:
            self._step()
        return {node.name: self.ready.pop(node.name)}

    def outputs(self) -> list:
        """The graph's user outputs (flat), running the rest of the graph."""
        while self.output is None:
            self._step()
        return self.output

    def _step(self) -> None:
        try:
            name, value = next(self.events)
        except StopIteration:
            raise ModelFileError(f"{self.label}: the reference's graph ended before its output") from None
        if name is None:
            self.output = value
        else:
            self.ready[name] = value

    def _events(self, ep: ExportedProgram, inputs: list) -> Iterator[tuple[str | None, Any]]:
        """(name, value) of each counterpart as it is computed, then (None, the user outputs)."""
        flat = yield from self._run(ep.graph_module, inputs, "", contextlib.nullcontext)
        yield None, output_leaves([v for v, spec in zip(flat, self.signature.output_specs)
                                    if spec.kind == OutputKind.USER_OUTPUT])

    def _run(self, graph: torch.fx.GraphModule, inputs: Sequence[Any], prefix: str,
             context: Callable[[], contextlib.AbstractContextManager]) -> Iterator[tuple[str, Any]]:
        """Run `graph` node by node, names prefixed as jaxport's translator prefixes an inlined
        body's (each op inside `context`: an autocast region's); returns its outputs."""
        env: dict[torch.fx.Node, Any] = {}
        last_users = _last_users(graph.graph)
        placeholders = iter(inputs)
        for fx_node in graph.graph.nodes:
            if fx_node.op == "placeholder":
                env[fx_node] = next(placeholders)
            elif fx_node.op == "get_attr":
                env[fx_node] = functools.reduce(getattr, fx_node.target.split("."), graph)
            elif fx_node.op == "call_function":
                args, kwargs = torch.fx.node.map_arg((fx_node.args, fx_node.kwargs), env.__getitem__)
                name = prefix + fx_node.name
                hop = getattr(fx_node.target, "__name__", "")
                if isinstance(fx_node.target, torch._ops.HigherOrderOperator) and hop in INLINED_HOPS:
                    body = INLINED_HOPS[hop]
                    inner = _region(hop, args, context)
                    env[fx_node] = tuple((yield from self._run(args[body], args[body + 1:], f"{name}_", inner)))
                else:
                    env[fx_node] = self._call(fx_node, name, args, kwargs, context)
                    if name in self.counterparts:
                        # A copy: a later in-place op in the graph must not change what was compared.
                        yield name, _numpy_copy(env[fx_node])
            elif fx_node.op == "output":
                return list(torch.fx.node.map_arg(fx_node.args[0], env.__getitem__))
            for done in last_users.get(fx_node, ()):
                del env[done]
        raise ModelFileError(f"{self.label}: a graph without an output node")

    def _call(self, fx_node: torch.fx.Node, name: str, args: tuple, kwargs: dict,
              context: Callable[[], contextlib.AbstractContextManager]) -> Any:
        try:
            with torch.no_grad(), context():
                return fx_node.target(*args, **kwargs)
        except Exception as e:  # noqa: BLE001 - the reference's failure is reported, not raised
            raise ModelFileError(f"PyTorch cannot run {self.label} at node {name}: "
                                 f"{type(e).__name__}: {one_line(e, 300)}") from None


def _region(hop: str, args: tuple, outer: Callable[[], contextlib.AbstractContextManager]):
    """The context an inlined higher-order op's body runs in: an autocast region's autocast (a
    grad-mode region changes no values: the walk runs without gradients throughout)."""
    if hop != "wrap_with_autocast":
        return outer
    device_type, dtype, enabled, cache_enabled = args[:4]

    @contextlib.contextmanager
    def region() -> Iterator[None]:
        with outer(), torch.autocast(device_type, dtype=dtype, enabled=enabled, cache_enabled=cache_enabled):
            yield

    return region


def _graph_nodes(graph: torch.fx.GraphModule, prefix: str) -> Iterator[tuple[str, torch.fx.Node]]:
    """(name, node) of every call_function node, inlined bodies' included under the names
    jaxport's translator gives them."""
    for fx_node in graph.graph.nodes:
        if fx_node.op != "call_function":
            continue
        yield prefix + fx_node.name, fx_node
        hop = getattr(fx_node.target, "__name__", "")
        if isinstance(fx_node.target, torch._ops.HigherOrderOperator) and hop in INLINED_HOPS:
            body = getattr(graph, fx_node.args[INLINED_HOPS[hop]].target)
            yield from _graph_nodes(body, f"{prefix}{fx_node.name}_")


def _last_users(graph: torch.fx.Graph) -> dict[torch.fx.Node, list[torch.fx.Node]]:
    """{node: the values whose last reader it is}, as `torch.fx.Interpreter` frees them."""
    last_use: dict[torch.fx.Node, torch.fx.Node] = {}
    for node in reversed(graph.nodes):
        for read in node.all_input_nodes:
            last_use.setdefault(read, node)
    freed: dict[torch.fx.Node, list[torch.fx.Node]] = {}
    for value, user in last_use.items():
        if user.op != "output":
            freed.setdefault(user, []).append(value)
    return freed


def output_leaves(output: Any) -> list:
    """The values a model's output holds, as `jax.tree_util.tree_leaves` lists jaxport's."""
    return [to_numpy(t) if isinstance(t, torch.Tensor) else t for t in torch.utils._pytree.tree_leaves(output)
            if isinstance(t, (torch.Tensor, int, float, bool))]


def _numpy_copy(value: Any) -> Any:
    """A reference value as NumPy arrays that own their memory (tuples and lists kept)."""
    if isinstance(value, torch.Tensor):
        return np.array(to_numpy(value), copy=True)
    if isinstance(value, (tuple, list)):
        return type(value)(_numpy_copy(v) for v in value)
    return value
