"""`torch._foreach_*` calls on JaxTensors, run as the per-tensor ops they stand for.

`torch.optim`'s foreach forms (`foreach=True`, the default on accelerators) update every
parameter with one `_foreach_mul_`, `_foreach_addcmul_`, ... call over lists of tensors. Each
element is the matching per-tensor ATen op (`mul_.Scalar`, `addcmul_`, ...) on the i-th
tensors and scalars, so each runs, and is compiled once seen twice, as the single-tensor form's
call would be. The element overload is found by binding the foreach arguments to each
candidate schema, by name where the names agree and by position where they do not
(`scalar` is `other`, `tensors1` is `end`).
"""

from __future__ import annotations

import functools
from typing import Any

import torch

from ..errors import OpUse, UnsupportedOpsError

PREFIX = "_foreach_"

#: Element ops whose names differ from the foreach op's, by foreach name and whether the
#: second argument is a number: `_foreach_maximum.Scalar` is a clamp, as in PyTorch's kernels.
_RENAMED = {("norm", False): "linalg_vector_norm", ("maximum", True): "clamp_min",
            ("minimum", True): "clamp_max", ("maximum_", True): "clamp_min_",
            ("minimum_", True): "clamp_max_"}


def overloads() -> list:
    """Every `_foreach_*` overload PyTorch defines."""
    found = []
    for schema in torch._C._jit_get_all_schemas():
        if schema.name.startswith("aten::" + PREFIX):
            packet = getattr(torch.ops.aten, schema.name[len("aten::"):])
            found.append(getattr(packet, schema.overload_name or "default"))
    return found


def decompositions() -> dict:
    """A decomposition table of the foreach ops into their per-tensor ops, for tracers that take
    one (AOTAutograd under `torch.compile`: a compiled `opt.step(foreach=True)`)."""
    return {overload: functools.partial(run, overload) for overload in overloads()}


def run(func, *args, **kwargs):
    """One `_foreach_*` call: its per-tensor op on each position of its lists."""
    schema = func._schema
    out_names = [a.name for a in schema.arguments if a.is_out]
    outs = [kwargs.pop(name) for name in out_names]
    named = [(a.name, value) for a, value in zip(schema.arguments, args)]
    named += [(name, value) for name, value in kwargs.items()]
    lengths = {len(value) for name, value in named if _per_element(name, value)}
    if len(lengths) != 1:
        raise RuntimeError(f"{func}: the tensor lists differ in length ({sorted(lengths)})")
    results = [_element(func, [(name, _at(name, value, i)) for name, value in named])
               for i in range(lengths.pop())]
    for out in outs:
        for target, value in zip(out, results):
            target.resize_(value.shape).copy_(value)
    if not schema.returns or outs:
        return None
    return results


def _per_element(name: str, value: Any) -> bool:
    """A list (of tensors or scalars), or the tensor of scalars of `.Tensor` overloads."""
    return isinstance(value, (list, tuple)) or (name == "scalars" and isinstance(value, torch.Tensor))


def _at(name: str, value: Any, i: int) -> Any:
    if not _per_element(name, value):
        return value
    if isinstance(value, torch.Tensor):  # `scalars` given as one tensor: the i-th as a number
        return value[i].item()
    return value[i]


def _powsum(self, ord=2, dtype=None):
    """`_foreach_powsum`'s element, sum(|x|^ord), which has no per-tensor ATen op."""
    return torch.sum(torch.abs(self if dtype is None else self.to(dtype)) ** ord)


#: Foreach ops whose elements are compositions of ATen ops, by foreach name.
_COMPOSED = {"powsum": _powsum}


def _element(func, named: list[tuple[str, Any]]):
    composed = _COMPOSED.get(func._opname[len(PREFIX):])
    if composed is not None:
        return composed(*(value for _, value in named))
    kinds = tuple(_kind_of(value) for _, value in named)
    overload, names, writes_back = _element_overload(func, tuple(name for name, _ in named), kinds)
    result = overload(**{name: value for name, (_, value) in zip(names, named) if name is not None})
    if writes_back:
        return named[0][1].copy_(result)
    return result


def _kind_of(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return "tensor"
    if isinstance(value, (bool, int, float, complex)):
        return "number"
    return "other"


@functools.cache
def _element_overload(func, names: tuple[str, ...], kinds: tuple[str, ...]):
    """The per-tensor overload taking arguments of these kinds, the name each foreach argument
    binds to in it, and whether its result is to be written into the first argument (an
    in-place foreach op whose element op has no in-place form: `maximum`)."""
    base = func._opname[len(PREFIX):]
    takes_number = len(kinds) > 1 and kinds[1] == "number"
    base = _RENAMED.get((base, takes_number), base)
    candidates = [(base, False)] + ([(base[:-1], True)] if base.endswith("_") else [])
    for name, writes_back in candidates:
        packet = getattr(torch.ops.aten, name, None)
        for overload_name in packet.overloads() if packet is not None else ():
            overload = getattr(packet, overload_name)
            bound = _bind(overload._schema, names, kinds)
            if bound is not None:
                return overload, bound, writes_back
    raise UnsupportedOpsError([OpUse(str(func), "", "", f"no per-tensor aten.{base} overload takes "
                                                         f"({', '.join(kinds)})")])


def _bind(schema, names: tuple[str, ...], kinds: tuple[str, ...]) -> tuple[str | None, ...] | None:
    """Each foreach argument's name in `schema` (None for a None it can drop), or None when
    the schema does not take them."""
    arguments = [a for a in schema.arguments if not a.is_out]
    if any(a.is_out for a in schema.arguments):
        return None
    by_name = {a.name: a for a in arguments}
    bound: list[str | None] = []
    for position, (name, kind) in enumerate(zip(names, kinds)):
        argument = by_name.get(name)
        if argument is None and position < len(arguments) and arguments[position].name not in names:
            argument = arguments[position]
        if argument is None:
            if kind == "other":  # an unset optional (dtype=None) the element op need not have
                bound.append(None)
                continue
            return None
        if not _accepts(argument.type, kind):
            return None
        bound.append(argument.name)
    missing = [a for a in arguments if a.name not in bound and not a.has_default_value()
               and not isinstance(a.type, torch.OptionalType)]
    return None if missing else tuple(bound)


def _accepts(jit_type, kind: str) -> bool:
    if isinstance(jit_type, torch.OptionalType):
        return kind == "other" or _accepts(jit_type.getElementType(), kind)
    if isinstance(jit_type, torch.TensorType):
        return kind == "tensor"
    if isinstance(jit_type, (torch.NumberType, torch.FloatType, torch.IntType, torch.BoolType,
                             torch.ComplexType)):
        return kind == "number"
    return kind == "other"
