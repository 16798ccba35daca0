"""Language models that generate: a Hugging Face causal LM as pure JAX over an explicit KV cache.

`from_causal_lm` exports one step of the model with `torch.export`
(`generation.step.CausalLMStep`: new tokens in, logits and the written cache out, the
batch and the number of new tokens symbolic) and converts it once; prefill (T = prompt length)
and decode (T = 1) are two JAX traces of that one program. A model with recurrent layers
(Mamba, Jamba, Qwen3-Next, ...) gets two programs, a prefill from an empty cache and a one-token
decode, as transformers runs them through different code; so does a model whose code branches on
whether its cache is empty (GIT), which torch.export cannot trace as one program. The cache is a
pytree of preallocated arrays the caller owns:

    {"layers": [{"keys": [B, kv_heads, L, head_dim], "values": [...]}, ...],  # one per layer, as it
                                                           # caches (step._STATES; a recurrent
                                                           # layer's "conv_0", "recurrent_0", ...)
     "mask": int32 [B, L],   # 1 where a slot holds a token, 0 for padding or unused slots
     "length": int32 []}     # slots used so far: where the next tokens go (shared by all rows)

Rows of different prompt lengths are left-padded, as Hugging Face pads them for generation:
every row writes the same slots, and the mask keeps each row's padding out of attention.
`generate` runs prefill and a `lax.while_loop` of decode steps as one jitted function, with
greedy or sampled tokens chosen as transformers' logits processors choose them.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import queue
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import torch
from jax import lax
from jax.experimental import checkify, io_callback
from jax.sharding import Mesh

from .. import dtypes
from ..backends.inputs import as_jax, is_abstract
from ..backends.model import JaxModel
from ..backends.serialization import export
from ..convert import from_torch
from ..devices import module_device
from ..errors import ExportError, InputError, MaxBatchError
from ..frontends import transformers_adapter
from ..frontends.hugging_face import is_model
from ..placement import Rule
from ..precision import precision_policy
from .beam import Beams, beam_search
from .sampling import Sampling, process_scores, split
from .step import CausalLMStep
from .streaming import POLL_SECONDS, Stream
from .streaming import emit as emit_to_host

#: `GenerationConfig` fields `generate` honours (beam search aside, every processor of
#: transformers' `generate` for a decoder-only model that these fields switch on).
_HONOURED = frozenset({
    "max_length", "max_new_tokens", "min_length", "min_new_tokens", "do_sample", "num_return_sequences",
    "temperature", "top_k", "top_p", "min_p", "repetition_penalty", "no_repeat_ngram_size",
    "encoder_repetition_penalty", "encoder_no_repeat_ngram_size",
    "bad_words_ids", "sequence_bias", "suppress_tokens", "begin_suppress_tokens", "forced_bos_token_id",
    "forced_eos_token_id", "remove_invalid_values", "renormalize_logits", "eos_token_id",
    "pad_token_id", "num_beams", "length_penalty", "early_stopping",
})
#: Fields that cannot change the tokens of a decoder-only model's generation here: bookkeeping,
#: cache and compilation choices (jaxport has its own), and settings of assisted or speculative
#: decoding, which give the same tokens and need an assistant `generate` cannot take.
_INERT = frozenset({
    "_from_model_config", "transformers_version", "bos_token_id", "decoder_start_token_id", "use_cache",
    "cache_implementation", "cache_config", "max_cache_len", "compile_config", "disable_compile",
    "prefill_chunk_size", "continuous_batching_config", "low_memory", "is_assistant",
    "num_assistant_tokens", "num_assistant_tokens_schedule", "assistant_confidence_threshold",
    "assistant_early_exit", "assistant_lookbehind", "assistant_ensemble_weight", "target_lookbehind",
    "prompt_lookup_num_tokens", "max_matching_ngram_size",
})
#: `generate`'s own keyword arguments that are `GenerationConfig` fields (None: not set).
_KEYWORDS = ("max_new_tokens", "do_sample", "temperature", "top_k", "top_p", "eos_token_id", "pad_token_id")


#: How XLA:CPU compiles a generation loop: without hoisting loop-invariant work out of it. It runs
#: some ops on 16-bit floats (the embedding's gather, slices) by converting their operand to float32
#: first; inside one step the conversion fuses into the op, but hoisted out of the decode loop it is
#: a float32 copy of the whole operand for as long as the loop runs (a bfloat16 Llama of 150M
#: parameters: 125 MiB for its embedding; 470 MiB, every weight, before single-row products were
#: given two rows, `ops._products`). What stays in the loop is small (its masks and positions).
_CPU_LOOP_OPTIONS = {"xla_disable_hlo_passes": "while-loop-invariant-code-motion"}


def _share_weights(program: JaxModel, params: dict) -> JaxModel:
    """`program` (another export of the same step: a decoder, a prefill for one prompt length)
    holding the CausalLM's own weights instead of its own copy of them. Its conversion copied any
    weight DLPack could not share (unaligned, or from another device), and every step is run on
    the CausalLM's `params` anyway; a copy kept here would only hold memory."""
    if set(program.params) == set(params) and all(
            np.shape(program.params[name]) == np.shape(value) for name, value in params.items()):
        program.params = params
    return program


def _on_cpu(params) -> bool:
    """Whether `params` lie on the CPU (JAX's default device for arrays not yet placed)."""
    leaf = next(iter(jax.tree.leaves(params)), None)
    devices = leaf.devices() if isinstance(leaf, jax.Array) else {jax.devices()[0]}
    return all(device.platform == "cpu" for device in devices)


class _Call(NamedTuple):
    """A checked `generate` call, ready to run: `run(*args, stream id)` gives `(new tokens, steps)`."""

    run: Callable
    args: tuple
    prompts: jax.Array


def _positions(mask: jax.Array) -> jax.Array:
    """Hugging Face's position ids for a left-padded slot mask: tokens count from 0, padding is 0."""
    return jnp.where(mask == 0, 0, jnp.cumsum(mask, axis=-1) - 1)


class CausalLM:
    """A converted causal language model: `params`, and pure functions over an explicit cache.

    `prefill(params, cache, input_ids, attention_mask)` and `decode(params, cache, tokens,
    positions)` return `(logits [B, T, vocab], cache)`; both are jitted with the cache donated, so
    XLA writes the new keys and values into the arrays passed in. `generate` is Hugging Face's
    `generate` as one jitted function. Built by `jaxport.from_causal_lm`.

    Threads: `generate` and `stream` may be called from any number of threads at once, streaming
    or not; each call gives what it gives alone (its streamer gets its own tokens only). Refused
    with an `InputError` rather than computed wrong: one streamer object following two running
    calls, and a cache that an earlier `prefill`/`decode` donated (use the cache it returned; a
    cache is one thread's: two threads decoding into the same cache race for it, and the loser
    gets that error, or JAX's "donated"/"deleted" one). `load_weights` while generating is not
    synchronized: a call reads `params` once, as it starts.

    A model with recurrent layers, or whose code branches on whether its cache is empty, has a
    second program (`split`), `decoder`, for one token after a prompt; its prefill starts from an
    empty cache and its decode takes one token at a time, as transformers' generate runs them.
    Where the model's own code loops over the prompt's tokens in Python (transformers' reference
    scans), no one program serves every prompt length: `step` is then None and a prefill program
    is exported for each prompt length the first time it is met (seconds each), by `prefill_for`.

    Where every layer keeps a sliding window only (`rolls`), decoding goes on past `max_length`
    (`_write_slots`); the cache's `length` counts every token, its mask the last `max_length`.
    """

    def __init__(self, step: JaxModel | None, *, cache_specs: Sequence[dict[str, tuple[tuple[int, ...], Any]]],
                 max_batch: int, max_length: int, layer_types: Sequence[str], generation_config: Any,
                 name: str, decoder: JaxModel | None = None,
                 prefill_for: Callable[[int], JaxModel] | None = None, rolls: bool = False):
        if step is None and (decoder is None or prefill_for is None):
            raise InputError(f"{name}: a CausalLM without one prefill program needs a decoder and prefill_for")
        self.step = step
        #: The one-token program where prefill and decode are two programs (None: `step` serves both).
        self.decoder = decoder
        self.split = decoder is not None
        self._prefill_for = prefill_for
        self._prefills: dict[int, JaxModel] = {}  # prompt length -> program, where `step` is None
        self._prefills_lock = threading.Lock()
        self.params = (step or decoder).params
        if step is not None and decoder is not None:
            _share_weights(decoder, self.params)
        self.max_batch = max_batch
        self.max_length = max_length
        #: Each layer's attention ("full_attention", "sliding_attention", ...), as the model's config
        #: says or, where it names none, as transformers' cache reads it (`_layer_types`).
        self.layer_types = tuple(layer_types)
        #: The model's generation config with transformers' defaults filled in: `generate`'s defaults.
        self.generation_config = generation_config
        self.name = name
        self._cache_specs = [{name: (tuple(shape[1:]), dtypes.jax_dtype(dtype)) for name, (shape, dtype) in layer.items()}
                             for layer in cache_specs]
        #: Whether decoding goes on past `max_length`: every layer keeps a sliding window only, of
        #: fewer slots (see `_write_slots`). The most tokens one decode step may then take.
        self.rolls = rolls
        self._decode_room = max_length - max((layer["keys"][0][1] for layer in self._cache_specs if "keys" in layer),
                                             default=0) if rolls else max_length
        self._jitted_prefill = jax.jit(self.prefill_step, donate_argnums=1)
        self._jitted_decode = jax.jit(self.decode_step, donate_argnums=1)
        self._generators: dict = {}
        self._generators_lock = threading.Lock()

    @property
    def missing_weights(self) -> tuple[str, ...]:
        """Names of the weights without values (a model converted on the `meta` device)."""
        return tuple(name for name, value in self.params.items() if is_abstract(value))

    def load_weights(self, weights: Any, *, strict: bool = True, mesh: Mesh | None = None,
                     rules: Iterable[Rule] = ()) -> CausalLM:
        """Give the model its weights: the Hugging Face model itself (its parameters and buffers), a
        mapping of its `state_dict` names to tensors or arrays, or the path of its safetensors
        checkpoint (what `save_pretrained` writes: a directory with `model.safetensors.index.json`
        and its shards, or one file), each weight checked against the model's shape and dtype and,
        with `mesh`, read straight onto it by `rules` (`JaxModel.load_weights`). `params` names them
        under `model.`. Returns the model."""
        program = self.step or self.decoder
        program.load_weights(weights, strict=strict, prefix="model.", mesh=mesh, rules=rules)
        self.params = program.params
        with self._prefills_lock:
            for other in (self.step, self.decoder, *self._prefills.values()):
                if other is not None and other is not program:
                    _share_weights(other, self.params)  # what `export` of each program carries
        return self

    def __repr__(self) -> str:
        return (f"CausalLM({self.name}: {len(self._cache_specs)} layers, max_batch={self.max_batch}, "
                f"max_length={self.max_length})")

    # -- the cache ----------------------------------------------------------------------------

    def _check_batch(self, batch: int) -> None:
        if not 1 <= batch <= self.max_batch:
            raise InputError(f"{self.name}: batch {batch} is outside 1..{self.max_batch} (max_batch of from_causal_lm)")

    def init_cache(self, batch: int) -> dict:
        """An empty cache for `batch` rows: zeros, every slot unused."""
        self._check_batch(batch)
        return {
            "layers": [{name: jnp.zeros((batch, *shape), dtype) for name, (shape, dtype) in layer.items()}
                       for layer in self._cache_specs],
            "mask": jnp.zeros((batch, self.max_length), jnp.int32),
            "length": jnp.zeros((), jnp.int32),
        }

    # -- the steps: jitted, and pure -----------------------------------------------------------

    def prefill(self, params, cache: dict, input_ids, attention_mask=None) -> tuple[jax.Array, dict]:
        """`prefill_step`, jitted, with the cache donated; refuses a prompt the cache has no room for
        (it reads the cache's length back from the device to check)."""
        self._check_room(cache, np.shape(input_ids)[-1])
        self._check_empty(cache)
        return self._jitted_prefill(params, cache, input_ids, attention_mask)

    def decode(self, params, cache: dict, tokens, positions) -> tuple[jax.Array, dict]:
        """`decode_step`, jitted, with the cache donated; refuses tokens the cache has no room for."""
        self._check_room(cache, np.shape(tokens)[-1], decoding=True)
        return self._jitted_decode(params, cache, tokens, positions)

    def _check_room(self, cache: dict, count: int, checked: bool = False, decoding: bool = False) -> None:
        """Refuse `count` new tokens past the cache's `max_length` slots: at once when the length is
        known, through `checkify` when traced and `checked`; unchecked under a trace, XLA would
        clamp the write into the last slots, overwriting tokens. A model that `rolls` decodes
        past them, up to `_decode_room` tokens a step."""
        length = cache["length"]
        if not isinstance(length, jax.core.Tracer) and any(
                getattr(leaf, "is_deleted", lambda: False)() for leaf in jax.tree.leaves(cache)):
            raise InputError(f"{self.name}: this cache was donated to an earlier prefill/decode; pass the "
                             "cache that call returned (a cache serves one sequence of calls, in one thread)")
        if decoding and self.rolls:
            if count > self._decode_room:
                raise InputError(f"{self.name}: {count} tokens in one decode step; its windows leave room for "
                                 f"{self._decode_room} at a time in max_length={self.max_length} slots")
            return
        if not isinstance(length, jax.core.Tracer):
            if int(length) + count > self.max_length:
                raise InputError(f"{self.name}: {count} more tokens after {int(length)} need {int(length) + count} "
                                 f"cache slots; max_length is {self.max_length}")
        elif checked:
            checkify.check(length + count <= self.max_length,
                           f"{self.name}: {count} more tokens after {{length}} overflow max_length={self.max_length}",
                           length=length)

    def _check_empty(self, cache: dict, checked: bool = False) -> None:
        """Where prefill and decode are two programs (`split`), refuse to prefill a cache that holds
        tokens, as `_check_room` refuses: at once when the length is known, through `checkify`
        when traced and `checked`."""
        if not self.split:
            return
        length = cache["length"]
        if not isinstance(length, jax.core.Tracer):
            if int(length):
                raise InputError(f"{self.name}: its prefill program starts from an empty cache (this one holds "
                                 f"{int(length)} tokens); continue with decode, one token at a time")
        elif checked:
            checkify.check(length == 0, f"{self.name}: its prefill program starts from an empty "
                           "cache; this one holds {length} tokens", length=length)

    def prefill_step(self, params, cache: dict, input_ids, attention_mask=None, *,
                     checked: bool = False) -> tuple[jax.Array, dict]:
        """Write a (left-padded) prompt into the cache at its `length`: (logits, cache).

        Pure, for use inside a caller's own `jit`; with `checked=True` a write past `max_length`
        is a `checkify` error (run it under `jax.experimental.checkify.checkify`), otherwise
        only `prefill` (outside jit) refuses it. Where prefill and decode are two programs
        (`split`), prefill writes into an empty cache only (recurrent states are started afresh,
        as transformers' prefill starts them); with `checked`, a cache holding tokens is a
        `checkify` error too."""
        input_ids = jnp.asarray(input_ids)
        self._check_room(cache, input_ids.shape[1], checked)
        self._check_empty(cache, checked)
        mask = jnp.ones(input_ids.shape, jnp.int32) if attention_mask is None else jnp.asarray(attention_mask, jnp.int32)
        slots, length = self._write_slots(cache, mask)
        # counted over every slot, so a prompt written after earlier tokens continues their positions
        positions = lax.dynamic_slice_in_dim(_positions(slots), length, input_ids.shape[1], axis=1)
        return self._run(params, cache, input_ids, slots, length, jnp.where(mask == 0, 0, positions))

    def decode_step(self, params, cache: dict, tokens, positions, *, checked: bool = False) -> tuple[jax.Array, dict]:
        """Write `tokens` [B, T] (usually T = 1) at `positions` [B, T]: (logits, cache). Pure;
        `checked` as for `prefill_step`. Where prefill and decode are two programs (`split`),
        decode takes one token at a time. A model that `rolls` decodes past `max_length`."""
        tokens = jnp.asarray(tokens)
        self._check_room(cache, tokens.shape[1], checked, decoding=True)
        if self.split and tokens.shape[1] != 1:
            raise InputError(f"{self.name}: its decode program takes one token at a time, got {tokens.shape[1]}")
        slots, length = self._write_slots(cache, jnp.ones(tokens.shape, jnp.int32))
        return self._run(params, cache, tokens, slots, length, jnp.asarray(positions), decoding=True)

    def _write_slots(self, cache: dict, flags: jax.Array) -> tuple[jax.Array, jax.Array]:
        """(slot mask, length): `flags` [B, T] (1 for a token, 0 for padding) written after the
        cache's `length` tokens, and the count of tokens before them that the program is given.

        Past `max_length`, a model that `rolls` keeps the flags of the last `max_length`
        positions: the mask is shifted left by the tokens that no longer fit, and the program is
        told that many fewer came before. Its windows keep the last tokens whatever their
        count, its positions come from the caller, and its masks compare positions with one
        another (transformers reads the slot mask at a window's positions, counted from that
        length), so it computes what it would at the true count."""
        length, count = cache["length"], flags.shape[1]
        if not self.rolls:
            return lax.dynamic_update_slice(cache["mask"], flags, (0, length)), length
        first = jnp.maximum(0, length - self.max_length)  # the position the mask's first slot holds
        then = jnp.maximum(0, length + count - self.max_length)
        mask = jnp.roll(cache["mask"], first - then, axis=1)  # what rolls round is overwritten below
        return lax.dynamic_update_slice(mask, flags, (0, length - then)), length - then

    def _run(self, params, cache, ids, slots, length, positions, decoding: bool = False):
        batch, count = ids.shape
        if batch != cache["mask"].shape[0]:
            raise InputError(f"{self.name}: {batch} rows of tokens for a cache of {cache['mask'].shape[0]}")
        if count > self.max_length:
            raise InputError(f"{self.name}: {count} tokens at once, more than max_length={self.max_length}")
        if decoding and self.decoder is not None:
            program = self.decoder
        else:
            program = self.step or self.prefill_program(count)
        logits, layers = program.apply(params, ids, slots, positions, length, list(cache["layers"]))
        return logits, {"layers": layers, "mask": slots, "length": cache["length"] + count}

    def prefill_program(self, count: int) -> JaxModel:
        """The program that prefills `count` tokens: `step`, or where the number of tokens is fixed
        in each program, the one for `count`, exported and converted the first time it is asked for."""
        if self.step is not None:
            return self.step
        with self._prefills_lock:
            if count not in self._prefills:
                with jax.ensure_compile_time_eval():  # may be met while tracing a caller's jit
                    self._prefills[count] = _share_weights(self._prefill_for(count), self.params)
            return self._prefills[count]

    def export(self, *, platforms: Sequence[str] | None = None, decoder: bool = False,
               prompt_length: int | None = None):
        """The step program as a serializable `jaxport.export` artifact (`ExportedModel`), with
        the batch and the number of new tokens symbolic: it serves both prefill and decode steps,
        `(input_ids, slot mask, positions, length, layer states) -> (logits, layer states)` (the
        artifact takes the states flat: each layer's arrays in turn, by sorted name), on
        its own weights, without PyTorch or the converter. Where prefill and decode are two
        programs (`split`) it is the prefill program; `decoder=True` gives the one-token program
        (one new token, a length of at least 1). Where each prompt length has its own prefill
        program, `prompt_length` says which."""
        if not decoder and self.step is None and prompt_length is None:
            raise InputError(f"{self.name}: each prompt length has its own prefill program; "
                             "export(prompt_length=...) one of them, or the decoder (decoder=True)")
        if decoder and self.decoder is None:
            raise InputError(f"{self.name}: one program serves prefill and decode; "
                             "export it with decoder=False")
        cache = self.init_cache(min(2, self.max_batch))
        batch = cache["mask"].shape[0]
        tokens = np.zeros((batch, 1 if decoder or prompt_length is None else prompt_length), np.int32)
        example = (tokens, np.asarray(cache["mask"]), tokens, np.int32(1 if decoder else 0),
                   list(cache["layers"]))
        program = self.decoder if decoder else self.prefill_program(tokens.shape[1])
        return export(program, example, dynamic="auto", platforms=platforms)

    # -- generation -----------------------------------------------------------------------------

    def generate(self, input_ids, attention_mask=None, *, max_new_tokens: int | None = None,
                 do_sample: bool | None = None, temperature: float | None = None, top_k: int | None = None,
                 top_p: float | None = None, eos_token_id: int | Sequence[int] | None = None,
                 pad_token_id: int | None = None, rng: jax.Array | None = None, params=None,
                 generation_config: Any = None, streamer: Any = None, **settings) -> jax.Array:
        """Hugging Face's `generate` for this model, one jitted function: the prompt `[B, P]`
        followed by up to `max_new_tokens` new tokens, `[B * num_return_sequences, P + n]`.

        Settings come as transformers resolves them: the call's keyword arguments (any
        `GenerationConfig` field), over `generation_config` if given, over the model's own
        generation config (so `do_sample=True` alone samples with its default top_k=50). Greedy
        or sampled, with transformers' processors: `repetition_penalty`, `no_repeat_ngram_size`,
        `bad_words_ids`, `sequence_bias`, `min_length`, `min_new_tokens`, `suppress_tokens`,
        `begin_suppress_tokens`, `forced_bos_token_id`, `forced_eos_token_id`,
        `remove_invalid_values`, then `temperature`, `top_k`, `top_p`, `min_p` when sampling,
        and `renormalize_logits` last (a log-softmax of the processed scores, which changes
        what beam search adds up);
        beam search (`num_beams`, `length_penalty`, `early_stopping`; `generation.beam`, one
        row of the cache per beam, so prompts x num_beams <= max_batch);
        `num_return_sequences` rows per prompt (sampling or beams); one or several `eos_token_id`. A field
        that would change the tokens and that jaxport does not implement is refused by name when
        it is set, wherever it was set. Rows stop independently at an EOS token and are padded
        with `pad_token_id` afterwards; generation ends when every row has stopped. Sampling draws
        from `rng` (default `jax.random.key(0)`): the same key gives the same tokens.

        `streamer`: an object with transformers' streamer methods (`put`, `end`: `TextStreamer`,
        `TextIteratorStreamer`, ...), given the prompt, then each step's new tokens `[B]` as NumPy
        arrays while the jitted loop runs (an ordered host callback per step, whose answer the
        loop's condition reads), then `end()`; see also `stream`. Not with beam search, as in
        transformers. What `put` raises (a `KeyboardInterrupt` too) stops the loop at its next
        step and is raised here; so is a `KeyboardInterrupt` while waiting for the loop. Without a
        streamer the loop has no callback and cannot be stopped: a `KeyboardInterrupt` arrives
        when it has finished. Either way the model is left as it was.
        """
        named = {"max_new_tokens": max_new_tokens, "do_sample": do_sample, "temperature": temperature,
                 "top_k": top_k, "top_p": top_p, "eos_token_id": eos_token_id, "pad_token_id": pad_token_id}
        call = self._prepare(input_ids, attention_mask, generation_config, {**named, **settings}, rng=rng,
                             params=params, streaming=streamer is not None)
        if streamer is None:
            tokens, steps = call.run(*call.args, np.int32(0))
        else:
            stream = Stream(self.name, streamer)
            try:
                stream.register()  # refuses a streamer another running call follows
                streamer.put(np.asarray(call.prompts))
                stream.start(call.run, call.args)
                tokens, steps = stream.result()
            except BaseException:  # a KeyboardInterrupt while waiting too: the loop stops at its next step
                stream.stop()
                raise
            streamer.end()
        return _joined(call.prompts, tokens, int(steps))

    def _prepare(self, input_ids, attention_mask, generation_config, settings: dict, *, rng, params,
                 streaming: bool) -> _Call:
        """Everything `generate` checks and resolves before it runs, in the caller's thread: the
        settings, the inputs, the jitted loop for them and its arguments."""
        settings = {k: v for k, v in settings.items() if not (k in _KEYWORDS and v is None)}
        config = self._resolve(generation_config, settings)
        ids = _token_array(input_ids, "input_ids")
        if ids.ndim != 2 or ids.shape[1] == 0:
            raise InputError(f"{self.name}: input_ids should be [batch, prompt length], got shape {tuple(ids.shape)}")
        sampling, beams, eos, pad, new = self._settings(config, ids.shape[1])
        if attention_mask is None:
            attention_mask = _default_mask(ids, eos, pad)
        mask = _token_array(attention_mask, "attention_mask")
        if mask.shape != ids.shape:
            raise InputError(f"{self.name}: attention_mask has shape {tuple(mask.shape)}, input_ids {tuple(ids.shape)}")
        if new < 1:
            raise InputError(f"{self.name}: max_new_tokens should be at least 1, got {new}")
        if self.rolls and ids.shape[1] > self.max_length:
            raise InputError(f"{self.name}: a prompt of {ids.shape[1]} tokens needs as many cache slots; "
                             f"max_length is {self.max_length}")
        if not self.rolls and ids.shape[1] + new > self.max_length:
            raise InputError(f"{self.name}: a prompt of {ids.shape[1]} tokens and {new} new ones need "
                             f"{ids.shape[1] + new} cache slots; max_length is {self.max_length}")
        if beams.num_beams > 1:
            if ids.shape[0] * beams.num_beams > self.max_batch:
                raise InputError(f"{self.name}: {ids.shape[0]} prompts with num_beams={beams.num_beams} need "
                                 f"{ids.shape[0] * beams.num_beams} cache rows; max_batch is {self.max_batch}")
            prompts = jnp.repeat(ids, beams.num_return_sequences, axis=0)
        else:
            if beams.num_return_sequences > 1:  # as transformers expands the prompts
                ids, mask = (jnp.repeat(x, beams.num_return_sequences, axis=0) for x in (ids, mask))
            self._check_batch(ids.shape[0])
            prompts = ids
        if streaming and beams.num_beams > 1:
            raise InputError(f"{self.name}: a streamer cannot follow beam search (num_beams={beams.num_beams}), "
                             "as in transformers")
        key = jax.random.key(0) if rng is None else rng
        self.prefill_program(ids.shape[1])  # exported outside the jitted loop, where it must be
        if params is None:
            if self.missing_weights:
                raise InputError(f"{self.name} has no values for {len(self.missing_weights)} weight(s) "
                                 f"('{self.missing_weights[0]}', ...): it was converted on the meta device. "
                                 "Give it weights with load_weights(model or state_dict), or pass params=")
            params = self.params
        structure, values = split(sampling)
        # The loop's buffers hold every token the cache has room for; the new-token count is a
        # value, so a new max_new_tokens compiles nothing. Beam search (whose buffers and length
        # penalties `new` shapes) and a rolling cache (no room to size them by) keep it static.
        room = None if beams.num_beams > 1 or self.rolls else self.max_length - ids.shape[1]
        values = {**values, "new": jnp.asarray(new, jnp.int32)}
        run = self._generator(structure, beams, eos, pad, new if room is None else room, streaming=streaming,
                              on_cpu=_on_cpu(params))
        return _Call(run, (params, ids, mask, key, values), prompts)

    def stream(self, input_ids, attention_mask=None, *, rng: jax.Array | None = None, params=None,
               generation_config: Any = None, **settings) -> Iterator[np.ndarray]:
        """`generate` as a Python generator: yields each step's new tokens `[B]` (NumPy) as the
        jitted loop makes them, the loop running in a thread of its own; settings as for
        `generate`, checked at the call (errors are raised here, in the caller's thread).

        Closing the generator (`break`, `close()`, an exception in the loop over it, the generator
        collected, a `KeyboardInterrupt`) stops the loop once the decode step it is in has
        finished and waits for its thread: nothing of it runs afterwards, and the model is as
        before. A stream left running at interpreter exit is stopped the same way."""
        call = self._prepare(input_ids, attention_mask, generation_config, settings, rng=rng, params=params,
                             streaming=True)
        return self._stream(call)

    def _stream(self, call: _Call) -> Iterator[np.ndarray]:
        items: queue.SimpleQueue = queue.SimpleQueue()
        finished = object()
        stream = Stream(self.name, _Enqueue(items), on_done=lambda: items.put(finished))
        try:
            stream.register()
            stream.start(call.run, call.args)
            while True:
                try:
                    item = items.get(timeout=POLL_SECONDS)  # timed, so that a KeyboardInterrupt arrives
                except queue.Empty:
                    continue
                if item is finished:
                    break
                yield item
        finally:  # closed, collected, interrupted, or finished
            stream.stop()  # a no-op once the loop has ended
        stream.check()

    def _resolve(self, generation_config, settings: dict) -> Any:
        """The generation config `generate` runs with: the model's, replaced by `generation_config`
        if given, updated with the call's settings; every field outside `_HONOURED` and `_INERT`
        refused by name where it differs from transformers' default."""
        from transformers import GenerationConfig

        config = copy.deepcopy(self.generation_config if generation_config is None else generation_config)
        defaults = GenerationConfig()
        unknown = sorted(k for k in settings if not hasattr(defaults, k))
        if unknown:
            raise InputError(f"{self.name}: generate() got unknown settings {', '.join(unknown)} "
                             "(neither its own arguments nor GenerationConfig fields)")
        for key, value in settings.items():
            setattr(config, key, value)
        neutral = transformers_adapter.default_generation_params()  # what transformers fills in for None
        for key, value in neutral.items():
            if getattr(config, key, None) is None:
                setattr(config, key, value)
        refused = [f"{k}={v!r}" for k, v in sorted(vars(config).items())
                   if k not in _HONOURED and k not in _INERT and v is not None and v is not False
                   and v != getattr(defaults, k, None) and not (k in neutral and v == neutral[k])]
        if refused:
            raise InputError(f"{self.name}: generate() does not implement {', '.join(refused)}; leave "
                             "them at transformers' defaults (they are set by the call or the generation config)")
        return config

    def _settings(self, config, prompt: int) -> tuple[Sampling, Beams, tuple[int, ...], int, int]:
        """(Sampling, Beams, EOS ids, pad id, new tokens) from a resolved config."""
        sample = bool(config.do_sample)
        copies = int(config.num_return_sequences or 1)
        beams = Beams(num_beams=int(config.num_beams or 1), length_penalty=float(config.length_penalty),
                      early_stopping=config.early_stopping, num_return_sequences=copies)
        if beams.num_beams > 1 and sample:
            raise InputError(f"{self.name}: generate() does not implement beam sampling (num_beams="
                             f"{beams.num_beams} with do_sample=True); use one or the other")
        if beams.num_beams > 1 and copies > beams.num_beams:
            raise InputError(f"{self.name}: num_return_sequences={copies} is more than num_beams={beams.num_beams}")
        if copies > 1 and not sample and beams.num_beams == 1:
            raise InputError(f"{self.name}: num_return_sequences={copies} needs do_sample=True (greedy "
                             "decoding gives one sequence per prompt, as in transformers)")
        eos = _token_ids(config.eos_token_id)
        pad = config.pad_token_id
        pad = (eos[0] if eos else 0) if pad is None else int(pad)  # transformers pads with EOS then
        if config.max_new_tokens is not None:
            new = int(config.max_new_tokens)
        else:
            new = int(config.max_length) - prompt
        min_new = int(config.min_new_tokens or 0)
        bad_words = tuple(tuple(int(t) for t in w) for w in (config.bad_words_ids or ())
                          if list(w) not in [[e] for e in eos])  # transformers never bans EOS alone
        sampling = Sampling(
            do_sample=sample,
            temperature=float(config.temperature if config.temperature is not None else 1.0) if sample else 1.0,
            top_k=(int(config.top_k or 0) or None) if sample else None,
            top_p=float(config.top_p if config.top_p is not None else 1.0) if sample else None,
            min_p=float(config.min_p) if sample and config.min_p is not None else None,
            repetition_penalty=float(config.repetition_penalty) if config.repetition_penalty is not None else None,
            no_repeat_ngram_size=int(config.no_repeat_ngram_size or 0),
            encoder_repetition_penalty=(None if config.encoder_repetition_penalty is None
                                        else float(config.encoder_repetition_penalty)),
            encoder_no_repeat_ngram_size=int(config.encoder_no_repeat_ngram_size or 0),
            sequence_bias=_sequence_biases(config.sequence_bias),
            bad_words_ids=bad_words,
            min_length=int(config.min_length or 0),
            min_new_tokens=min_new,
            suppress_tokens=_token_ids(config.suppress_tokens),
            begin_suppress_tokens=_token_ids(config.begin_suppress_tokens),
            forced_bos_token_id=None if config.forced_bos_token_id is None else int(config.forced_bos_token_id),
            forced_eos_token_id=_token_ids(config.forced_eos_token_id),
            remove_invalid_values=bool(config.remove_invalid_values),
            renormalize_logits=bool(config.renormalize_logits),
        )
        return sampling, beams, eos, pad, new

    def _generator(self, settings: Sampling, beams: Beams, eos: tuple[int, ...], pad: int, new: int,
                   streaming: bool = False, on_cpu: bool = False):
        """The jitted loop for a structure of settings (`sampling.split`); `new` the token buffer's
        size (the most new tokens it makes; how many it makes is the `values` argument's "new")."""
        key = (settings, beams, eos, pad, new, streaming, on_cpu)
        with self._generators_lock:
            if key not in self._generators:
                self._generators[key] = jax.jit(self._loop(settings, beams, eos, pad, new, streaming),
                                                compiler_options=_CPU_LOOP_OPTIONS if on_cpu else None)
            return self._generators[key]

    def _loop(self, settings: Sampling, beams: Beams, eos: tuple[int, ...], pad: int, new: int,
              streaming: bool) -> Callable:
        """`run(params, ids, mask, rng, values, stream id) -> (new tokens, steps)`, to be jitted."""
        if beams.num_beams > 1:
            def run(params, ids, mask, rng, values, stream):
                sequences, steps = beam_search(
                    self.prefill_step, self.decode_step, self.init_cache, params, ids, mask, beams=beams,
                    settings=settings, eos=eos, pad=pad, new=new, positions=_positions,
                    values={k: v for k, v in values.items() if k != "new"})
                return sequences[:, ids.shape[1]:], steps
        else:
            def run(params, ids, mask, rng, values, stream):
                return self._generate(params, ids, mask, rng, stream, settings, eos, pad, new, streaming, values)
        return run

    def _generate(self, params, ids, mask, rng, stream, settings: Sampling, eos, pad, room, streaming=False,
                  values=None):
        """Greedy or sampled decoding as one `while_loop` of `values["new"]` steps at most, into a
        buffer of `room` tokens. Streaming, each step's tokens go to the host (`streaming.emit`,
        with the `stream` id), whose answer the loop's condition reads: a cancelled stream's loop
        ends after the step it is in."""
        values = dict(values)
        new = values.pop("new")
        batch, prompt = ids.shape
        logits, cache = self.prefill_step(params, self.init_cache(batch), ids, mask)
        last = jnp.max(_positions(mask), axis=-1, keepdims=True)
        eos_ids = jnp.asarray(eos, jnp.int32)
        padding = jnp.argmax(mask != 0, axis=1)  # each row's left padding: no repetition penalty there
        sequence = jnp.concatenate([ids, jnp.full((batch, room), pad, jnp.int32)], axis=1)

        def pick(logits, step, sequence):
            scores = process_scores(logits, sequence, prompt + step, settings=settings, eos=eos,
                                    prompt_length=prompt, max_length=prompt + new, prompt_start=padding,
                                    values=values)
            if not settings.do_sample:
                return jnp.argmax(scores, axis=-1).astype(jnp.int32)
            return jax.random.categorical(jax.random.fold_in(rng, step), scores, axis=-1).astype(jnp.int32)

        def finished(tokens):
            return jnp.isin(tokens, eos_ids) if eos else jnp.zeros(tokens.shape, bool)

        def emit(token):  # whether the loop goes on
            if not streaming:
                return jnp.asarray(True)
            return io_callback(emit_to_host, jax.ShapeDtypeStruct((), jnp.bool_), stream, token, ordered=True)

        first = pick(logits[:, -1], 0, sequence)
        go = emit(first)
        sequence = sequence.at[:, prompt].set(first)

        def cond(state):
            step, _, done, _, _, go = state
            return (step < new) & ~jnp.all(done) & go

        def body(state):
            step, sequence, done, last, cache, _ = state
            previous = lax.dynamic_slice_in_dim(sequence, prompt + step - 1, 1, axis=1)
            logits, cache = self.decode_step(params, cache, previous, last + 1)
            token = jnp.where(done, pad, pick(logits[:, -1], step, sequence))
            go = emit(token)
            sequence = lax.dynamic_update_slice_in_dim(sequence, token[:, None], prompt + step, axis=1)
            return step + 1, sequence, done | finished(token), last + 1, cache, go

        state = (jnp.asarray(1, jnp.int32), sequence, finished(first), last, cache, go)
        steps, sequence, *_ = lax.while_loop(cond, body, state)
        return sequence[:, prompt:], steps


def _joined(prompts: jax.Array, tokens: jax.Array, steps: int) -> jax.Array:
    """The prompts followed by the first `steps` new tokens, placed as the prompts are. Joined on
    the host where the arrays are all here: a JAX slice and concatenation would compile once per
    length made."""
    if not (prompts.is_fully_addressable and tokens.is_fully_addressable):
        return jnp.concatenate([prompts, tokens[:, :steps]], axis=1)
    joined = np.concatenate([np.asarray(prompts), np.asarray(tokens)[:, :steps]], axis=1)
    return jax.device_put(joined, prompts.sharding)


class _Enqueue:
    """The streamer `stream` gives its loop: each step's tokens into the generator's queue."""

    def __init__(self, items: queue.SimpleQueue):
        self.put = items.put


def _token_ids(value) -> tuple[int, ...]:
    """A generation config's token id setting (None, one id, or a list of them) as a tuple."""
    if value is None:
        return ()
    return tuple(int(t) for t in (value if isinstance(value, (list, tuple)) else [value]))


def _sequence_biases(value) -> tuple[tuple[tuple[int, ...], float], ...]:
    """transformers' `sequence_bias` (a dict of token tuples, or a list of [tokens, bias] pairs)
    as a hashable tuple."""
    if not value:
        return ()
    pairs = value.items() if isinstance(value, dict) else value
    return tuple((tuple(int(t) for t in tokens), float(bias)) for tokens, bias in pairs)


def _token_array(value, what: str) -> jax.Array:
    """Token ids (or a mask) as an int32 JAX array, through the one input converter: a JAX array
    stays where it is (a batch sharded over a mesh stays sharded)."""
    array = as_jax(value, what)
    if not hasattr(array, "dtype"):
        array = jnp.asarray(array)
    if not (jnp.issubdtype(array.dtype, jnp.integer) or array.dtype == jnp.bool_):
        raise InputError(f"{what} should hold integers, got {array.dtype}")
    if array.dtype.itemsize > 4 and not isinstance(array, jax.core.Tracer) and array.size and (
            int(array.min()) < np.iinfo(np.int32).min or int(array.max()) > np.iinfo(np.int32).max):
        raise InputError(f"{what} holds values beyond int32")
    return array.astype(jnp.int32)


def _default_mask(ids: jax.Array, eos: tuple[int, ...], pad: int) -> jax.Array:
    """transformers' default attention mask: the tokens that are not padding, where the padding
    token is distinct from EOS and present; otherwise every token."""
    if pad not in eos and bool(jnp.any(ids == pad)):
        return (ids != pad).astype(jnp.int32)
    return jnp.ones(ids.shape, jnp.int32)


def from_causal_lm(model: torch.nn.Module, *, max_length: int, max_batch: int = 1, dtype: Any = None) -> CausalLM:
    """Convert a Hugging Face causal LM (`AutoModelForCausalLM`) for generation in JAX.

    Args:
      model: the `PreTrainedModel`; its parameters become `CausalLM.params`.
      max_length: cache slots per row: the longest prompt plus new tokens. A model whose every layer
        keeps a sliding window decodes past it (`CausalLM.rolls`): it bounds the prompt only.
      max_batch: the most rows a cache holds (the step is exported with the batch symbolic, 1..max_batch).
        A model whose batched decoding is not its own row by row (RWKV's) raises `MaxBatchError` above 1.
      dtype: a precision policy, as for `from_torch`: `jnp.bfloat16` runs a float32 checkpoint as
        `torch.autocast` would (the cache then holds bfloat16 keys and values);
        `jaxport.Precision(compute=jnp.bfloat16, params=jnp.bfloat16)` stores the weights in it too.
    """
    if not is_model(model):
        raise InputError(f"from_causal_lm takes a transformers PreTrainedModel, got {type(model).__name__}")
    transformers_adapter.require()
    if max_length < 2 or max_batch < 1:
        raise InputError(f"from_causal_lm: max_length should be at least 2 and max_batch at least 1, "
                         f"got {max_length} and {max_batch}")
    policy = precision_policy(dtype)
    if policy is None:
        return _from_causal_lm(model, max_length, max_batch, contextlib.nullcontext)
    autocast = functools.partial(policy.autocast, module_device(model))  # autocast of the model's device
    with autocast():  # the cache probe and the exports all run under it
        return _from_causal_lm(policy.prepare(model), max_length, max_batch, autocast)


class _FixedCount(ExportError):
    """torch.export fixed the number of new tokens of a step meant to take any number."""


def _from_causal_lm(model, max_length: int, max_batch: int, autocast: Callable) -> CausalLM:
    if callable(getattr(model, "build_delay_pattern_mask", None)):
        # MusicGen: its preparation of each step's inputs overwrites them with a delay pattern
        # over its codebooks (each codebook one step behind the one before), which a step over
        # given tokens does not apply
        raise InputError(f"{type(model).__name__}: its generate lays each step's codebooks out in a delay "
                         "pattern (build_delay_pattern_mask), which from_causal_lm does not reproduce")
    step = CausalLMStep(model, max_length)
    if max_batch > 1 and step.decoding_mixes_rows():
        raise MaxBatchError(f"{type(model).__name__}: decoding two rows at once mixes their states in transformers' "
                            "code (a [B, H] state added to [B, 1, H] activations), so its batched tokens are not its "
                            "own row by row; from_causal_lm takes it with max_batch=1", max_batch=1)
    batch = min(2, max_batch)  # 2 keeps torch.export from specializing the batch to 1
    specs = step.cache_specs(batch)
    rows = torch.export.Dim("batch", min=1, max=max_batch) if max_batch > 1 else torch.export.Dim.STATIC
    try:
        step, converted, decoder, prefill_for = _convert_steps(step, specs, rows, autocast)
    except ExportError:
        if step.decoding_ignores_mask():
            raise InputError(f"{type(model).__name__}: its decoder builds no attention mask once it has a cache, so "
                             "over a cache of fixed slots it would attend to the empty ones; from_causal_lm does "
                             "not take it") from None
        raise
    return CausalLM(converted, cache_specs=step.cache_specs(1), decoder=decoder, prefill_for=prefill_for,
                    max_batch=max_batch, max_length=max_length, layer_types=_layer_types(step.text_config),
                    generation_config=_generation_config(model), name=type(model).__name__, rolls=step.windows_only)


def _layer_types(config) -> list[str]:
    """Each layer's attention: the config's `layer_types`, else as transformers' cache reads a
    config without them (Mistral's): a `sliding_window` makes every layer a sliding one, an
    `attention_chunk_size` a chunked one."""
    kinds = getattr(config, "layer_types", None)
    if kinds:
        return list(kinds)
    if getattr(config, "sliding_window", None) is not None:
        kind = "sliding_attention"
    elif getattr(config, "attention_chunk_size", None) is not None:
        kind = "chunked_attention"
    else:
        kind = "full_attention"
    return [kind] * config.num_hidden_layers


def _convert_steps(step: CausalLMStep, specs, rows, autocast: Callable):
    """(step, converted, decoder, prefill_for): one program for prefill and decode where
    torch.export keeps the token count symbolic, else a decoder and a prefill program per prompt
    length (`step` then its split variant)."""
    converted = decoder = prefill_for = None
    if not step.split:
        try:
            converted = _convert_step(step, specs, rows, tokens=2)
        except ExportError as e:
            # code that branches on whether the cache holds tokens (GIT's `past_length > 0`): a
            # prefill from an empty cache and a decode after it are each one program
            if "GuardOnDataDependentSymNode" not in str(e):
                raise
            step = step.variant(split=True)
    if step.split:
        decoder = _convert_step(step.variant(decoding=True), specs, rows, tokens=1)

        def prefill_for(count: int) -> JaxModel:
            with autocast():
                return _convert_step(step, specs, rows, tokens=count, fixed=True)
        try:
            converted = _convert_step(step, specs, rows, tokens=2)
        except _FixedCount:
            pass  # a scan over the prompt in Python: `prefill_for` makes a program per prompt length
    return step, converted, decoder, prefill_for


def _convert_step(step: CausalLMStep, specs, rows, *, tokens: int, fixed: bool = False) -> JaxModel:
    """`step` exported and converted: the batch symbolic (`rows`), and the number of new tokens
    symbolic from an example of `tokens`, or fixed at `tokens` when `fixed` or 1 (a one-token
    decoder); `_FixedCount` where torch.export fixes a count meant to be symbolic."""
    batch = next(shape[0] for layer in specs for shape, _ in layer.values())
    device = module_device(step.model)  # examples where the model is: cuda, cpu, or meta
    states = [{name: torch.zeros(shape, dtype=dtype, device=device) for name, (shape, dtype) in layer.items()}
              for layer in specs]
    ids = torch.zeros(batch, tokens, dtype=torch.long, device=device)
    example = (ids, torch.ones(batch, step.max_length, dtype=torch.long, device=device), torch.zeros_like(ids),
               torch.tensor(1 if step.decoding else 0, device=device), states)
    per_layer = [{name: {0: rows} for name in layer} for layer in states]

    def convert(count):
        count = count or torch.export.Dim.STATIC
        dynamic = ({0: rows, 1: count}, {0: rows}, {0: rows, 1: count}, None, per_layer)
        converted = from_torch(step, example, dynamic_shapes=dynamic, train=False)
        converted.name = type(step.model).__name__  # errors name the user's model, not the wrapper
        return converted

    if fixed or tokens == 1:
        return convert(None)
    try:
        return convert(torch.export.Dim("tokens", min=1, max=step.max_length))
    except ExportError as e:
        # torch.export's solver cannot always prove a guard that holds for every token count
        # (Aria's `T * min(64, 64 * T) == 64 * T`); let it keep the count dynamic under its guards
        if "Constraints violated (tokens)" not in str(e):
            raise
        try:
            converted = convert(torch.export.Dim.AUTO)
        except ExportError as again:
            if "Constraints violated" not in str(again):
                raise
            converted = None  # the count fixed, and the batch with it
        # fixed, or kept dynamic over fewer counts than the cache holds (MiniMax's blocks of
        # tokens, looped over in Python: 2 to 4 tokens, one block)
        symbol = converted.program.user_inputs[0].dims.get(1) if converted is not None else None
        low, high = converted.program.dim_ranges.get(symbol, (1, None)) if symbol is not None else (1, None)
        if symbol is None or low > 2 or (high is not None and high < step.max_length):
            raise _FixedCount(f"{type(step.model).__name__}: torch.export fixes the number of new tokens of its "
                              f"step, so it cannot serve both prefill and decode ({e})") from None
        return converted


def _generation_config(model) -> Any:
    """The model's generation config with transformers' global defaults filled in, as its
    `generate` resolves it before applying the call's own settings."""
    try:
        config, _ = model._prepare_generation_config(None)
    except Exception:  # noqa: BLE001 - an older transformers: its config as it is
        config = model.generation_config
    return config
