"""What an FX node of an exported graph says about itself: where it came from in the user's code,
the shape and dtype torch recorded for it (with torch's known fake-kernel errors put right), and
the size symbols of the inputs."""

from __future__ import annotations

import operator
import os
import re
from typing import Any

import sympy
import torch
from torch.export import ExportedProgram
from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols
from torch.utils._sympy.value_ranges import bound_sympy

from ... import dtypes
from ...ir import Input, TensorSpec

#: Higher-order ops whose body runs inline (a grad-mode or autocast region): op -> argument position
#: of the body.
INLINED_HOPS = {"wrap_with_set_grad_enabled": 1, "wrap_with_autocast": 4}

_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<fn>\S+)\n\s*(?P<code>[^\n]*)')
_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep


def source(node: torch.fx.Node) -> str:
    """The innermost frame outside torch itself: 'model.py:12 in forward: x = a + b'."""
    trace = node.meta.get("stack_trace") or ""
    frames = list(_FRAME.finditer(trace))
    if not frames:
        return ""
    outside_torch = [f for f in frames if not f["file"].startswith(_TORCH_DIR)]
    f = (outside_torch or frames)[-1]
    return f"{f['file']}:{f['line']} in {f['fn']}: {f['code'].strip()}"


def module_path(node: torch.fx.Node) -> str:
    stack = node.meta.get("nn_module_stack") or {}
    if not stack:
        return ""
    path, _type = list(stack.values())[-1]
    return re.sub(r"^L\['self'\]\.?", "", str(path))


def value_dependent(val) -> bool:
    """Whether a tensor in `val` has a shape torch.export could only learn by running the op."""
    if isinstance(val, torch.Tensor):
        return bool(free_unbacked_symbols(val))
    if isinstance(val, (tuple, list)):
        return any(value_dependent(v) for v in val)
    return False


def fixed_size(val, ranges: dict) -> int | bool | None:
    """The one value a size computed from run-time values (an unbacked SymInt or SymBool) can take
    within the graph's value ranges, or None. `max(0, 1 - (T + seen))` with `seen = length.item()`
    is always 0, but under jit `seen` is traced, and a slice starting there could not be."""
    if not isinstance(val, (torch.SymInt, torch.SymBool)) or not free_unbacked_symbols(val):
        return None
    try:
        bounds = bound_sympy(val.node.expr, ranges)
    except Exception:  # noqa: BLE001 - an expression sympy cannot bound: leave it to run
        return None
    if bounds.lower != bounds.upper or not bounds.lower.is_number:
        return None
    return bool(bounds.lower) if isinstance(val, torch.SymBool) else int(bounds.lower)


def _unique_consecutive_last_dim(node: torch.fx.Node) -> bool:
    """`unique_consecutive(x, dim=-1)`, whose recorded shapes torch 2.13's fake kernel gets wrong:
    it builds the values' shape as `x.shape[:dim] + (n,) + x.shape[dim + 1:]`, and with dim=-1
    the tail is the whole shape (rank 6 for a 3-d input), and the counts take a static size."""
    if node.target is not torch.ops.aten.unique_consecutive.default:
        return False
    dim = node.kwargs.get("dim", node.args[3] if len(node.args) > 3 else None)
    return dim == -1


def recorded_spec(node: torch.fx.Node, corrected: dict[str, tuple]) -> Any:
    """The shape and dtype torch.export recorded for `node`'s output, with the known fake-kernel
    errors above put right (their getitems too). Later nodes still carry what torch traced, so if
    it used the wrong shape the interpreter's shape check stops there rather than run on."""
    if node.target is operator.getitem and isinstance(node.args[0], torch.fx.Node):
        if node.args[0].name in corrected:
            return corrected[node.args[0].name][node.args[1]]
    spec = tensor_spec(node.meta.get("val"))
    if _unique_consecutive_last_dim(node):
        operand = tensor_spec(node.args[0].meta.get("val"))
        values, inverse, _counts = spec
        spec = (TensorSpec(operand.shape[:-1] + (None,), values.dtype), inverse, TensorSpec((None,), _counts.dtype))
        corrected[node.name] = spec
    return spec


def recorded_outputs(val) -> tuple:
    """What a `recorded=` lowering is told of its outputs (`registry.aten`): `(shape, dtype)` per
    output as torch recorded it, a None dim where the size is symbolic, None for a non-tensor."""
    spec = tensor_spec(val)
    specs = spec if isinstance(spec, tuple) else (spec,)
    return tuple(None if s is None else (s.shape, s.dtype) for s in specs)


def tensor_spec(val) -> Any:
    if isinstance(val, torch.Tensor):
        shape = tuple(d if isinstance(d, int) else None for d in val.shape)
        return TensorSpec(shape, dtypes.numpy_dtype(val.dtype))
    if isinstance(val, (list, tuple)):
        return tuple(tensor_spec(v) for v in val)
    return None


def dim_symbols(val) -> dict[int, str]:
    """{dim: torch's size symbol} for the dims of an input tensor that are a plain symbol."""
    if not isinstance(val, torch.Tensor):
        return {}
    dims = {}
    for d, size in enumerate(val.shape):
        expr = size.node.expr if isinstance(size, torch.SymInt) else None
        if expr is not None and expr.is_Symbol:
            dims[d] = str(expr)
    return dims


def dim_ranges(ep: ExportedProgram, user_inputs: list[Input]) -> dict[str, tuple[int, int | None]]:
    """(min, max) of each input size symbol from `ep.range_constraints`; max None if unbounded."""
    symbols = {s for i in user_inputs for s in i.dims.values()}
    ranges = {}
    for expr, bounds in ep.range_constraints.items():
        if str(expr) not in symbols:
            continue
        lower, upper = bounds.lower, bounds.upper  # sympy integers, or (int_)oo when unbounded
        lo = int(lower) if isinstance(lower, (int, sympy.Integer)) else 0
        hi = int(upper) if isinstance(upper, (int, sympy.Integer)) else None
        ranges[str(expr)] = (lo, hi)
    return ranges
