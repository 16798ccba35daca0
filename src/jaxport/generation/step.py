"""One step of a Hugging Face causal LM over an explicit cache, as a module `torch.export` traces.

`from_causal_lm` exports this module once (batch and new-token count symbolic) and converts it;
prefill and decode are two JAX traces of that one program. transformers is imported inside the
methods that use it: it is an optional dependency (`jaxport[hf]`).
"""

from __future__ import annotations

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
