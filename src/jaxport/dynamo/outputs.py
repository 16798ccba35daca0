"""How each output of a compiled graph comes back to PyTorch, worked out once.

Outputs keep no memory of the inputs': an output the graph returns straight from its inputs
(AOTAutograd's saved parameters) is that input tensor, as Inductor returns it; any other output
the trace finds to be an input's array or one returned before is copied inside the jitted
function, so no check runs per call. A size the trace knows as a number is handed back without a
device read.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import torch

from .. import dlpack

#: What each output is: one of the graph's inputs, None, a size or scalar, a tensor.
INPUT, NONE, SCALAR, TENSOR = range(4)


def output_kinds(graph_module: torch.fx.GraphModule) -> list:
    """What each output of the graph is: (dtype, device) for a tensor (JAX may hold it narrower,
    int32 for int64 when x64 is off, or elsewhere), `int`/`float`/`bool` for a size or scalar, None for None."""
    output = next(n for n in graph_module.graph.nodes if n.op == "output")
    kinds = []
    for value in output.args[0]:
        val = value.meta.get("val") if isinstance(value, torch.fx.Node) else value
        if isinstance(val, torch.Tensor):
            kinds.append((val.dtype, val.device))
        elif isinstance(val, (torch.SymInt, int)) and not isinstance(val, bool):
            kinds.append(int)
        elif isinstance(val, (torch.SymFloat, float)):
            kinds.append(float)
        elif isinstance(val, (torch.SymBool, bool)):
            kinds.append(bool)
        else:
            kinds.append(None)
    return kinds


def passed_inputs(graph_module: torch.fx.GraphModule) -> dict[int, int]:
    """{output index: argument index} for the outputs that are the graph's inputs themselves."""
    placeholders = [n for n in graph_module.graph.nodes if n.op == "placeholder"]
    output = next(n for n in graph_module.graph.nodes if n.op == "output")
    index = {node: i for i, node in enumerate(placeholders)}
    return {k: index[v] for k, v in enumerate(output.args[0]) if isinstance(v, torch.fx.Node) and v in index}


class OutputPlan:
    """Each output's (mode, detail): (INPUT, argument index), (NONE, None), (SCALAR, its Python
    type), (TENSOR, (dtype, device)); a tensor recorded on `meta` comes back on `device`, the
    graph's. `traced` runs inside the jitted function, `to_torch` on its results."""

    def __init__(self, kinds: list, passed: dict[int, int], device: torch.device):
        plan = []
        for k, kind in enumerate(kinds):
            if k in passed:
                plan.append((INPUT, passed[k]))
            elif kind is None:
                plan.append((NONE, None))
            elif kind in (int, float, bool):
                plan.append((SCALAR, kind))
            else:
                dtype, recorded = kind
                plan.append((TENSOR, (dtype, device if recorded.type == "meta" else recorded)))
        self.modes = tuple(plan)
        self.has_scalars = any(mode == SCALAR for mode, _ in plan)
        #: {static scalars: {output index: value}}: size outputs the trace knew as numbers.
        self.known: dict[tuple, dict[int, Any]] = {}

    def traced(self, outputs: list, arrays: list, statics: tuple) -> list:
        """Inside the jitted function: the arrays it returns (None for inputs, Nones and the sizes
        the trace knows, noted in `known` for `statics`), none of them an input's or another's."""
        static: dict[int, Any] = {}
        results: list = []
        seen = {id(a) for a in arrays}
        for k, ((mode, detail), value) in enumerate(zip(self.modes, outputs)):
            if mode in (INPUT, NONE):
                results.append(None)
            elif mode == SCALAR:
                if isinstance(value, jax.core.Tracer):
                    results.append(value)
                else:  # a size the trace knows: handed back without a device read
                    static[k] = value
                    results.append(None)
            else:
                value = jnp.asarray(value)
                if id(value) in seen:  # an input's array, or one returned before: a buffer of its own
                    value = jnp.array(value, copy=True)
                seen.add(id(value))
                if detail[0] == torch.bool:  # crosses back as bytes, viewed as bool by PyTorch
                    value = value.astype(jnp.bool_).astype(jnp.uint8)
                results.append(value)
        self.known[statics] = static
        return results

    def to_torch(self, outputs: list, args: list, statics: tuple) -> list:
        """The graph's outputs for PyTorch, from the jitted function's results for `args`."""
        static = self.known[statics] if self.has_scalars else None
        results = []
        for k, ((mode, detail), value) in enumerate(zip(self.modes, outputs)):
            if mode == TENSOR:
                dtype, device = detail
                tensor = dlpack.to_torch(value)
                if dtype == torch.bool:
                    tensor = tensor.view(torch.bool)
                elif tensor.dtype != dtype:  # JAX holds int64 as int32 with x64 off
                    tensor = tensor.to(dtype)
                if tensor.device != device:  # JAX without that device (a CPU jaxlib beside CUDA)
                    tensor = tensor.to(device)
                results.append(tensor)
            elif mode == INPUT:
                results.append(args[detail])
            elif mode == SCALAR:
                results.append(detail(static[k] if k in static else value))
            else:
                results.append(None)
        return results
