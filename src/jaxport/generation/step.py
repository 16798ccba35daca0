"""One step of a Hugging Face causal LM over an explicit cache, as a module `torch.export` traces.

`from_causal_lm` exports this module once (batch and new-token count symbolic) and converts it;
prefill and decode are two JAX traces of that one program. A model with recurrent or
linear-attention layers (Mamba, Jamba, Qwen3-Next, ...) runs prefill and decode through different
code in transformers (a whole-sequence scan, or one recurrent update when a previous state exists
and one token comes), and some models branch on whether the cache is empty (GIT); these are
exported twice (`split`): `CausalLMStep(..., split=True)` for prompts written into an empty
cache, `decoding=True` for one token after them. transformers is imported inside the functions
that use it: it is an optional dependency (`jaxport[hf]`).
"""

from __future__ import annotations

import inspect
from typing import Any

import torch

from ..devices import module_device
from ..errors import InputError
from ..frontends import transformers_adapter as adapter
from ..frontends.transformers_adapter import grouped_query_attention

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
#: transformers' layers that keep a recurrent layer's states (`conv_states` / `recurrent_states`,
#: a dict of them by state index, fixed shapes with no slot axis), with or without keys and values
#: of an attention beside them (`update_conv_state` / `update_recurrent_state`).
_LINEAR = {
    "LinearAttentionLayer": {},
    "LinearAttentionAndFullAttentionLayer": {"keys": 2, "values": 2},
    "LinearAttentionAndSlidingWindowAttentionLayer": {"keys": 2, "values": 2},
}
#: The one state of a model that keeps no cache (GPT-1): the tokens so far, `[B, L]`, which every
#: step runs the model over again, as transformers' `generate` does for such models.
_TOKENS = "tokens"
#: Inputs a cacheless model's `prepare_inputs_for_generation` may hand its forward besides the
#: tokens and their mask: settings, none of them a tensor of its own.
_PLAIN_GENERATION_INPUTS = frozenset({"input_ids", "attention_mask", "position_ids", "use_cache",
                                      *adapter.CACHE_NAMES, "cache_position", "logits_to_keep", "return_dict"})


class CausalLMStep(torch.nn.Module):
    """One step of a Hugging Face causal LM over an explicit, preallocated cache:
    `(input_ids [B, T], attention_mask [B, L], position_ids [B, T], length [], states) ->
    (logits [B, T, V], states)`, with `states` one dict of tensors per layer (see `_STATES`:
    `keys` and `values` `[B, kv_heads, L, head_dim]`, a DSA indexer's `indexer_keys`
    `[B, L, size]`, a recurrent layer's `conv_<i>` and `recurrent_<i>` of their own fixed shapes,
    nothing for a layer that reads another's), of which slots `length .. length + T` get the new
    tokens.

    transformers' own `StaticCache` layers do the writing (`index_copy` at `arange(T) + length`)
    and the model's own mask code builds each layer's 4-D mask from the 2-D slot mask (1 where a
    slot holds a token, 0 for padding), so full, sliding-window and hybrid models need nothing of
    their own. The cache is built anew in every call around the tensors passed in, and written
    into copies of them: `torch.export` then sees plain inputs and outputs, no buffers or
    constants mutated. A sliding-window layer whose window is shorter than L keeps only the
    tokens its next query attends to besides itself (`adapter.window_slots`; memory O(window)),
    in order, as transformers' dynamic sliding layer does, and without the branches on a Python
    count of tokens of its static one, which would fix the count in the exported program.

    A model with recurrent layers (`recurrent`), or one whose code branches on whether the cache
    holds tokens, needs two of these (`split`): `split=True` runs a prompt from an empty cache
    (`length` 0, recurrent states ignored, as transformers' prefill ignores them; a recurrent
    model gets the prompt's own `[B, T]` mask, as transformers gives it); `decoding=True` runs
    one token (T = 1) after earlier ones.
    """

    def __init__(self, model: torch.nn.Module, max_length: int, *, split: bool = False, decoding: bool = False,
                 probed: tuple[list, bool] | None = None):
        super().__init__()
        self.model = model
        self.max_length = max_length
        self.decoding = decoding
        self.text_config = model.config.get_text_config()
        #: Each layer's states as it caches them ({name: (shape without the batch, slots included,
        #: dtype)}, in the dtypes it caches in (under autocast, if the caller traces under it).
        self.layer_states, self._cross_attention = probed or _cached_states(model, max_length)
        #: Whether the model keeps no cache: each step runs it over every token so far.
        self.recomputes = [set(layer) for layer in self.layer_states] == [{_TOKENS}]
        #: Whether some layer keeps recurrent states: prefill and decode are then two programs.
        self.recurrent = any(adapter.recurrent_slot(name) for layer in self.layer_states for name in layer)
        #: Whether this is one of two programs, for a prompt into an empty cache or one token after.
        self.split = split or decoding or self.recurrent
        self._attends = any("keys" in layer for layer in self.layer_states)
        #: Whether some layer keeps only its window's tokens, fewer than `max_length` slots.
        self.windowed = any("keys" in layer and layer["keys"][0][1] < max_length for layer in self.layer_states)
        forward = inspect.signature(model.forward).parameters
        self._cache_argument = adapter.cache_argument(model)
        self._takes_positions = "position_ids" in forward
        from transformers import GenerationMixin

        # GPT-1 prepares its own inputs for generate (no position ids); the generic preparation
        # passes positions counted over the mask
        self._own_generation_inputs = (type(model).prepare_inputs_for_generation
                                       is not GenerationMixin.prepare_inputs_for_generation)

    def variant(self, *, split: bool = False, decoding: bool = False) -> CausalLMStep:
        """The same model's step as one of a split model's two programs, on the states this one
        read (the probe's forward is not run again)."""
        return CausalLMStep(self.model, self.max_length, split=split, decoding=decoding,
                            probed=(self.layer_states, self._cross_attention))

    def cache_specs(self, batch: int) -> list[dict[str, tuple[tuple[int, ...], torch.dtype]]]:
        """Each layer's states for `batch` rows: {name: (shape, dtype)}."""
        return [{name: ((batch, *shape), dtype) for name, (shape, dtype) in layer.items()}
                for layer in self.layer_states]

    def forward(self, input_ids, attention_mask, position_ids, length, states):
        if self.recomputes:
            return self._recompute(input_ids, attention_mask, length, states[0][_TOKENS])
        if self.split and not self.decoding:
            seen: Any = 0  # a prompt into an empty cache: what makes transformers' prefill code run
        else:
            # The tokens already cached, as a size torch.export can reason about: code such as MPT's
            # `max(0, 1 - (T + seen))` then stays static instead of branching on a tensor's value.
            seen = length.item()
            torch._check(seen >= (1 if self.decoding else 0))
            torch._check(seen <= self.max_length)
        cache = adapter.static_cache(self.text_config, self.max_length, states, seen, length,
                                     decoding=self.decoding, name=type(self.model).__name__)
        if self.recurrent and not self.decoding:
            # transformers gives a prompt's recurrent layers its own [B, T] mask: they zero its padding
            attention_mask = attention_mask[:, : input_ids.shape[1]]
        elif self.recurrent and not self._attends:
            attention_mask = None  # as Mamba's generate decodes: one new token is never padding
        elif self.windowed:
            # A window's keys are its slots then the T new tokens (`adapter.window_slots`): up to
            # T past the last slot's token, which transformers' mask code reads the slot mask at.
            attention_mask = torch.nn.functional.pad(attention_mask, (0, input_ids.shape[1]))
        kwargs = {"position_ids": position_ids} if self._takes_positions else {}
        if self._cross_attention:
            from transformers.cache_utils import DynamicCache, EncoderDecoderCache

            # a BERT-style decoder keeps its self-attention's cache beside an empty cross-attention one
            model_cache = EncoderDecoderCache(cache, DynamicCache())
        else:
            model_cache = cache
        with grouped_query_attention():
            out = self.model(input_ids=input_ids, attention_mask=attention_mask, use_cache=True,
                             **{self._cache_argument: model_cache}, **kwargs)
        return out.logits, [{name: adapter.layer_state(layer, name) for name in state}
                            for layer, state in zip(cache.layers, states)]

    def _recompute(self, input_ids, attention_mask, length, tokens):
        """A step of a model without a cache: the new tokens written into the token slots, the
        model run over all `L` slots (the unused ones masked, and after every real token, so a
        causal model's real positions never see them), the logits of the new tokens' slots
        read out. Inputs as the model's `generate` passes them (GPT-1's: no position ids, so
        positions count slots, as they count tokens in transformers' growing sequence)."""
        slots = torch.arange(input_ids.shape[1], device=input_ids.device) + length
        tokens = tokens.index_copy(1, slots, input_ids.to(tokens.dtype))
        kwargs = {}
        if self._takes_positions and not self._own_generation_inputs:
            # transformers' generic preparation: positions counted over the mask, padding at 1
            positions = attention_mask.long().cumsum(-1) - 1
            kwargs["position_ids"] = positions.masked_fill(attention_mask == 0, 1)
        out = self.model(input_ids=tokens.long(), attention_mask=attention_mask, **kwargs)
        return out.logits.index_select(1, slots), [{_TOKENS: tokens}]


def _cached_states(model: torch.nn.Module, max_length: int) -> tuple[list[dict[str, tuple[tuple[int, ...], torch.dtype]]], bool]:
    """Each layer's states ({name: (shape without the batch, `max_length` slots where it has
    slots, dtype)}), read from what the model caches in one forward of two tokens: multi-query,
    grouped-query and latent attention (keys and values of different sizes), indexers, recurrent
    layers' conv and scan states, shared layers and layers unlike their neighbours all as they
    are, not as the config's head counts would have them. And whether the model keeps them in
    an `EncoderDecoderCache` (a BERT-style decoder, its cross-attention cache left empty)."""
    from transformers.cache_utils import DynamicCache, EncoderDecoderCache

    name = type(model).__name__
    with torch.no_grad():
        out = model(input_ids=torch.zeros(1, 2, dtype=torch.long, device=module_device(model)), use_cache=True)
    cache = adapter.returned_cache(out)
    if cache is None and not any(hasattr(out, own) for own in _OWN_CACHES):
        _check_plain_generation_inputs(model)
        return [{_TOKENS: ((max_length,), torch.int32)}], False
    cross_attention = isinstance(cache, EncoderDecoderCache)
    if cross_attention:
        if cache.cross_attention_cache.get_seq_length():
            raise InputError(f"{name}: it cross-attends to an encoder's states, which from_causal_lm does not take")
        cache = cache.self_attention_cache
    if not isinstance(cache, DynamicCache):
        own = next((field for field in _OWN_CACHES if hasattr(out, field)), None)
        kept = f"a cache of its own ({own})" if cache is None and own else type(cache).__name__
        raise InputError(f"{name}: jaxport.from_causal_lm needs a model that returns a key/value cache "
                         f"(DynamicCache) or none; it returned {kept}")
    outside = sorted(field for field, value in vars(cache).items() if field != "layers" and _holds_tensors(value))
    if outside:
        raise InputError(f"{name}: its cache ({type(cache).__name__}) keeps states outside its layers "
                         f"({', '.join(outside)}), which from_causal_lm does not carry")
    layers = []
    for i, layer in enumerate(cache.layers):
        kind = type(layer).__name__
        if kind not in _STATES and kind not in _LINEAR:
            raise InputError(f"{name}: jaxport.from_causal_lm supports attention layers with a key/value "
                             f"cache and recurrent layers; layer {i} caches a {kind}")
        if getattr(layer, "indexer_position_ids", None) is not None:
            raise InputError(f"{name}: layer {i}'s indexer keeps position ids, which from_causal_lm does not carry")
        states = {}
        for state, slot_axis in {**_STATES.get(kind, {}), **_LINEAR.get(kind, {})}.items():
            tensor = getattr(layer, state, None)
            flag = "is_indexer_initialized" if state == "indexer_keys" else "is_initialized"
            if tensor is None and not getattr(layer, flag, True):
                # what the text never reaches (Mllama's cross-attention without an image, an
                # indexer a layer borrows from another): nothing to carry
                continue
            if not isinstance(tensor, torch.Tensor) or tensor.ndim <= slot_axis or tensor.shape[slot_axis] != 2:
                raise InputError(f"{name}: layer {i} ({kind}) cached no {state} of two tokens")
            shape = list(tensor.shape[1:])
            shape[slot_axis - 1] = adapter.window_slots(layer, max_length)
            states[state] = (tuple(shape), tensor.dtype)
        for attribute, prefix in adapter.RECURRENT_PREFIXES.items():
            for index, tensor in (getattr(layer, attribute, None) or {}).items():
                if tensor is not None:
                    states[f"{prefix}{index}"] = (tuple(tensor.shape[1:]), tensor.dtype)
        if kind in _LINEAR and not any(adapter.recurrent_slot(s) for s in states):
            raise InputError(f"{name}: layer {i} ({kind}) kept no recurrent state after two tokens")
        layers.append(dict(sorted(states.items())))
    if not any(layers):
        raise InputError(f"{name}: no layer of it caches keys, values or recurrent states")
    return layers, cross_attention


def _holds_tensors(value: Any) -> bool:
    """Whether `value` is a tensor or a list, tuple or dict holding one (at any depth)."""
    if isinstance(value, torch.Tensor):
        return True
    if isinstance(value, dict):
        value = list(value.values())
    return isinstance(value, (list, tuple)) and any(_holds_tensors(item) for item in value)


#: Output fields of models that keep a cache of their own kind (XLNet's `mems`, Reformer's
#: buckets, RWKV's `state`): not models to run again over all tokens.
_OWN_CACHES = ("mems", "past_buckets_states", "state")


def _check_plain_generation_inputs(model: torch.nn.Module) -> None:
    """A model without a cache is run again over every token at each step, as its own `generate`
    does; refuse one whose `prepare_inputs_for_generation` changes the tokens or adds inputs
    of its own (XLM appends a mask token, XLNet a permutation mask)."""
    ids = torch.zeros(1, 3, dtype=torch.long, device=module_device(model))
    prepared = model.prepare_inputs_for_generation(ids, attention_mask=torch.ones_like(ids))
    extra = sorted(k for k, v in prepared.items() if v is not None and k not in _PLAIN_GENERATION_INPUTS)
    changed = prepared.get("input_ids") is None or tuple(prepared["input_ids"].shape) != tuple(ids.shape)
    if extra or changed:
        what = f"adds {', '.join(extra)}" if extra else "changes the tokens"
        raise InputError(f"{type(model).__name__}: it keeps no key/value cache, and its prepare_inputs_for_generation "
                         f"{what}, which from_causal_lm does not reproduce")


