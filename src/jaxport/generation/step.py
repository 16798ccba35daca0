"""One step of a Hugging Face causal LM over an explicit cache, as a module `torch.export` traces.

`from_causal_lm` exports this module once (batch and new-token count symbolic) and converts it;
prefill and decode are two JAX traces of that one program. transformers is imported inside the
functions that use it: it is an optional dependency (`jaxport[hf]`).
"""

from __future__ import annotations

import functools
from typing import Any

import torch

from ..errors import InputError
from ..frontends.hugging_face import grouped_query_attention

#: What a layer of each kind caches, by transformers' dynamic cache layer class name: the state's
#: name in the layer's dict and where its slot axis is (keys and values `[B, heads, L, size]`,
#: a sparse-attention indexer's keys `[B, L, size]`). Layers that share another's cache cache nothing.
#: Names in sorted order, as JAX orders a dict's keys: the exported program expects that order.
_STATES = {
    "DynamicLayer": {"keys": 2, "values": 2},
    "DynamicSlidingWindowLayer": {"keys": 2, "values": 2},
    "DynamicIndexedLayer": {"indexer_keys": 1, "keys": 2, "values": 2},
    "DummyLayer": {},
}


class CausalLMStep(torch.nn.Module):
    """One step of a Hugging Face causal LM over an explicit, preallocated cache:
    `(input_ids [B, T], attention_mask [B, L], position_ids [B, T], length [], states) ->
    (logits [B, T, V], states)`, with `states` one dict of tensors per layer (see `_STATES`:
    `keys` and `values` `[B, kv_heads, L, head_dim]`, a DSA indexer's `indexer_keys`
    `[B, L, size]`, nothing for a layer that reads another's), of which slots
    `length .. length + T` get the new tokens.

    transformers' own `StaticCache` layers do the writing (`index_copy` at `arange(T) + length`)
    and the model's own mask code builds each layer's 4-D mask from the 2-D slot mask (1 where a
    slot holds a token, 0 for padding), so full, sliding-window and hybrid models need nothing of
    their own. The cache is built anew in every call around the tensors passed in, and written
    into copies of them: `torch.export` then sees plain inputs and outputs, no buffers or
    constants mutated. Sliding-window layers keep all L slots, masked to their window:
    transformers' rolling `StaticSlidingWindowLayer` branches on a Python int and so cannot be
    exported as one step.
    """

    def __init__(self, model: torch.nn.Module, max_length: int):
        super().__init__()
        self.model = model
        self.max_length = max_length
        self.text_config = model.config.get_text_config()
        #: Each layer's states as it caches them ({name: shape without the batch, slots included}),
        #: and the dtype it caches in (under autocast, if the caller traces under it).
        self.layer_states, self.cache_dtype = _cached_states(model, max_length)

    def cache_shapes(self, batch: int) -> list[dict[str, tuple[int, ...]]]:
        """Each layer's states' shapes for `batch` rows."""
        return [{name: (batch, *shape) for name, shape in layer.items()} for layer in self.layer_states]

    def _static_cache(self, length: torch.Tensor, states: list[dict]) -> Any:
        from transformers.cache_utils import (
            StaticCache,
            StaticIndexedLayer,
            StaticLayer,
            StaticSlidingWindowLayer,
        )

        cache = StaticCache(config=self.text_config, max_cache_len=self.max_length)
        if len(cache.layers) != len(states):
            raise InputError(f"{type(self.model).__name__}: its static cache has {len(cache.layers)} layers, "
                             f"but it cached {len(states)}")
        # The tokens already cached, as a size torch.export can reason about: code such as MPT's
        # `max(0, 1 - (T + seen))` then stays static instead of branching on a tensor's value.
        seen = length.item()
        torch._check(seen >= 0)
        torch._check(seen <= self.max_length)
        for i, (layer, state) in enumerate(zip(cache.layers, states)):
            if not state:
                continue  # a layer that caches nothing keeps transformers' own placeholder
            if type(layer) not in (StaticLayer, StaticSlidingWindowLayer, StaticIndexedLayer):
                raise InputError(f"{type(self.model).__name__}: jaxport.from_causal_lm supports attention "
                                 f"layers with a key/value cache; layer {i} is a {type(layer).__name__}")
            indexed = "indexer_keys" in state
            layer = cache.layers[i] = _step_layer_class(StaticIndexedLayer if indexed else StaticLayer)(
                self.max_length)
            layer.seen = seen
            k, v = state["keys"].clone(), state["values"].clone()
            layer.keys, layer.values = k, v
            layer.dtype, layer.device = k.dtype, k.device
            layer.batch_size, layer.num_heads = k.shape[:2]
            layer.k_head_dim, layer.v_head_dim = k.shape[-1], v.shape[-1]
            layer.cumulative_length = length.clone()  # every layer adds T to its own counter
            layer.is_initialized = True
            if indexed:
                layer.indexer_keys = state["indexer_keys"].clone()
                layer.indexer_dtype, layer.indexer_device = layer.indexer_keys.dtype, layer.indexer_keys.device
                layer.indexer_cumulative_length = length.clone()
                layer.is_indexer_initialized = True
        return cache

    def forward(self, input_ids, attention_mask, position_ids, length, states):
        cache = self._static_cache(length, states)
        with grouped_query_attention():
            out = self.model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                             past_key_values=cache, use_cache=True)
        return out.logits, [{name: getattr(layer, name) for name in state}
                            for layer, state in zip(cache.layers, states)]


def _cached_states(model: torch.nn.Module, max_length: int) -> tuple[list[dict[str, tuple[int, ...]]], torch.dtype]:
    """Each layer's states ({name: shape without the batch, `max_length` slots}), read from what
    the model caches in one forward of two tokens: multi-query, grouped-query and latent
    attention (keys and values of different sizes), indexers, shared layers and layers unlike
    their neighbours all as they are, not as the config's head counts would have them."""
    from transformers.cache_utils import DynamicCache

    name = type(model).__name__
    with torch.no_grad():
        out = model(input_ids=torch.zeros(1, 2, dtype=torch.long), use_cache=True)
    cache = getattr(out, "past_key_values", None)
    if not isinstance(cache, DynamicCache):
        raise InputError(f"{name}: jaxport.from_causal_lm needs a model that returns a key/value cache "
                         f"(DynamicCache); it returned {type(cache).__name__}")
    layers, dtype = [], None
    for i, layer in enumerate(cache.layers):
        kind = type(layer).__name__
        if kind not in _STATES:
            raise InputError(f"{name}: jaxport.from_causal_lm supports attention layers with a key/value "
                             f"cache; layer {i} caches a {kind}")
        if getattr(layer, "indexer_position_ids", None) is not None:
            raise InputError(f"{name}: layer {i}'s indexer keeps position ids, which from_causal_lm does not carry")
        states = {}
        for state, slot_axis in _STATES[kind].items():
            tensor = getattr(layer, state, None)
            if not isinstance(tensor, torch.Tensor) or tensor.ndim <= slot_axis or tensor.shape[slot_axis] != 2:
                raise InputError(f"{name}: layer {i} ({kind}) cached no {state} of two tokens")
            shape = list(tensor.shape[1:])
            shape[slot_axis - 1] = max_length
            states[state] = tuple(shape)
            dtype = dtype or tensor.dtype
        layers.append(states)
    if dtype is None:
        raise InputError(f"{name}: no layer of it caches keys and values")
    return layers, dtype


@functools.cache
def _step_layer_class(base: type) -> type:
    """transformers' static layer `base` whose `get_seq_length` is the step's token count as a size
    (an unbacked SymInt) rather than a tensor: the length is only known at run time, but code
    that sizes or slices with it needs a number torch.export can bound."""

    class StepLayer(base):
        seen: Any = 0

        def update(self, key_states, value_states, *args, **kwargs):
            out = super().update(key_states, value_states, *args, **kwargs)
            self.seen = self.seen + key_states.shape[-2]
            return out

        def get_seq_length(self):
            return self.seen

    StepLayer.__name__ = StepLayer.__qualname__ = f"Step{base.__name__}"
    return StepLayer
