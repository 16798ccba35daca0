"""One step of a Hugging Face causal LM over an explicit cache, as a module `torch.export` traces.

`from_causal_lm` exports this module once (batch and new-token count symbolic) and converts it;
prefill and decode are two JAX traces of that one program. transformers is imported inside the
methods that use it: it is an optional dependency (`jaxport[hf]`).
"""

from __future__ import annotations

import functools
from typing import Any

import torch

from ..errors import InputError
from ..frontends.hugging_face import grouped_query_attention


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
        #: Each layer's (key heads, key head size, value heads, value head size), as it caches
        #: them, and the dtype it caches in (under autocast, if the caller traces under it).
        self.layer_shapes, self.cache_dtype = _cached_shapes(model)

    def cache_shapes(self, batch: int) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
        """Each layer's key and value shapes, `[batch, heads, max_length, head size]`."""
        return [((batch, kh, self.max_length, kd), (batch, vh, self.max_length, vd))
                for kh, kd, vh, vd in self.layer_shapes]

    def _static_cache(self, length: torch.Tensor, keys: list, values: list) -> Any:
        from transformers.cache_utils import StaticCache, StaticLayer, StaticSlidingWindowLayer

        cache = StaticCache(config=self.text_config, max_cache_len=self.max_length)
        if len(cache.layers) != len(keys):
            raise InputError(f"{type(self.model).__name__}: its static cache has {len(cache.layers)} layers, "
                             f"but {len(keys)} layers cache keys and values")
        # The tokens already cached, as a size torch.export can reason about: code such as MPT's
        # `max(0, 1 - (T + seen))` then stays static instead of branching on a tensor's value.
        seen = length.item()
        torch._check(seen >= 0)
        torch._check(seen <= self.max_length)
        for i, layer in enumerate(cache.layers):
            if type(layer) not in (StaticLayer, StaticSlidingWindowLayer):
                raise InputError(f"{type(self.model).__name__}: jaxport.from_causal_lm supports attention "
                                 f"layers with a key/value cache; layer {i} is a {type(layer).__name__}")
            layer = cache.layers[i] = _step_layer_class()(self.max_length)
            layer.seen = seen
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


def _cached_shapes(model: torch.nn.Module) -> tuple[list[tuple[int, int, int, int]], torch.dtype]:
    """Each layer's (key heads, key head size, value heads, value head size), read from what the
    model caches in one forward of two tokens: multi-query, grouped-query and latent attention
    (keys and values of different sizes) and layers unlike their neighbours all as they are,
    not as the config's head counts would have them."""
    from transformers.cache_utils import DynamicCache, DynamicLayer

    name = type(model).__name__
    with torch.no_grad():
        out = model(input_ids=torch.zeros(1, 2, dtype=torch.long), use_cache=True)
    cache = getattr(out, "past_key_values", None)
    if not isinstance(cache, DynamicCache):
        raise InputError(f"{name}: jaxport.from_causal_lm needs a model that returns a key/value cache "
                         f"(DynamicCache); it returned {type(cache).__name__}")
    shapes = []
    for i, layer in enumerate(cache.layers):
        keys, values = getattr(layer, "keys", None), getattr(layer, "values", None)
        if not isinstance(layer, DynamicLayer) or keys is None or keys.ndim != 4 or values.ndim != 4:
            raise InputError(f"{name}: jaxport.from_causal_lm supports attention layers with a key/value "
                             f"cache; layer {i} caches a {type(layer).__name__}")
        shapes.append((keys.shape[1], keys.shape[-1], values.shape[1], values.shape[-1]))
    return shapes, cache.layers[0].keys.dtype


@functools.cache
def _step_layer_class() -> type:
    """transformers' `StaticLayer` whose `get_seq_length` is the step's token count as a size
    (an unbacked SymInt) rather than a tensor: the length is only known at run time, but code that
    sizes or slices with it needs a number torch.export can bound."""
    from transformers.cache_utils import StaticLayer

    class StepLayer(StaticLayer):
        seen: Any = 0

        def update(self, key_states, value_states, *args, **kwargs):
            out = super().update(key_states, value_states, *args, **kwargs)
            self.seen = self.seen + key_states.shape[-2]
            return out

        def get_seq_length(self):
            return self.seen

    return StepLayer
