"""Language models that generate: a Hugging Face causal LM as pure JAX over an explicit KV cache.

`from_causal_lm` exports one step of the model with `torch.export`
(`generation.step.CausalLMStep`: new tokens in, logits and the written cache out, the
batch and the number of new tokens symbolic) and converts it once (`generation.convert`); prefill
(T = prompt length) and decode (T = 1) are two JAX traces of that one program. A model with
recurrent layers (Mamba, Jamba, Qwen3-Next, ...) gets two programs, a prefill from an empty cache
and a one-token decode, as transformers runs them through different code; so does a model whose
code branches on whether its cache is empty (GIT), which torch.export cannot trace as one program.
The cache is a pytree of preallocated arrays the caller owns (`generation.cache_layout`).

Rows of different prompt lengths are left-padded, as Hugging Face pads them for generation:
every row writes the same slots, and the mask keeps each row's padding out of attention.
`generate` runs prefill and a `lax.while_loop` of decode steps as one jitted function
(`generation.decode`), with greedy or sampled tokens chosen as transformers' logits processors
choose them, its settings resolved as transformers resolves them (`generation.settings`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import torch
from jax import lax
from jax.sharding import Mesh

from ..backends.inputs import as_jax, is_abstract
from ..backends.model import JaxModel
from ..errors import InputError
from ..placement import Rule
from . import convert
from .beam import Beams
from .cache_layout import CacheLayout
from .cache_layout import positions as _positions
from .decode import Loops, on_cpu
from .export import export_step
from .sampling import Sampling, split
from .settings import _HONOURED as _HONOURED  # the allow-list, read here by the tests
from .settings import default_mask, explicit, read_config, resolve_config
from .streaming import emit as emit_to_host  # the host callback a streaming loop made now calls
from .streaming import follow, generator


class _Call(NamedTuple):
    """A checked `generate` call, ready to run: `run(*args, stream id)` gives `(new tokens, steps)`."""

    run: Callable
    args: tuple
    prompts: jax.Array


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
    (`CacheLayout.write_slots`); the cache's `length` counts every token, its mask the last `max_length`.
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
            convert.share_weights(decoder, self.params)
        self.max_batch = max_batch
        self.max_length = max_length
        self._layout = CacheLayout(name, cache_specs, max_batch=max_batch, max_length=max_length, rolls=rolls,
                                   split=self.split)
        #: Each layer's attention ("full_attention", "sliding_attention", ...), as the model's config
        #: says or, where it names none, as transformers' cache reads it (`convert._layer_types`).
        self.layer_types = tuple(layer_types)
        #: The model's generation config with transformers' defaults filled in: `generate`'s defaults.
        self.generation_config = generation_config
        self.name = name
        #: Whether decoding goes on past `max_length`: every layer keeps a sliding window only, of
        #: fewer slots (see `CacheLayout.write_slots`, and its `decode_room`, the most tokens a step).
        self.rolls = rolls
        self._jitted_prefill = jax.jit(self.prefill_step, donate_argnums=1)
        self._jitted_decode = jax.jit(self.decode_step, donate_argnums=1)
        #: The jitted generation loops, one per structure of settings.
        self._generators = Loops(self.prefill_step, self.decode_step, self.init_cache)

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
                    convert.share_weights(other, self.params)  # what `export` of each program carries
        return self

    def __repr__(self) -> str:
        return (f"CausalLM({self.name}: {len(self._layout.specs)} layers, max_batch={self.max_batch}, "
                f"max_length={self.max_length})")

    # -- the cache ----------------------------------------------------------------------------

    def init_cache(self, batch: int) -> dict:
        """An empty cache for `batch` rows: zeros, every slot unused."""
        return self._layout.init(batch)

    # -- the steps: jitted, and pure -----------------------------------------------------------

    def prefill(self, params, cache: dict, input_ids, attention_mask=None) -> tuple[jax.Array, dict]:
        """`prefill_step`, jitted, with the cache donated; refuses a prompt the cache has no room for
        (it reads the cache's length back from the device to check)."""
        self._layout.check_room(cache, np.shape(input_ids)[-1])
        self._layout.check_empty(cache)
        return self._jitted_prefill(params, cache, input_ids, attention_mask)

    def decode(self, params, cache: dict, tokens, positions) -> tuple[jax.Array, dict]:
        """`decode_step`, jitted, with the cache donated; refuses tokens the cache has no room for."""
        self._layout.check_room(cache, np.shape(tokens)[-1], decoding=True)
        return self._jitted_decode(params, cache, tokens, positions)

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
        self._layout.check_room(cache, input_ids.shape[1], checked)
        self._layout.check_empty(cache, checked)
        mask = jnp.ones(input_ids.shape, jnp.int32) if attention_mask is None else jnp.asarray(attention_mask, jnp.int32)
        slots, length = self._layout.write_slots(cache, mask)
        # counted over every slot, so a prompt written after earlier tokens continues their positions
        positions = lax.dynamic_slice_in_dim(_positions(slots), length, input_ids.shape[1], axis=1)
        return self._run(params, cache, input_ids, slots, length, jnp.where(mask == 0, 0, positions))

    def decode_step(self, params, cache: dict, tokens, positions, *, checked: bool = False) -> tuple[jax.Array, dict]:
        """Write `tokens` [B, T] (usually T = 1) at `positions` [B, T]: (logits, cache). Pure;
        `checked` as for `prefill_step`. Where prefill and decode are two programs (`split`),
        decode takes one token at a time. A model that `rolls` decodes past `max_length`."""
        tokens = jnp.asarray(tokens)
        self._layout.check_room(cache, tokens.shape[1], checked, decoding=True)
        if self.split and tokens.shape[1] != 1:
            raise InputError(f"{self.name}: its decode program takes one token at a time, got {tokens.shape[1]}")
        slots, length = self._layout.write_slots(cache, jnp.ones(tokens.shape, jnp.int32))
        return self._run(params, cache, tokens, slots, length, jnp.asarray(positions), decoding=True)

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
                    self._prefills[count] = convert.share_weights(self._prefill_for(count), self.params)
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
        tokens = 1 if decoder or prompt_length is None else prompt_length
        program = self.decoder if decoder else self.prefill_program(tokens)
        return export_step(program, self.init_cache(min(2, self.max_batch)), tokens=tokens, decoder=decoder,
                           platforms=platforms)

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
            tokens, steps = follow(self.name, streamer, call.prompts, call.run, call.args)
        return _joined(call.prompts, tokens, int(steps))

    def _prepare(self, input_ids, attention_mask, generation_config, settings: dict, *, rng, params,
                 streaming: bool) -> _Call:
        """Everything `generate` checks and resolves before it runs, in the caller's thread: the
        settings, the inputs, the jitted loop for them and its arguments."""
        config = self._resolve(generation_config, explicit(settings))
        ids = _token_array(input_ids, "input_ids")
        if ids.ndim != 2 or ids.shape[1] == 0:
            raise InputError(f"{self.name}: input_ids should be [batch, prompt length], got shape {tuple(ids.shape)}")
        sampling, beams, eos, pad, new = self._settings(config, ids.shape[1])
        if attention_mask is None:
            attention_mask = default_mask(ids, eos, pad)
        mask = _token_array(attention_mask, "attention_mask")
        if mask.shape != ids.shape:
            raise InputError(f"{self.name}: attention_mask has shape {tuple(mask.shape)}, input_ids {tuple(ids.shape)}")
        if new < 1:
            raise InputError(f"{self.name}: max_new_tokens should be at least 1, got {new}")
        self._layout.check_prompts(ids.shape[0], ids.shape[1], new, beams.num_beams)
        if beams.num_beams > 1:
            prompts = jnp.repeat(ids, beams.num_return_sequences, axis=0)
        else:
            if beams.num_return_sequences > 1:  # as transformers expands the prompts
                ids, mask = (jnp.repeat(x, beams.num_return_sequences, axis=0) for x in (ids, mask))
            self._layout.check_batch(ids.shape[0])
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
                              on_cpu=on_cpu(params))
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
        return generator(self.name, call.run, call.args)

    def _resolve(self, generation_config, settings: dict) -> Any:
        """The generation config `generate` runs with (`settings.resolve_config`)."""
        return resolve_config(self.name, self.generation_config, generation_config, settings)

    def _settings(self, config, prompt: int) -> tuple[Sampling, Beams, tuple[int, ...], int, int]:
        """(Sampling, Beams, EOS ids, pad id, new tokens) from a resolved config (`settings.read_config`)."""
        return read_config(self.name, config, prompt)

    def _generator(self, settings: Sampling, beams: Beams, eos: tuple[int, ...], pad: int, new: int,
                   streaming: bool = False, on_cpu: bool = False):
        """The jitted loop for a structure of settings (`sampling.split`); `new` the token buffer's
        size (the most new tokens it makes; how many it makes is the `values` argument's "new")."""
        return self._generators.get(settings, beams, eos, pad, new, streaming, on_cpu, to_host=emit_to_host)


def _joined(prompts: jax.Array, tokens: jax.Array, steps: int) -> jax.Array:
    """The prompts followed by the first `steps` new tokens, placed as the prompts are. Joined on
    the host where the arrays are all here: a JAX slice and concatenation would compile once per
    length made."""
    if not (prompts.is_fully_addressable and tokens.is_fully_addressable):
        return jnp.concatenate([prompts, tokens[:, :steps]], axis=1)
    joined = np.concatenate([np.asarray(prompts), np.asarray(tokens)[:, :steps]], axis=1)
    return jax.device_put(joined, prompts.sharding)


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
    return CausalLM(**convert.convert(model, max_length=max_length, max_batch=max_batch, dtype=dtype))
