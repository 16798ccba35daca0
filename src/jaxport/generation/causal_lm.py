"""Language models that generate: a Hugging Face causal LM as pure JAX over an explicit KV cache.

`from_causal_lm` exports one step of the model with `torch.export`
(`generation.step.CausalLMStep`: new tokens in, logits and the written cache out, the
batch and the number of new tokens symbolic) and converts it once; prefill (T = prompt length)
and decode (T = 1) are two JAX traces of that one program. The cache is a pytree of preallocated
arrays the caller owns:

    {"layers": [{"keys": [B, kv_heads, L, head_dim], "values": [...]}, ...],  # one per layer
     "mask": int32 [B, L],   # 1 where a slot holds a token, 0 for padding or unused slots
     "length": int32 []}     # slots used so far: where the next tokens go (shared by all rows)

Rows of different prompt lengths are left-padded, as Hugging Face pads them for generation:
every row writes the same slots, and the mask keeps each row's padding out of attention.
`generate` runs prefill and a `lax.while_loop` of decode steps as one jitted function, with
greedy or sampled tokens chosen as transformers' logits processors choose them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import torch
from jax import lax

from .. import dtypes
from ..backends.inputs import as_jax
from ..backends.model import JaxModel
from ..backends.serialization import export
from ..convert import from_torch
from ..errors import InputError
from ..frontends.hugging_face import is_model
from .sampling import Sampling, process_logits
from .step import CausalLMStep

#: Generation settings a Hugging Face generation config may hold that change the tokens and that
#: `CausalLM.generate` does not implement, with the value that leaves them off.
_UNSUPPORTED_SETTINGS = {
    "num_beams": 1, "repetition_penalty": 1.0, "no_repeat_ngram_size": 0, "bad_words_ids": None,
    "min_length": 0, "min_new_tokens": None, "forced_bos_token_id": None, "forced_eos_token_id": None,
    "suppress_tokens": None, "begin_suppress_tokens": None, "sequence_bias": None, "min_p": None,
    "typical_p": 1.0, "epsilon_cutoff": 0.0, "eta_cutoff": 0.0, "top_h": None, "renormalize_logits": False,
    "exponential_decay_length_penalty": None, "guidance_scale": None, "encoder_repetition_penalty": 1.0,
    "encoder_no_repeat_ngram_size": 0, "diversity_penalty": 0.0, "penalty_alpha": None,
    "low_memory": None, "watermarking_config": None,
}


def _positions(mask: jax.Array) -> jax.Array:
    """Hugging Face's position ids for a left-padded slot mask: tokens count from 0, padding is 0."""
    return jnp.where(mask == 0, 0, jnp.cumsum(mask, axis=-1) - 1)


class CausalLM:
    """A converted causal language model: `params`, and pure functions over an explicit cache.

    `prefill(params, cache, input_ids, attention_mask)` and `decode(params, cache, tokens,
    positions)` return `(logits [B, T, vocab], cache)`; both are jitted with the cache donated, so
    XLA writes the new keys and values into the arrays passed in. `generate` is Hugging Face's
    `generate` as one jitted function. Built by `jaxport.from_causal_lm`.
    """

    def __init__(self, step: JaxModel, *, cache_shapes: Sequence[tuple[int, ...]], cache_dtype,
                 max_batch: int, max_length: int, layer_types: Sequence[str], generation_config: Any,
                 name: str):
        self.step = step
        self.params = step.params
        self.max_batch = max_batch
        self.max_length = max_length
        #: Each layer's attention ("full_attention", "sliding_attention", ...), as the model's config says.
        self.layer_types = tuple(layer_types)
        #: The model's generation config with transformers' defaults filled in: `generate`'s defaults.
        self.generation_config = generation_config
        self.name = name
        self._cache_shapes = [(tuple(k[1:]), tuple(v[1:])) for k, v in cache_shapes]
        self._cache_dtype = cache_dtype
        self.prefill = jax.jit(self.prefill_step, donate_argnums=1)
        self.decode = jax.jit(self.decode_step, donate_argnums=1)
        self._generators: dict = {}

    def __repr__(self) -> str:
        return (f"CausalLM({self.name}: {len(self._cache_shapes)} layers, max_batch={self.max_batch}, "
                f"max_length={self.max_length})")

    # -- the cache ----------------------------------------------------------------------------

    def _check_batch(self, batch: int) -> None:
        if not 1 <= batch <= self.max_batch:
            raise InputError(f"{self.name}: batch {batch} is outside 1..{self.max_batch} (max_batch of from_causal_lm)")

    def init_cache(self, batch: int) -> dict:
        """An empty cache for `batch` rows: zeros, every slot unused."""
        self._check_batch(batch)
        return {
            "layers": [{"keys": jnp.zeros((batch, *k), self._cache_dtype),
                        "values": jnp.zeros((batch, *v), self._cache_dtype)} for k, v in self._cache_shapes],
            "mask": jnp.zeros((batch, self.max_length), jnp.int32),
            "length": jnp.zeros((), jnp.int32),
        }

    # -- pure steps (jitted as `prefill` and `decode`) --------------------------------------

    def prefill_step(self, params, cache: dict, input_ids, attention_mask=None) -> tuple[jax.Array, dict]:
        """Write a (left-padded) prompt into the cache at its `length`: (logits, cache)."""
        input_ids = jnp.asarray(input_ids)
        mask = jnp.ones(input_ids.shape, jnp.int32) if attention_mask is None else jnp.asarray(attention_mask, jnp.int32)
        slots = lax.dynamic_update_slice(cache["mask"], mask, (0, cache["length"]))
        # counted over every slot, so a prompt written after earlier tokens continues their positions
        positions = lax.dynamic_slice_in_dim(_positions(slots), cache["length"], input_ids.shape[1], axis=1)
        return self._run(params, cache, input_ids, slots, jnp.where(mask == 0, 0, positions))

    def decode_step(self, params, cache: dict, tokens, positions) -> tuple[jax.Array, dict]:
        """Write `tokens` [B, T] (usually T = 1) at `positions` [B, T]: (logits, cache)."""
        tokens = jnp.asarray(tokens)
        slots = lax.dynamic_update_slice(cache["mask"], jnp.ones(tokens.shape, jnp.int32), (0, cache["length"]))
        return self._run(params, cache, tokens, slots, jnp.asarray(positions))

    def _run(self, params, cache, ids, slots, positions):
        batch, count = ids.shape
        if batch != cache["mask"].shape[0]:
            raise InputError(f"{self.name}: {batch} rows of tokens for a cache of {cache['mask'].shape[0]}")
        if count > self.max_length:
            raise InputError(f"{self.name}: {count} tokens at once, more than max_length={self.max_length}")
        keys = [layer["keys"] for layer in cache["layers"]]
        values = [layer["values"] for layer in cache["layers"]]
        logits, keys, values = self.step.apply(params, ids, slots, positions, cache["length"], keys, values)
        layers = [{"keys": k, "values": v} for k, v in zip(keys, values)]
        return logits, {"layers": layers, "mask": slots, "length": cache["length"] + count}

    def export(self, *, platforms: Sequence[str] | None = None):
        """The step program as a serializable `jaxport.export` artifact (`ExportedModel`), with
        the batch and the number of new tokens symbolic: it serves both prefill and decode steps,
        `(input_ids, slot mask, positions, length, keys, values) -> (logits, keys, values)`, on
        its own weights, without PyTorch or the converter."""
        cache = self.init_cache(min(2, self.max_batch))
        batch = cache["mask"].shape[0]
        tokens = np.zeros((batch, 1), np.int32)
        example = (tokens, np.asarray(cache["mask"]), tokens, np.int32(0),
                   [layer["keys"] for layer in cache["layers"]], [layer["values"] for layer in cache["layers"]])
        return export(self.step, example, dynamic="auto", platforms=platforms)

    # -- generation -----------------------------------------------------------------------------

    def generate(self, input_ids, attention_mask=None, *, max_new_tokens: int, do_sample: bool | None = None,
                 temperature: float | None = None, top_k: int | None = None, top_p: float | None = None,
                 eos_token_id: int | Sequence[int] | None = None, pad_token_id: int | None = None,
                 rng: jax.Array | None = None, params=None) -> jax.Array:
        """Hugging Face's `generate` for this model, one jitted function: the prompt `[B, P]`
        followed by up to `max_new_tokens` new tokens, `[B, P + n]`.

        Settings left None come from the model's generation config as transformers resolves it
        (so `do_sample=True` alone samples with its default top_k=50). Rows stop independently at
        an EOS token and are padded with `pad_token_id` afterwards; generation ends when every
        row has stopped, as in transformers. Sampling draws from `rng` (default
        `jax.random.key(0)`): the same key gives the same tokens.
        """
        ids = _token_array(input_ids, "input_ids")
        if ids.ndim != 2 or ids.shape[1] == 0:
            raise InputError(f"{self.name}: input_ids should be [batch, prompt length], got shape {tuple(ids.shape)}")
        settings, eos, pad = self._settings(do_sample, temperature, top_k, top_p, eos_token_id, pad_token_id)
        if attention_mask is None:
            attention_mask = _default_mask(ids, eos, pad)
        mask = _token_array(attention_mask, "attention_mask")
        if mask.shape != ids.shape:
            raise InputError(f"{self.name}: attention_mask has shape {tuple(mask.shape)}, input_ids {tuple(ids.shape)}")
        if max_new_tokens < 1:
            raise InputError(f"{self.name}: max_new_tokens should be at least 1, got {max_new_tokens}")
        if ids.shape[1] + max_new_tokens > self.max_length:
            raise InputError(f"{self.name}: a prompt of {ids.shape[1]} tokens and {max_new_tokens} new ones need "
                             f"{ids.shape[1] + max_new_tokens} cache slots; max_length is {self.max_length}")
        self._check_batch(ids.shape[0])
        key = jax.random.key(0) if rng is None else rng
        run = self._generator(settings, eos, pad, max_new_tokens)
        tokens, steps = run(self.params if params is None else params, ids, mask, key)
        return jnp.concatenate([ids, tokens[:, : int(steps)]], axis=1)

    def _settings(self, do_sample, temperature, top_k, top_p, eos_token_id, pad_token_id):
        config = self.generation_config
        given = {"do_sample": do_sample, "temperature": temperature, "top_k": top_k, "top_p": top_p}

        def pick(name, default):
            value = given.get(name)
            if value is None:
                value = getattr(config, name, None)
            return default if value is None else value

        unsupported = [f"{k}={getattr(config, k)!r}" for k, off in _UNSUPPORTED_SETTINGS.items()
                       if getattr(config, k, None) not in (None, off)]
        if unsupported:
            raise InputError(f"{self.name}: the generation config sets {', '.join(unsupported)}, which "
                             "jaxport's generate does not implement; set them to their defaults")
        sample = bool(pick("do_sample", False))
        settings = Sampling(
            do_sample=sample,
            temperature=float(pick("temperature", 1.0)) if sample else 1.0,
            top_k=int(pick("top_k", 0)) or None if sample else None,
            top_p=float(pick("top_p", 1.0)) if sample else None,
        )
        eos = config.eos_token_id if eos_token_id is None else eos_token_id
        eos = () if eos is None else tuple(int(e) for e in (eos if isinstance(eos, (list, tuple)) else [eos]))
        pad = config.pad_token_id if pad_token_id is None else pad_token_id
        pad = (eos[0] if eos else 0) if pad is None else int(pad)  # transformers pads with EOS then
        return settings, eos, pad

    def _generator(self, settings: Sampling, eos: tuple[int, ...], pad: int, new: int):
        key = (settings, eos, pad, new)
        if key not in self._generators:
            self._generators[key] = jax.jit(
                lambda params, ids, mask, rng: self._generate(params, ids, mask, rng, settings, eos, pad, new))
        return self._generators[key]

    def _generate(self, params, ids, mask, rng, settings: Sampling, eos, pad, new):
        batch = ids.shape[0]
        logits, cache = self.prefill_step(params, self.init_cache(batch), ids, mask)
        last = jnp.max(_positions(mask), axis=-1, keepdims=True)
        eos_ids = jnp.asarray(eos, jnp.int32)

        def pick(logits, step):
            if not settings.do_sample:
                return jnp.argmax(logits.astype(jnp.float32), axis=-1).astype(jnp.int32)
            scores = process_logits(logits, temperature=settings.temperature, top_k=settings.top_k,
                                    top_p=settings.top_p)
            return jax.random.categorical(jax.random.fold_in(rng, step), scores, axis=-1).astype(jnp.int32)

        def finished(tokens):
            return jnp.isin(tokens, eos_ids) if eos else jnp.zeros(tokens.shape, bool)

        first = pick(logits[:, -1], 0)
        tokens = jnp.full((batch, new), pad, jnp.int32).at[:, 0].set(first)

        def cond(state):
            step, _, done, _, _ = state
            return (step < new) & ~jnp.all(done)

        def body(state):
            step, tokens, done, last, cache = state
            logits, cache = self.decode_step(params, cache, tokens[:, step - 1][:, None], last + 1)
            token = jnp.where(done, pad, pick(logits[:, -1], step))
            return step + 1, tokens.at[:, step].set(token), done | finished(token), last + 1, cache

        state = (jnp.asarray(1, jnp.int32), tokens, finished(first), last, cache)
        steps, tokens, *_ = lax.while_loop(cond, body, state)
        return tokens, steps


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


def from_causal_lm(model: torch.nn.Module, *, max_length: int, max_batch: int = 1) -> CausalLM:
    """Convert a Hugging Face causal LM (`AutoModelForCausalLM`) for generation in JAX.

    Args:
      model: the `PreTrainedModel`; its parameters become `CausalLM.params`.
      max_length: cache slots per row: the longest prompt plus new tokens.
      max_batch: the most rows a cache holds (the step is exported with the batch symbolic, 1..max_batch).
    """
    if not is_model(model):
        raise InputError(f"from_causal_lm takes a transformers PreTrainedModel, got {type(model).__name__}")
    if max_length < 2 or max_batch < 1:
        raise InputError(f"from_causal_lm: max_length should be at least 2 and max_batch at least 1, "
                         f"got {max_length} and {max_batch}")
    step = CausalLMStep(model, max_length)
    batch = min(2, max_batch)  # 2 keeps torch.export from specializing the batch to 1
    dtype = next(model.parameters()).dtype
    shapes = step.cache_shapes(batch)
    keys = [torch.zeros(k, dtype=dtype) for k, _ in shapes]
    values = [torch.zeros(v, dtype=dtype) for _, v in shapes]
    example = (torch.zeros(batch, 2, dtype=torch.long), torch.ones(batch, max_length, dtype=torch.long),
               torch.zeros(batch, 2, dtype=torch.long), torch.tensor(0), keys, values)
    rows = torch.export.Dim("batch", min=1, max=max_batch) if max_batch > 1 else None
    count = torch.export.Dim("tokens", min=1, max=max_length)
    per_layer = [{0: rows} if rows is not None else None] * len(keys)
    dynamic = ({0: rows, 1: count}, {0: rows}, {0: rows, 1: count}, None, per_layer, per_layer)
    converted = from_torch(step, example, dynamic_shapes=dynamic, train=False)
    config = step.text_config
    layer_types = getattr(config, "layer_types", None) or ["full_attention"] * config.num_hidden_layers
    return CausalLM(converted, cache_shapes=step.cache_shapes(1), cache_dtype=dtypes.jax_dtype(dtype),
                    max_batch=max_batch, max_length=max_length, layer_types=layer_types,
                    generation_config=_generation_config(model), name=type(model).__name__)


def _generation_config(model) -> Any:
    """The model's generation config with transformers' global defaults filled in, as its
    `generate` resolves it before applying the call's own settings."""
    try:
        config, _ = model._prepare_generation_config(None)
    except Exception:  # noqa: BLE001 - an older transformers: its config as it is
        config = model.generation_config
    return config
