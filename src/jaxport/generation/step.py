"""One step of a Hugging Face causal LM over an explicit cache, as a module `torch.export` traces.

`from_causal_lm` exports this module once (batch and new-token count symbolic) and converts it;
prefill and decode are two JAX traces of that one program. A model with recurrent or
linear-attention layers (Mamba, Jamba, Qwen3-Next, ...) runs prefill and decode through different
code in transformers (a whole-sequence scan, or one recurrent update when a previous state exists
and one token comes), and some models branch on whether the cache is empty (GIT); these are
exported twice (`split`): `CausalLMStep(..., split=True)` for prompts written into an empty
cache, `decoding=True` for one token after them. How a step runs the model is chosen once, from
what the probe read of its cache (`probe`). transformers is imported inside the functions that
use it: it is an optional dependency (`jaxport[hf]`).
"""


from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

import torch

from ..devices import module_device
from ..frontends import transformers_adapter as adapter
from ..frontends.transformers_adapter import (
    block_ids_over_the_whole_mask,
    experts_as_grouped_products,
    grouped_query_attention,
)
from .probe import OWN_STATE, TOKENS, Probed, own_state_name, probe


class CausalLMStep(torch.nn.Module):
    """One step of a Hugging Face causal LM over an explicit, preallocated cache:
    `(input_ids [B, T], attention_mask [B, L], position_ids [B, T], length [], states) ->
    (logits [B, T, V], states)`, with `states` one dict of tensors per layer (see `probe._STATES`:
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
                 probed: Probed | None = None):
        super().__init__()
        self.model = model
        self.max_length = max_length
        self.decoding = decoding
        self.text_config = model.config.get_text_config()
        self._probed = probed = probed or probe(model, max_length)
        #: Each layer's states as it caches them ({name: (shape without the batch, slots included,
        #: dtype)}, in the dtypes it caches in (under autocast, if the caller traces under it).
        self.layer_states = probed.layers
        self._cross_attention, self._own_cache = probed.cross_attention, probed.own_cache
        #: Whether the model keeps no cache: each step runs it over every token so far.
        self.recomputes = [set(layer) for layer in self.layer_states] == [{TOKENS}]
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
        #: How `forward` runs the model, chosen once from what the probe read (`_strategy`); over a
        #: cache, how it counts the tokens before, the mask and the cache it gives the model.
        self._run_step = self._strategy()
        self._tokens_seen, self._step_mask, self._model_cache = self._cache_strategy()

    def variant(self, *, split: bool = False, decoding: bool = False) -> CausalLMStep:
        """The same model's step as one of a split model's two programs, on the states this one
        read (the probe's forward is not run again)."""
        return CausalLMStep(self.model, self.max_length, split=split, decoding=decoding,
                            probed=self._probed)

    def cache_specs(self, batch: int) -> list[dict[str, tuple[tuple[int, ...], torch.dtype]]]:
        """Each layer's states for `batch` rows: {name: (shape, dtype)}."""
        return [{name: ((batch, *shape), dtype) for name, (shape, dtype) in layer.items()}
                for layer in self.layer_states]

    def _strategy(self) -> Callable:
        """How each step runs the model: over every token so far where it keeps no cache (with a
        token appended, XLM's), over its own list of recurrent states (RWKV's), or over a
        transformers cache around the states (`_cached_step`)."""
        if self.recomputes:
            return self._recompute_with_appended_token if self._plain.appended is not None else self._recompute
        if self._own_state:
            return self._own_state_step
        return self._cached_step

    def _cache_strategy(self) -> tuple[Callable, Callable, Callable]:
        """How a step over a cache counts the tokens cached before it, which mask it gives the
        model and which cache object: `(seen(length), mask(attention_mask, input_ids),
        model_cache(cache, states))`."""
        if self.split and not self.decoding:
            seen = _none_seen
        else:
            seen = functools.partial(_seen, decoding=self.decoding, max_length=self.max_length)
        if self.recurrent and not self.decoding:
            mask = _prompt_mask
        elif self.recurrent and not self._attends:
            mask = _no_mask
        elif self.windowed:
            mask = _window_mask
        else:
            mask = _slot_mask
        if self._cross_attention:
            model_cache = _with_empty_cross_attention
        elif self._own_cache is not None:
            model_cache = functools.partial(adapter.with_states_beside_layers, self._own_cache, previous=self.decoding)
        else:
            model_cache = _as_it_is
        return seen, mask, model_cache

    def forward(self, input_ids, attention_mask, position_ids, length, states):
        return self._run_step(input_ids, attention_mask, position_ids, length, states)

    def _cached_step(self, input_ids, attention_mask, position_ids, length, states):
        """A step over transformers' `StaticCache` layers around `states`, as the model's code
        takes it (`_model_cache`), given the mask its code expects (`_step_mask`)."""
        cache = adapter.static_cache(self.text_config, self.max_length, states, self._tokens_seen(length), length,
                                     decoding=self.decoding, name=type(self.model).__name__)
        attention_mask = self._step_mask(attention_mask, input_ids)
        kwargs = {"position_ids": position_ids} if self._takes_positions else {}
        model_cache = self._model_cache(cache, states)
        with grouped_query_attention(), experts_as_grouped_products(), block_ids_over_the_whole_mask():
            out = self.model(input_ids=input_ids, attention_mask=attention_mask, use_cache=True,
                             **{self._cache_argument: model_cache}, **kwargs)
        beside = adapter.states_beside_layers(model_cache) or []

        def state_of(i: int, layer: Any, name: str) -> torch.Tensor:
            return beside[i][name] if i < len(beside) and name in beside[i] else adapter.layer_state(layer, name)

        return out.logits, [{name: state_of(i, layer, name) for name in state}
                            for i, (layer, state) in enumerate(zip(cache.layers, states))]

    def _written_tokens(self, input_ids, length, tokens):
        """(slots, tokens): the slots of the new tokens, and the token slots with them written."""
        slots = torch.arange(input_ids.shape[1], device=input_ids.device) + length
        return slots, tokens.index_copy(1, slots, input_ids.to(tokens.dtype))

    def _recompute(self, input_ids, attention_mask, position_ids, length, states):
        """A step of a model without a cache: the new tokens written into the token slots, the
        model run over all `L` slots (the unused ones masked, and after every real token, so a
        causal model's real positions never see them), the logits of the new tokens' slots
        read out. Inputs as the model's `generate` passes them (GPT-1's: no position ids, so
        positions count slots, as they count tokens in transformers' growing sequence)."""
        slots, tokens = self._written_tokens(input_ids, length, states[0][TOKENS])
        kwargs = {}
        if self._takes_positions and not self._own_generation_inputs:
            # transformers' generic preparation: positions counted over the mask, padding at 1
            positions = attention_mask.long().cumsum(-1) - 1
            kwargs["position_ids"] = positions.masked_fill(attention_mask == 0, 1)
        out = self.model(input_ids=tokens.long(), attention_mask=attention_mask, **kwargs)
        return out.logits.index_select(1, slots), [{TOKENS: tokens}]

    def _own_state_step(self, input_ids, attention_mask, position_ids, length, states):
        """A step of a model that passes its recurrent states in a list of its own (RWKV): a
        prompt from none (the model starts its own), a token after the states given. As in
        transformers' `generate`, no attention mask: RWKV reads every token, padding included."""
        given, states = None, states[0]
        if self.decoding:
            given = [states[name] for name in sorted(states, key=lambda name: adapter.recurrent_slot(name)[1])]
        out = self.model(input_ids=input_ids, **{OWN_STATE: given}, use_cache=True)
        return out.logits, [{own_state_name(i): tensor for i, tensor in enumerate(getattr(out, OWN_STATE))}]

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
            state = getattr(prompt, OWN_STATE)

            def decode(rows):
                given = [tensor[rows].clone() for tensor in state]
                return self.model(input_ids=token[rows], **{OWN_STATE: given}, use_cache=True).logits

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

    def _recompute_with_appended_token(self, input_ids, attention_mask, position_ids, length, states):
        """XLM's step: its `generate` runs the model over the tokens so far and one token more
        (its mask token), with no attention mask (the model masks the positions from a count
        of tokens other than its padding token), and takes the next token from the appended
        token's logits. Here over all `L + 1` slots: the appended token after the last new one
        and the padding token in every slot after it, which the count leaves out as it leaves
        out positions transformers' shorter sequence does not have. Each new token's logits
        are those of the slot after it, so the last new token's are the appended token's: what
        generation reads (earlier ones are the model's output at the next real token)."""
        slots, tokens = self._written_tokens(input_ids, length, states[0][TOKENS])
        plain = self._plain
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        end = slots[-1] + 1
        ids = tokens.long().masked_fill(positions > end, plain.padding).masked_fill(positions == end, plain.appended)
        inputs = {name: torch.full_like(ids, value) for name, value in plain.constants}
        out = self.model(input_ids=ids, **inputs)
        return out.logits.index_select(1, slots + 1), [{TOKENS: tokens}]


def _none_seen(length) -> int:
    """No tokens before a prompt into an empty cache: what makes transformers' prefill code run."""
    return 0


def _seen(length: torch.Tensor, *, decoding: bool, max_length: int):
    """The tokens already cached, as a size torch.export can reason about: code such as MPT's
    `max(0, 1 - (T + seen))` then stays static instead of branching on a tensor's value."""
    seen = length.item()
    torch._check(seen >= (1 if decoding else 0))
    torch._check(seen <= max_length)
    return seen


def _slot_mask(attention_mask, input_ids):
    """The slot mask as it is: transformers' mask code builds each layer's mask from it."""
    return attention_mask


def _prompt_mask(attention_mask, input_ids):
    """The prompt's own `[B, T]` mask, as transformers gives a prompt's recurrent layers: they
    zero its padding."""
    return attention_mask[:, : input_ids.shape[1]]


def _no_mask(attention_mask, input_ids):
    """No mask, as Mamba's generate decodes: one new token is never padding."""
    return None


def _window_mask(attention_mask, input_ids):
    """A window's keys are its slots then the T new tokens (`adapter.window_slots`): up to T past
    the last slot's token, which transformers' mask code reads the slot mask at."""
    return torch.nn.functional.pad(attention_mask, (0, input_ids.shape[1]))


def _as_it_is(cache, states):
    """The static cache itself, as most models take it."""
    return cache


def _with_empty_cross_attention(cache, states):
    """A BERT-style decoder keeps its self-attention's cache beside an empty cross-attention one."""
    from transformers.cache_utils import DynamicCache, EncoderDecoderCache

    return EncoderDecoderCache(cache, DynamicCache())
