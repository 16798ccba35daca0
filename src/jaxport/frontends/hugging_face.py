"""Hugging Face models: exported with transformers' own export helpers, caches as arrays.

transformers ships what `torch.export` needs for its models
(`transformers.exporters.exporter_dynamo`): pytree registrations for its `Cache`
classes, reversible patches for the patterns `torch.export` cannot trace, output
flags (`use_cache`, `return_dict`, ...) applied through the config, and stateful
attributes reset for the trace. jaxport uses them for every `PreTrainedModel`, so
a model converts with Hugging Face's defaults (`use_cache=True` included).

transformers flattens a cache into its tensors and keeps everything else in a
JSON-like context: `{"_t": "obj", "p": "module:Class", "s": {field: ...}}` for an
object, `{"_t": "tensor", "i": n}` for its n-th tensor. jaxport hands a cache to
JAX users as the tensor-holding part of that description, nested dicts and lists
of arrays in the structure the model gives (`DynamicCache` becomes
`{"layers": [{"keys": k, "values": v}, ...]}`), and reads the same structure
back as an input. This module imports transformers only inside the functions that need it (it is an optional
dependency, `jaxport[hf]`), and tells a Hugging Face model by `sys.modules`, so a plain torch
model never pays for it.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import Any

import torch

from ..errors import InputError
from . import transformers_adapter


def is_model(module: Any) -> bool:
    """Whether `module` is a Hugging Face `PreTrainedModel` (transformers already imported)."""
    transformers = sys.modules.get("transformers")
    return transformers is not None and isinstance(module, transformers.PreTrainedModel)


@contextlib.contextmanager
def exporting(model: torch.nn.Module, kwargs: dict | None) -> Iterator[dict]:
    """The context transformers' Dynamo exporter traces a model in; yields the keyword inputs
    to trace with (output flags such as `use_cache` move into the config for the trace)."""
    transformers_adapter.require()
    from transformers.exporters import exporter_dynamo as hf
    from transformers.exporters.utils import apply_patches, prepare_for_export

    inputs = dict(kwargs or {})
    model, inputs, output_flags = prepare_for_export(model, inputs)
    hf.register_cache_pytrees_for_model(model)
    with (apply_patches("dynamo"), hf.reset_model_state(model), hf.patch_model_config(model, output_flags),
          transformers_adapter.grouped_query_attention()):
        yield inputs


# -- caches as arrays ----------------------------------------------------------------------------


def is_described(spec: Any) -> bool:
    """Whether a pytree node's context is transformers' JSON-like object description."""
    return isinstance(spec.context, dict) and spec.context.get("_t") == "obj"


def _holds_tensors(description: Any) -> bool:
    if isinstance(description, dict):
        if description.get("_t") in ("tensor", "sym"):
            return True
        return any(_holds_tensors(v) for v in description.values())
    if isinstance(description, list):
        return any(_holds_tensors(v) for v in description)
    return False


def _fields(description: dict) -> dict:
    """The fields of an object/map description, or a plain dict's items."""
    tag = description.get("_t")
    if tag == "obj":
        return description["s"]
    if tag == "map":
        return description["v"]
    if tag == "items":
        return dict((str(k), v) for k, v in description["v"])
    return description


def arrays(description: Any, leaves: list) -> Any:
    """The tensor-holding part of a described object as nested dicts and lists over `leaves`."""
    if isinstance(description, dict):
        tag = description.get("_t")
        if tag in ("tensor", "sym"):
            return leaves[description["i"]]
        if tag == "seq":
            return [arrays(v, leaves) for v in description["v"]]
        if tag not in (None, "obj", "map", "items"):
            return None
        return {k: arrays(v, leaves) for k, v in _fields(description).items() if _holds_tensors(v)}
    if isinstance(description, list):
        return [arrays(v, leaves) if _holds_tensors(v) else None for v in description]
    return None


def leaves_from_arrays(description: Any, value: Any, count: int, where: str) -> list:
    """The inverse of `arrays`: the flat leaves of a described object given as nested dicts and
    lists, in the order the exported program takes them."""
    leaves: list = [None] * count

    def walk(desc: Any, val: Any, path: str) -> None:
        if isinstance(desc, dict) and desc.get("_t") in ("tensor", "sym"):
            leaves[desc["i"]] = val
            return
        if isinstance(desc, dict) and desc.get("_t") == "seq":
            desc = desc["v"]
        if isinstance(desc, list):
            items = [(i, d) for i, d in enumerate(desc) if _holds_tensors(d)]
            if not isinstance(val, (list, tuple)) or len(val) != len(desc):
                raise InputError(f"{path} should be a list of {len(desc)} entries, got {_describe(val)}")
            for i, d in items:
                walk(d, val[i], f"{path}[{i}]")
            return
        fields = {k: v for k, v in _fields(desc).items() if _holds_tensors(v)}
        if not isinstance(val, dict) or set(val) != set(fields):
            raise InputError(f"{path} should be a dict with keys {sorted(fields)}, got {_describe(val)}")
        for k, d in fields.items():
            walk(d, val[k], f"{path}[{k!r}]")

    walk(description, value, where)
    return leaves


def _describe(value: Any) -> str:
    if isinstance(value, dict):
        return f"a dict with keys {sorted(value)}"
    if isinstance(value, (list, tuple)):
        return f"a {type(value).__name__} of {len(value)}"
    return type(value).__name__
