"""Where a parameter goes on a device mesh, by its name: the rules `jaxport.sharding` places with.

A rule is `(regex, spec)`; `partition_spec` gives a parameter's `PartitionSpec` from an ordered list
of them (the first `PartitionSpec` rule whose regex matches the name, refined by every matching
`ShardLargest`). This is the vocabulary alone, with nothing placed: `jaxport.sharding` places
arrays by it (and holds the presets, `fsdp()`, `tensor_parallel()`), and `JaxModel.load_weights`
reads each device's share of a checkpoint by it.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping
from typing import TypeVar

import numpy as np
from jax.sharding import AbstractMesh, AxisType, Mesh, PartitionSpec

from .errors import JaxportError

P = PartitionSpec
AnyMesh = Mesh | AbstractMesh
M = TypeVar("M", Mesh, AbstractMesh)

#: Parameters with fewer elements than this stay replicated under `fsdp()`: below 64K
#: values (256 KiB in float32), biases and norm scales of any real model, gathering them
#: every step costs more in latency than their copies cost in memory.
FSDP_MIN_SIZE = 2**16


class ShardingError(JaxportError, ValueError):
    """A sharding rule cannot apply: an axis the mesh lacks, a spec longer than the
    parameter's rank, or a dimension the mesh axis does not divide."""


@dataclasses.dataclass(frozen=True)
class ShardLargest:
    """Shard a parameter's largest dimension that is still free and divisible by `axis`'s size.

    The FSDP placement: each device keeps 1/n of each parameter (and of its optimizer
    state); XLA gathers a parameter where it is used. Parameters smaller than `min_size`
    elements, or with no free divisible dimension, keep the placement they had.
    """

    axis: str = "data"
    min_size: int = FSDP_MIN_SIZE

    def refine(self, shape: tuple[int, ...], spec: PartitionSpec, sizes: Mapping[str, int]) -> PartitionSpec:
        """`spec`, the placement a parameter of `shape` has so far, with `axis` on its largest free
        dimension that `sizes[axis]` (the mesh axis's size) divides; `spec` itself when it uses
        `axis` already, the parameter has fewer than `min_size` elements, or no dimension fits."""
        entries = list(spec) + [None] * (len(shape) - len(spec))
        if self.axis in axes_of(spec) or int(np.prod(shape, dtype=np.int64)) < self.min_size:
            return spec
        free = [i for i, entry in enumerate(entries) if entry is None and shape[i] % sizes[self.axis] == 0]
        if not free:
            return spec
        best = max(free, key=lambda i: (shape[i], -i))  # the largest; the first of equals
        entries[best] = self.axis
        return P(*entries)


Spec = PartitionSpec | ShardLargest | None
Rule = tuple[str, Spec]


class Rules(tuple):
    """An ordered tuple of `(regex, spec)` rules; `+` concatenates with rules or a list of them."""

    def __new__(cls, rules: Iterable[Rule] = ()):
        return super().__new__(cls, (_checked_rule(rule) for rule in rules))

    def __add__(self, other: Iterable[Rule]) -> Rules:
        return Rules((*self, *Rules(other)))

    def __radd__(self, other: Iterable[Rule]) -> Rules:
        return Rules((*Rules(other), *self))

    def __repr__(self) -> str:
        return f"Rules({list(self)!r})"


def _checked_rule(rule) -> Rule:
    if not (isinstance(rule, tuple) and len(rule) == 2 and isinstance(rule[0], str)):
        raise ShardingError(f"a sharding rule is (regex, PartitionSpec); got {rule!r}")
    pattern, spec = rule
    if spec is not None and not isinstance(spec, (PartitionSpec, ShardLargest)):
        raise ShardingError(f"rule {pattern!r}: the spec must be a PartitionSpec (or fsdp()'s "
                            f"ShardLargest, or None to replicate); got {spec!r}")
    try:
        re.compile(pattern)
    except re.error as e:
        raise ShardingError(f"rule {pattern!r} is not a valid regex: {e}") from None
    return pattern, spec


def axes_of(spec: PartitionSpec) -> list[str]:
    """The mesh axes `spec` names, in order."""
    axes: list[str] = []
    for entry in spec:
        if entry is None:
            continue
        axes.extend(entry if isinstance(entry, tuple) else (entry,))
    return axes


def _rule_axes(spec: Spec) -> list[str]:
    if isinstance(spec, ShardLargest):
        return [spec.axis]
    return axes_of(spec) if spec is not None else []


def auto_axes(mesh: M) -> M:
    """`mesh` with every axis `Auto`: placements propagate through the model (GSPMD/Shardy).

    `jax.make_mesh` makes `Explicit` axes by default, where shardings are part of the
    types and an op whose output sharding is ambiguous (the embedding's gather of
    batch-sharded token ids) must name it; jaxport's lowerings leave that to XLA.
    """
    if all(t == AxisType.Auto for t in mesh.axis_types):
        return mesh
    return mesh.update(axis_types=(AxisType.Auto,) * len(mesh.axis_names))


def validate(rules: Rules, mesh: AnyMesh) -> None:
    """Refuse a rule that names an axis `mesh` lacks."""
    names = set(mesh.axis_names)
    for pattern, spec in rules:
        missing = [axis for axis in _rule_axes(spec) if axis not in names]
        if missing:
            raise ShardingError(
                f"rule {pattern!r} ({spec!r}) names mesh axis {missing[0]!r}, but the mesh has axes "
                f"{tuple(mesh.axis_names)}: build the mesh with that axis (of size 1 to disable it) "
                "or pass the preset axis=..."
            )


def _check_fits(name: str, shape: tuple[int, ...], spec: PartitionSpec, pattern: str | None,
                sizes: Mapping[str, int]) -> None:
    source = f" from rule {pattern!r}" if pattern is not None else ""
    if len(spec) > len(shape):
        raise ShardingError(f"'{name}' has shape {shape} but its spec {spec}{source} has {len(spec)} "
                            "entries: a rule meant for another parameter matched it")
    for dim, entry in enumerate(spec):
        if entry is None:
            continue
        axes = entry if isinstance(entry, tuple) else (entry,)
        size = int(np.prod([sizes[a] for a in axes]))
        if shape[dim] % size:
            raise ShardingError(
                f"cannot shard '{name}' (shape {shape}) as {spec}{source}: dimension {dim} ({shape[dim]}) "
                f"is not divisible by mesh axis {entry!r} (size {size}). Put a rule that replicates it "
                f"first, e.g. ({re.escape(name)!r}, PartitionSpec()), or pick a mesh whose axis divides it"
            )


def partition_spec(name: str, shape: tuple[int, ...], rules: Iterable[Rule], mesh: AnyMesh) -> PartitionSpec:
    """The spec `rules` give parameter `name` of `shape` on `mesh` (see the module docstring)."""
    rules = Rules(rules)
    sizes = dict(mesh.shape)
    spec, source = P(), None
    for pattern, rule_spec in rules:
        if not isinstance(rule_spec, ShardLargest) and re.search(pattern, name):
            spec, source = (rule_spec if rule_spec is not None else P()), pattern
            break
    _check_fits(name, tuple(shape), spec, source, sizes)
    for pattern, rule_spec in rules:
        if isinstance(rule_spec, ShardLargest) and re.search(pattern, name):
            spec = rule_spec.refine(tuple(shape), spec, sizes)
    return spec
