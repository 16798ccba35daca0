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
back as an input. This module never imports transformers itself: it looks at
`sys.modules`, so a plain torch model never pays for it.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from typing import Any

import torch

from ..errors import InputError


def is_model(module: Any) -> bool:
    """Whether `module` is a Hugging Face `PreTrainedModel` (transformers already imported)."""
    transformers = sys.modules.get("transformers")
    return transformers is not None and isinstance(module, transformers.PreTrainedModel)


@contextlib.contextmanager
def exporting(model: torch.nn.Module, kwargs: dict | None) -> Iterator[dict]:
    """The context transformers' Dynamo exporter traces a model in; yields the keyword inputs
    to trace with (output flags such as `use_cache` move into the config for the trace)."""
    from transformers.exporters import exporter_dynamo as hf
    from transformers.exporters.utils import apply_patches, prepare_for_export

    inputs = dict(kwargs or {})
    model, inputs, output_flags = prepare_for_export(model, inputs)
    hf.register_cache_pytrees_for_model(model)
    with (apply_patches("dynamo"), hf.reset_model_state(model), hf.patch_model_config(model, output_flags),
          grouped_query_attention()):
        yield inputs


@contextlib.contextmanager
def grouped_query_attention() -> Iterator[None]:
    """transformers' SDPA attention hands grouped-query heads to `scaled_dot_product_attention`
    as they are (`enable_gqa=True`) instead of repeating each key/value head in memory first
    (`repeat_kv`), which it does under a mask because PyTorch's fused CPU/CUDA kernels need it.
    jaxport's lowering groups the query heads itself, so the exported graph should not repeat:
    repeating cost a copy of every layer's keys and values per step."""
    previous = os.environ.get(_FORCE_GQA)
    os.environ[_FORCE_GQA] = "1"
    try:
        yield
    finally:
        if previous is None:
            del os.environ[_FORCE_GQA]
        else:
            os.environ[_FORCE_GQA] = previous


_FORCE_GQA = "TRANSFORMERS_SDPA_FORCE_GQA"  # read by transformers.integrations.sdpa_attention.use_gqa_in_sdpa


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


# -- causal LMs over an explicit static cache (jaxport.from_causal_lm) ------------------------------


class CausalLMStep(torch.nn.Module):
    """One step of a Hugging Face causal LM over an explicit, preallocated key/value cache:
    `(input_ids [B, T], attention_mask [B, L], position_ids [B, T], length [], keys, values) ->
    (logits [B, T, V], keys, values)`, with one `[B, kv_heads, L, head_dim]` key and value tensor
    per layer, of which slots `length .. length + T` get the new tokens.

    transformers' own `StaticCache` does the writing (`index_copy` at `arange(T) + length`) and the
    model's own mask code builds each layer's 4-D mask from the 2-D slot mask (1 where a slot holds
    a token, 0 for padding), so full, sliding-window and hybrid models need nothing of their own.
    The cache is built anew in every call around the tensors passed in, and written into copies
    of them: `torch.export` then sees plain inputs and outputs, no buffers or constants mutated.
    Sliding-window layers keep all L slots, masked to their window: transformers' rolling
    `StaticSlidingWindowLayer` branches on a Python int and so cannot be exported as one step.
    """

    def __init__(self, model: torch.nn.Module, max_length: int):
        super().__init__()
        self.model = model
        self.max_length = max_length
        self.text_config = model.config.get_text_config()

    def cache_shapes(self, batch: int) -> list[tuple[int, int, int, int]]:
        """The `[batch, kv_heads, max_length, head_dim]` shape of each layer's keys and values."""
        from transformers.configuration_utils import get_head_shapes

        layers = self.text_config.num_hidden_layers
        heads, head_dim = get_head_shapes(self.text_config)
        heads = heads if isinstance(heads, list) else [heads] * layers
        head_dim = head_dim if isinstance(head_dim, list) else [head_dim] * layers
        return [(batch, h, self.max_length, d) for h, d in zip(heads, head_dim)]

    def _static_cache(self, length: torch.Tensor, keys: list, values: list) -> Any:
        from transformers.cache_utils import StaticCache, StaticLayer, StaticSlidingWindowLayer

        cache = StaticCache(config=self.text_config, max_cache_len=self.max_length)
        for i, layer in enumerate(cache.layers):
            if isinstance(layer, StaticSlidingWindowLayer):
                layer = cache.layers[i] = StaticLayer(self.max_length)
            elif type(layer) is not StaticLayer:
                raise InputError(f"{type(self.model).__name__}: jaxport.from_causal_lm supports attention "
                                 f"layers with a key/value cache; layer {i} is a {type(layer).__name__}")
            k, v = keys[i].clone(), values[i].clone()
            layer.keys, layer.values = k, v
            layer.dtype, layer.device = k.dtype, k.device
            layer.batch_size, layer.num_heads = k.shape[:2]
            layer.k_head_dim, layer.v_head_dim = k.shape[-1], v.shape[-1]
            layer.cumulative_length = length.clone()  # every layer adds T to its own counter
            layer.is_initialized = True
        return cache

    def forward(self, input_ids, attention_mask, position_ids, length, keys, values):
        cache = self._static_cache(length, keys, values)
        with grouped_query_attention():
            out = self.model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                             past_key_values=cache, use_cache=True)
        return out.logits, [layer.keys for layer in cache.layers], [layer.values for layer in cache.layers]
