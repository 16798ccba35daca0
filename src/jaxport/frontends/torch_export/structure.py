"""The model's own input and output structure over the program's flat values: `input_flattener`
takes (args, kwargs) as the module was exported with them, `output_builder` rebuilds torch's
outputs (Hugging Face outputs as dicts, caches as nested arrays)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ...errors import InputError
from ...ir import Input
from .. import hugging_face


def child_specs(spec) -> list:
    """The child specs of a pytree spec: `TreeSpec.children()` from torch 2.10 on, which deprecates
    the `children_specs` field torch 2.9 has instead."""
    return spec.children() if hasattr(spec, "children") else spec.children_specs


def output_builder(spec) -> Callable[[list], Any]:
    """A function rebuilding torch's output structure from flat leaves, dataclass outputs as dicts."""

    def build(spec, leaves):
        if spec.is_leaf():
            return next(leaves)
        children = [build(child, leaves) for child in child_specs(spec)]
        if hugging_face.is_described(spec):  # a cache: its arrays in the structure it holds them
            return hugging_face.arrays(spec.context, children)
        if spec.type in (tuple, list):
            return spec.type(children)
        if spec.type is dict or isinstance(spec.context, (list, tuple)) and all(
            isinstance(k, str) for k in spec.context
        ):
            keys = spec.context
            return dict(zip(keys, children))
        if spec.type is type(None):
            return None
        if hasattr(spec.type, "_fields"):  # namedtuple
            return spec.type(*children)
        return tuple(children)

    return lambda flat: build(spec, iter(flat))


def input_flattener(in_spec, user_inputs: list[Input]) -> Callable[[tuple, dict], list]:
    """A function turning (args, kwargs) into the flat inputs the program takes, with clear errors."""
    args_spec, kwargs_spec = child_specs(in_spec)
    kwarg_names = list(kwargs_spec.context) if kwargs_spec.context else []
    n_args = args_spec.num_children

    def flatten(args: tuple, kwargs: dict) -> list:
        names = [u.name for u in user_inputs]
        if len(args) != n_args:
            raise InputError(
                f"expected {n_args} positional input(s), got {len(args)}; the model's inputs are "
                f"{', '.join(names)}"
            )
        unknown = sorted(set(kwargs) - set(kwarg_names))
        missing = [k for k in kwarg_names if k not in kwargs]
        if unknown or missing:
            parts = []
            if missing:
                parts.append(f"missing keyword input(s) {', '.join(missing)}")
            if unknown:
                parts.append(f"unexpected keyword input(s) {', '.join(unknown)}")
            raise InputError(f"{'; '.join(parts)}; the model was exported with {kwarg_names}")
        values = list(args) + [kwargs[k] for k in kwarg_names]
        where = [f"input {i}" for i in range(n_args)] + [f"input '{k}'" for k in kwarg_names]
        specs = child_specs(args_spec) + child_specs(kwargs_spec)
        return [leaf for v, s, w in zip(values, specs, where) for leaf in _flatten_like(v, s, w)]

    return flatten


def _flatten_like(value: Any, spec, where: str) -> list:
    """`value`'s leaves in the order of `spec`, the structure it was exported with. A Hugging Face
    cache may come as the torch object or as the nested arrays a converted model returns."""
    if spec.is_leaf():
        return [value]
    if hugging_face.is_described(spec) and not isinstance(value, spec.type):
        return hugging_face.leaves_from_arrays(spec.context, value, spec.num_children, where)
    if spec.type in (list, tuple, dict) and type(value) is spec.type:
        children, context = torch.utils._pytree.SUPPORTED_NODES[spec.type].flatten_fn(value)
        if len(children) == spec.num_children and (spec.type is not dict or context == spec.context):
            return [
                leaf for i, (c, s) in enumerate(zip(children, child_specs(spec)))
                for leaf in _flatten_like(c, s, f"{where}[{context[i]!r}]" if spec.type is dict else f"{where}[{i}]")
            ]
    leaves, got = torch.utils._pytree.tree_flatten(value)
    if got != spec:
        raise InputError(f"{where} has structure {got}, but the model was exported with {spec}")
    return leaves
