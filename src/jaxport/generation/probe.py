"""What one forward of two tokens shows of how a Hugging Face causal LM caches, read before its
step is exported (`probe`): each layer's states as it keeps them (keys and values of any head
counts and sizes, a sparse-attention indexer's keys, recurrent layers' conv and scan states,
nothing for a layer that reads another's), and the kind of cache that holds them: transformers'
dynamic cache, an `EncoderDecoderCache` (a BERT-style decoder), a cache that keeps states beside
its layers (MiniMax's), RWKV's own list of states, or none at all (then how its `generate` runs it
over its tokens again, `PlainGeneration`). What the model keeps that a cache of fixed slots
cannot lay out is refused by name here. transformers is imported inside the functions that use it."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from ..devices import module_device
from ..errors import InputError
from ..frontends import transformers_adapter as adapter

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
TOKENS = "tokens"
#: Inputs a cacheless model's `prepare_inputs_for_generation` may hand its forward besides the
#: tokens and their mask: settings, none of them a tensor of its own.
_PLAIN_GENERATION_INPUTS = frozenset({"input_ids", "attention_mask", "position_ids", "use_cache",
                                      *adapter.CACHE_NAMES, "cache_position", "logits_to_keep", "return_dict"})



@dataclasses.dataclass(frozen=True)
class Probed:
    """What one forward of two tokens shows of how a model caches (`probe`)."""

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
    plain: PlainGeneration | None = None


def probe(model: torch.nn.Module, max_length: int) -> Probed:
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
    state = getattr(out, OWN_STATE, None)
    if cache is None and isinstance(state, (list, tuple)) and state and all(isinstance(t, torch.Tensor) for t in state):
        # RWKV: its recurrent states, a list of fixed shapes ([B, hidden, layers]), as one layer's
        return Probed([{own_state_name(i): (tuple(t.shape[1:]), t.dtype) for i, t in enumerate(state)}],
                       own_state=True)
    if cache is None and not any(hasattr(out, own) for own in _OWN_CACHES):
        plain = _plain_generation(model)
        return Probed([{TOKENS: ((max_length + (plain.appended is not None),), torch.int32)}], plain=plain)
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
    return Probed(layers, cross_attention, None if beside is None else type(cache))


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
OWN_STATE = "state"


def own_state_name(index: int) -> str:
    """The step's name for state `index` of a model's own list (RWKV's): a recurrent state's,
    so prefill and decode are two programs, as for a recurrent cache layer."""
    return f"{adapter.RECURRENT_PREFIXES['recurrent_states']}{index}"


@dataclasses.dataclass(frozen=True)
class PlainGeneration:
    """How transformers' `generate` runs a model without a cache over its tokens: as they are
    (`appended` None), or with one token more after them (XLM's mask token), no attention mask,
    `padding` the token the model leaves out of its count of positions, and `constants` inputs
    of the tokens' shape filled with one value each (XLM's `langs`)."""

    appended: int | None = None
    padding: int | None = None
    constants: tuple[tuple[str, int], ...] = ()


def _plain_generation(model: torch.nn.Module) -> PlainGeneration:
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
        return PlainGeneration()
    appends = (given is not None and tuple(given.shape) == (1, 4) and torch.equal(given[:, :3], ids)
               and "attention_mask" not in prepared)
    constants = {k: prepared[k] for k in extra}
    if appends and all(isinstance(v, torch.Tensor) and v.shape == given.shape and bool((v == v.flatten()[0]).all())
                       for v in constants.values()):
        config = model.config
        padding = getattr(config, "pad_index", getattr(config, "pad_token_id", None))
        if padding is not None:
            return PlainGeneration(int(given[0, 3]), int(padding),
                                    tuple((k, int(v.flatten()[0])) for k, v in constants.items()))
    what = f"adds {', '.join(extra)}" if extra else "changes the tokens"
    raise InputError(f"{name}: it keeps no key/value cache, and its prepare_inputs_for_generation "
                     f"{what}, which from_causal_lm does not reproduce")
