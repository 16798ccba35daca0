"""What an ATen overload's schema says, asked in one place by both torch frontends.

The torch.export frontend and the eager frontend (`jaxport.tensor`) need the same facts about
an op: which argument an in-place overload writes and which functional overload computes the
same thing, whether it returns a view, which keyword arguments a lowering never sees, whether
PyTorch fills its `dtype=` from the output, and what a graph names it. Each answer is worked out
once per overload.
"""

from __future__ import annotations

import functools
from typing import Any

import torch

#: Keyword arguments that say where or how a tensor is stored, never what it holds: lowerings
#: never see them.
PLACEMENT_KWARGS = frozenset({"layout", "device", "pin_memory", "memory_format", "non_blocking"})

#: Keyword arguments a factory's functional overload has and its .out overload does not.
_FACTORY_KWARGS = frozenset({"dtype", "layout", "device", "pin_memory"})


def op_name(target) -> str:
    """The registry key of an FX call target: 'aten.add.Tensor', 'operator.getitem', ..."""
    if isinstance(target, (torch._ops.OpOverload, torch._ops.HigherOrderOperator)):
        return str(target)
    module = getattr(target, "__module__", None) or ""
    if module in ("_operator", "operator"):
        module = "operator"
    return f"{module}.{getattr(target, '__name__', repr(target))}"


def returns_view(op) -> bool:
    """Whether the overload's first result aliases an input (a view: `aten.slice.Tensor`)."""
    if not isinstance(op, torch._ops.OpOverload):
        return False
    returns = op._schema.returns
    return bool(returns) and returns[0].alias_info is not None


@functools.cache
def fills_dtype(op) -> bool:
    """Whether the overload takes a keyword-only `dtype=` that PyTorch defaults from the output:
    lowerings get it filled from the recorded result instead of guessing torch's defaults."""
    return isinstance(op, torch._ops.OpOverload) and any(
        a.name == "dtype" and a.kwarg_only for a in op._schema.arguments)


@functools.cache
def written_argument(op) -> int | None:
    """The position of the argument an in-place overload writes (`self` of `add_`), else None."""
    if not isinstance(op, torch._ops.OpOverload):
        return None
    for i, a in enumerate(op._schema.arguments):
        if a.alias_info is not None and a.alias_info.is_write and not a.kwarg_only:
            return i
    return None


def updated_arguments(op) -> list[int]:
    """The positions of every argument the overload writes (running statistics included)."""
    return [i for i, a in enumerate(op._schema.arguments) if a.alias_info is not None and a.alias_info.is_write]


@functools.cache
def out_arguments(op) -> tuple[str, ...]:
    """The names of an `.out` overload's written keyword arguments (`out`, or `values`/`indices`)."""
    return tuple(a.name for a in op._schema.arguments if a.kwarg_only and a.alias_info is not None
                 and a.alias_info.is_write)


@functools.cache
def functional_variant(op, suffix: str = "") -> Any:
    """For an in-place overload like `aten.add_.Tensor`, its functional twin `aten.add.Tensor`:
    the overload of the op without `_` that takes the same arguments in the same order (the
    names differ at times: `pow_.Scalar` is `pow.Tensor_Scalar`). `suffix="_functional"`
    looks for the op named so instead (`normal_` is `normal_functional`: `normal` itself
    draws from mean and std tensors)."""
    for candidate in _functional_candidates(op, suffix):
        if _arguments(candidate) == _arguments(op):
            return candidate
    return None


@functools.cache
def functional_variant_by_name(op) -> Any:
    """Like `functional_variant`, also when the twin orders the arguments differently
    (`polygamma_(self, n)` is `polygamma(n, self)`): call it with keyword arguments."""
    for candidate in _functional_candidates(op):
        if sorted(_arguments(candidate)) == sorted(_arguments(op)):
            return candidate
    return None


def _functional_candidates(op, suffix: str = "") -> list:
    if not isinstance(op, torch._ops.OpOverload) or not op._schema.is_mutable:
        return []
    name = op._opname
    if not name.endswith("_") or name.startswith("_"):
        return []
    packet = getattr(torch.ops.aten, name[:-1] + suffix, None)
    if packet is None:
        return []
    same_name = getattr(packet, op._overloadname, None)
    others = [getattr(packet, n) for n in packet.overloads() if n != op._overloadname]
    return ([same_name] if same_name is not None else []) + others


def _arguments(op) -> list[tuple[str, str]]:
    # The written tensor is `self` in-place and at times `input` in the twin (`dropout_`).
    return [("self" if a.name == "input" else a.name, str(a.type)) for a in op._schema.arguments]


@functools.cache
def functional_twin(op) -> Any:
    """For an op that updates some inputs besides computing outputs (`_native_batch_norm_legit`
    updates the running statistics), PyTorch's functional twin that returns the updates."""
    packet = getattr(torch.ops.aten, op._opname + "_functional", None)
    return getattr(packet, op._overloadname, None) if packet is not None else None


@functools.cache
def out_variant_source(op) -> Any:
    """For `aten.add.out`, the overload with the same inputs and no `out`: `aten.add.Tensor`.

    For a factory (`aten.ones.out`), the overload that also takes `dtype=` and placement
    (`aten.ones.default`); the out tensor supplies the dtype.
    """
    outs = set(out_arguments(op))

    def inputs(candidate):
        return [(a.name, str(a.type)) for a in candidate._schema.arguments
                if a.name not in outs and not (a.kwarg_only and a.name in _FACTORY_KWARGS)]

    packet = getattr(torch.ops.aten, op._opname)
    for name in packet.overloads():
        candidate = getattr(packet, name)
        if candidate is not op and not out_arguments(candidate) and inputs(candidate) == inputs(op):
            return candidate
    return None


def with_defaults(op, args: tuple) -> tuple:
    """`args` with the trailing positional arguments PyTorch's dispatcher dropped because they
    equal their defaults (Dropout calls `bernoulli_(0.5)` as `bernoulli_()`): the functional
    twin may have no default for them (`bernoulli.p`)."""
    filled = list(args)
    for argument in [a for a in op._schema.arguments if not a.kwarg_only][len(args):]:
        if not argument.has_default_value():
            break
        filled.append(argument.default_value)
    return tuple(filled)
