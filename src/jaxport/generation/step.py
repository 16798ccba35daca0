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

import dataclasses
import inspect
from typing import Any

import torch

from ..devices import module_device
from ..errors import InputError
from ..frontends import transformers_adapter as adapter
from ..frontends.transformers_adapter import (
    block_ids_over_the_whole_mask,
    experts_as_grouped_products,
    grouped_query_attention,
)

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
                 probed: _Probed | None = None):
        super().__init__()
        self.model = model
        self.max_length = max_length
        self.decoding = decoding
        self.text_config = model.config.get_text_config()
        self._probed = probed = probed or _probe(model, max_length)
        #: Each layer's states as it caches them ({name: (shape without the batch, slots included,
        #: dtype)}, in the dtypes it caches in (under autocast, if the caller traces under it).
        self.layer_states = probed.layers
        self._cross_attention, self._own_cache = probed.cross_attention, probed.own_cache
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
        kinds = getattr(self.text_config, "layer_types", None)
        #: Whether every layer keeps keys and values of a sliding window only (Mistral's), given
        #: positions by the caller: what each step computes then depends on the positions of
        #: earlier tokens relative to its own, never on a count of them, so a sequence can go on
        #: past `max_length` (`CausalLM.rolls`). Chunked windows start at absolute positions: not these.
        self.windows_only = (self._attends and self._takes_positions and not self._cross_attention
                             and self._own_cache is None
                             and getattr(self.text_config, "attention_chunk_size", None) is None
                             and (kinds is None or set(kinds) == {"sliding_attention"})
                             and all(set(layer) == {"keys", "values"} and layer["keys"][0][1] < max_length
                                     for layer in self.layer_states if layer))
        from transformers import GenerationMixin

        # GPT-1 prepares its own inputs for generate (no position ids); the generic preparation
        # passes positions counted over the mask
        self._own_generation_inputs = (type(model).prepare_inputs_for_generation
                                       is not GenerationMixin.prepare_inputs_for_generation)
        self._plain, self._own_state = probed.plain, probed.own_state

    def variant(self, *, split: bool = False, decoding: bool = False) -> CausalLMStep:
        """The same model's step as one of a split model's two programs, on the states this one
        read (the probe's forward is not run again)."""
        return CausalLMStep(self.model, self.max_length, split=split, decoding=decoding,
                            probed=self._probed)

    def cache_specs(self, batch: int) -> list[dict[str, tuple[tuple[int, ...], torch.dtype]]]:
        """Each layer's states for `batch` rows: {name: (shape, dtype)}."""
        return [{name: ((batch, *shape), dtype) for name, (shape, dtype) in layer.items()}
                for layer in self.layer_states]

    def forward(self, input_ids, attention_mask, position_ids, length, states):
        if self.recomputes:
            return self._recompute(input_ids, attention_mask, length, states[0][_TOKENS])
        if self._own_state:
            return self._own_state_step(input_ids, states[0])
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
        elif self._own_cache is not None:
            model_cache = adapter.with_states_beside_layers(self._own_cache, cache, states, previous=self.decoding)
        else:
            model_cache = cache
        with grouped_query_attention(), experts_as_grouped_products(), block_ids_over_the_whole_mask():
            out = self.model(input_ids=input_ids, attention_mask=attention_mask, use_cache=True,
                             **{self._cache_argument: model_cache}, **kwargs)
        beside = adapter.states_beside_layers(model_cache) or []

        def state_of(i: int, layer: Any, name: str) -> torch.Tensor:
            return beside[i][name] if i < len(beside) and name in beside[i] else adapter.layer_state(layer, name)

        return out.logits, [{name: state_of(i, layer, name) for name in state}
                            for i, (layer, state) in enumerate(zip(cache.layers, states))]

    def _recompute(self, input_ids, attention_mask, length, tokens):
        """A step of a model without a cache: the new tokens written into the token slots, the
        model run over all `L` slots (the unused ones masked, and after every real token, so a
        causal model's real positions never see them), the logits of the new tokens' slots
        read out. Inputs as the model's `generate` passes them (GPT-1's: no position ids, so
        positions count slots, as they count tokens in transformers' growing sequence)."""
        slots = torch.arange(input_ids.shape[1], device=input_ids.device) + length
        tokens = tokens.index_copy(1, slots, input_ids.to(tokens.dtype))
        if self._plain.appended is not None:
            return self._recompute_with_appended_token(slots, tokens)
        kwargs = {}
        if self._takes_positions and not self._own_generation_inputs:
            # transformers' generic preparation: positions counted over the mask, padding at 1
            positions = attention_mask.long().cumsum(-1) - 1
            kwargs["position_ids"] = positions.masked_fill(attention_mask == 0, 1)
        out = self.model(input_ids=tokens.long(), attention_mask=attention_mask, **kwargs)
        return out.logits.index_select(1, slots), [{_TOKENS: tokens}]

    def _own_state_step(self, input_ids, states):
        """A step of a model that passes its recurrent states in a list of its own (RWKV): a
        prompt from none (the model starts its own), a token after the states given. As in
        transformers' `generate`, no attention mask: RWKV reads every token, padding included."""
        given = None
        if self.decoding:
            given = [states[name] for name in sorted(states, key=lambda name: adapter.recurrent_slot(name)[1])]
        out = self.model(input_ids=input_ids, **{_OWN_STATE: given}, use_cache=True)
        return out.logits, [{_own_state_name(i): tensor for i, tensor in enumerate(getattr(out, _OWN_STATE))}]

    def decoding_mixes_rows(self) -> bool:
        """Whether a token after a state, given for two rows at once, comes out other than for
        each row alone: transformers' RWKV adds a [B, H] state to [B, 1, H] activations there,
        which for two rows or more mixes every row's state into every other's (its batched
        `generate` differs from its own row by row)."""
        if not self._own_state:
            return False
        device = module_device(self.model)
        with torch.no_grad():
            prompt = self.model(input_ids=torch.tensor([[3, 4], [5, 6]], device=device), use_cache=True)
            token = torch.tensor([[7], [8]], device=device)
            state = getattr(prompt, _OWN_STATE)

            def decode(rows):
                given = [tensor[rows].clone() for tensor in state]
                return self.model(input_ids=token[rows], **{_OWN_STATE: given}, use_cache=True).logits

            both = decode(slice(0, 2))
            alone = torch.cat([decode(slice(0, 1)), decode(slice(1, 2))])
        return both.shape != alone.shape or not torch.allclose(both, alone, rtol=1e-4, atol=1e-5)

    def decoding_ignores_mask(self) -> bool:
        """Whether a token after a cached prompt comes out the same with the prompt's first
        token masked out as with it seen: ProphetNet's decoder builds no mask once it has a
        cache, so over a cache of fixed slots it would attend to the empty ones too."""
        if self._own_state or self._plain is not None:
            return False
        device = module_device(self.model)
        prompt = torch.tensor([[3, 4, 5]], device=device)

        def decode(first_seen: int):
            cache = adapter.returned_cache(self.model(input_ids=prompt, use_cache=True))
            mask = torch.tensor([[first_seen, 1, 1, 1]], device=device)
            return self.model(input_ids=torch.tensor([[6]], device=device), attention_mask=mask, use_cache=True,
                              **{self._cache_argument: cache}).logits

        with torch.no_grad():
            return torch.equal(decode(1), decode(0))

    def _recompute_with_appended_token(self, slots, tokens):
        """XLM's step: its `generate` runs the model over the tokens so far and one token more
        (its mask token), with no attention mask (the model masks the positions from a count
        of tokens other than its padding token), and takes the next token from the appended
        token's logits. Here over all `L + 1` slots: the appended token after the last new one
        and the padding token in every slot after it, which the count leaves out as it leaves
        out positions transformers' shorter sequence does not have. Each new token's logits
        are those of the slot after it, so the last new token's are the appended token's: what
        generation reads (earlier ones are the model's output at the next real token)."""
        plain = self._plain
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        end = slots[-1] + 1
        ids = tokens.long().masked_fill(positions > end, plain.padding).masked_fill(positions == end, plain.appended)
        inputs = {name: torch.full_like(ids, value) for name, value in plain.constants}
        out = self.model(input_ids=ids, **inputs)
        return out.logits.index_select(1, slots + 1), [{_TOKENS: tokens}]


@dataclasses.dataclass(frozen=True)
class _Probed:
    """What one forward of two tokens shows of how a model caches (`_probe`)."""

    #: Each layer's states: {name: (shape without the batch, slots included, dtype)}.
    layers: list[dict[str, tuple[tuple[int, ...], torch.dtype]]]
    #: Whether they are kept in an `EncoderDecoderCache` (a BERT-style decoder).
    cross_attention: bool = False
    #: The model's own cache class that keeps states beside its layers (MiniMax's), which its
    #: code insists on; None for any other.
    own_cache: type | None = None
    #: Whether the model passes its recurrent states in a list of its own (RWKV's `state`).
    own_state: bool = False
    #: How a model without a cache is run over its tokens (XLM: with a mask token after them).
    plain: _PlainGeneration | None = None


def _probe(model: torch.nn.Module, max_length: int) -> _Probed:
    """Each layer's states ({name: (shape without the batch, `max_length` slots where it has
    slots, dtype)}), read from what the model caches in one forward of two tokens: multi-query,
    grouped-query and latent attention (keys and values of different sizes), indexers, recurrent
    layers' conv and scan states, shared layers and layers unlike their neighbours all as they
    are, not as the config's head counts would have them. And whether the model keeps them in
    an `EncoderDecoderCache` (a BERT-style decoder, its cross-attention cache left empty), the
    class of a cache that keeps some states beside its layers (MiniMax's linear attention,
    `adapter.STATES_BESIDE_LAYERS`), RWKV's list of states, or no cache at all."""
    from transformers.cache_utils import DynamicCache, EncoderDecoderCache

    name = type(model).__name__
    with torch.no_grad():
        out = model(input_ids=torch.zeros(1, 2, dtype=torch.long, device=module_device(model)), use_cache=True)
    cache = adapter.returned_cache(out)
    state = getattr(out, _OWN_STATE, None)
    if cache is None and isinstance(state, (list, tuple)) and state and all(isinstance(t, torch.Tensor) for t in state):
        # RWKV: its recurrent states, a list of fixed shapes ([B, hidden, layers]), as one layer's
        return _Probed([{_own_state_name(i): (tuple(t.shape[1:]), t.dtype) for i, t in enumerate(state)}],
                       own_state=True)
    if cache is None and not any(hasattr(out, own) for own in _OWN_CACHES):
        plain = _plain_generation(model)
        return _Probed([{_TOKENS: ((max_length + (plain.appended is not None),), torch.int32)}], plain=plain)
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
    beside = adapter.states_beside_layers(cache)
    outside = sorted(field for field, value in vars(cache).items()
                     if field != "layers" and field not in adapter.STATES_BESIDE_LAYERS and _holds_tensors(value))
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
            if not isinstance(tensor, torch.Tensor) or tensor.ndim <= slot_axis:
                raise InputError(f"{name}: layer {i} ({kind}) cached no {state} of two tokens")
            if tensor.shape[slot_axis] != 2:
                # CPM-Ant caches prompt tokens of its own ahead of the text, and masks by counting
                # tokens from the end of a sequence that grows: nothing a cache of fixed slots lays out
                raise InputError(f"{name}: layer {i} ({kind}) cached {state} of {tensor.shape[slot_axis]} tokens for the "
                                 "2 it was given, which from_causal_lm does not lay out in its cache's slots")
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
    if beside is not None:
        # MiniMax: its linear-attention layers' states, kept beside the layers, as each one's
        layers += [{} for _ in range(len(beside) - len(layers))]
        for layer, kept in zip(layers, beside):
            layer.update({name: (tuple(tensor.shape[1:]), tensor.dtype) for name, tensor in kept.items()})
    if not any(layers):
        raise InputError(f"{name}: no layer of it caches keys, values or recurrent states")
    return _Probed(layers, cross_attention, None if beside is None else type(cache))


def _holds_tensors(value: Any) -> bool:
    """Whether `value` is a tensor or a list, tuple or dict holding one (at any depth)."""
    if isinstance(value, torch.Tensor):
        return True
    if isinstance(value, dict):
        value = list(value.values())
    return isinstance(value, (list, tuple)) and any(_holds_tensors(item) for item in value)


#: Output fields of models that keep a cache of their own kind (XLNet's `mems`, Reformer's
#: buckets, and RWKV's `state` where it is not a list of tensors): not models to run again over
#: all tokens.
_OWN_CACHES = ("mems", "past_buckets_states", "state")
#: The argument and output in which RWKV passes its recurrent states, a list of tensors.
_OWN_STATE = "state"


def _own_state_name(index: int) -> str:
    """The step's name for state `index` of a model's own list (RWKV's): a recurrent state's,
    so prefill and decode are two programs, as for a recurrent cache layer."""
    return f"{adapter.RECURRENT_PREFIXES['recurrent_states']}{index}"


@dataclasses.dataclass(frozen=True)
class _PlainGeneration:
    """How transformers' `generate` runs a model without a cache over its tokens: as they are
    (`appended` None), or with one token more after them (XLM's mask token), no attention mask,
    `padding` the token the model leaves out of its count of positions, and `constants` inputs
    of the tokens' shape filled with one value each (XLM's `langs`)."""

    appended: int | None = None
    padding: int | None = None
    constants: tuple[tuple[str, int], ...] = ()


def _plain_generation(model: torch.nn.Module) -> _PlainGeneration:
    """A model without a cache is run again over every token at each step, as its own `generate`
    does; what its `prepare_inputs_for_generation` makes of three tokens says how. It may pass
    them on as they are, or append one token and fill other inputs with one value each (XLM);
    a model whose preparation does anything else (XLNet's permutation mask) is refused by name."""
    name = type(model).__name__
    ids = torch.tensor([[3, 4, 5]], device=module_device(model))
    prepared = model.prepare_inputs_for_generation(ids, attention_mask=torch.ones_like(ids))
    given = prepared.get("input_ids")
    extra = sorted(k for k, v in prepared.items() if v is not None and k not in _PLAIN_GENERATION_INPUTS)
    if given is not None and tuple(given.shape) == tuple(ids.shape) and torch.equal(given, ids) and not extra:
        return _PlainGeneration()
    appends = (given is not None and tuple(given.shape) == (1, 4) and torch.equal(given[:, :3], ids)
               and "attention_mask" not in prepared)
    constants = {k: prepared[k] for k in extra}
    if appends and all(isinstance(v, torch.Tensor) and v.shape == given.shape and bool((v == v.flatten()[0]).all())
                       for v in constants.values()):
        config = model.config
        padding = getattr(config, "pad_index", getattr(config, "pad_token_id", None))
        if padding is not None:
            return _PlainGeneration(int(given[0, 3]), int(padding),
                                    tuple((k, int(v.flatten()[0])) for k, v in constants.items()))
    what = f"adds {', '.join(extra)}" if extra else "changes the tokens"
    raise InputError(f"{name}: it keeps no key/value cache, and its prepare_inputs_for_generation "
                     f"{what}, which from_causal_lm does not reproduce")


