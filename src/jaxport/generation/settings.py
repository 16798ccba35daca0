"""Generation settings: the `GenerationConfig` fields `generate` honours and those that cannot change
its tokens (the allow-lists), a call's settings resolved as transformers resolves them (the call's
keywords over a given config over the model's own, fields outside the lists refused by name), and
a resolved config read into what the loops take: `Sampling`, `Beams`, the EOS ids, the padding id
and the number of new tokens."""

from __future__ import annotations

import copy
from typing import Any

import jax
import jax.numpy as jnp

from ..errors import InputError
from ..frontends import transformers_adapter
from .beam import Beams
from .sampling import Sampling

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


def explicit(settings: dict) -> dict:
    """A call's settings less `generate`'s own keyword arguments left at None (not set)."""
    return {k: v for k, v in settings.items() if not (k in _KEYWORDS and v is None)}


def resolve_config(name: str, model_config: Any, generation_config: Any, settings: dict) -> Any:
    """The generation config `generate` runs with: the model's, replaced by `generation_config`
    if given, updated with the call's settings; every field outside `_HONOURED` and `_INERT`
    refused by name where it differs from transformers' default."""
    from transformers import GenerationConfig

    config = copy.deepcopy(model_config if generation_config is None else generation_config)
    defaults = GenerationConfig()
    unknown = sorted(k for k in settings if not hasattr(defaults, k))
    if unknown:
        raise InputError(f"{name}: generate() got unknown settings {', '.join(unknown)} "
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
        raise InputError(f"{name}: generate() does not implement {', '.join(refused)}; leave "
                         "them at transformers' defaults (they are set by the call or the generation config)")
    return config


def read_config(name: str, config, prompt: int) -> tuple[Sampling, Beams, tuple[int, ...], int, int]:
    """(Sampling, Beams, EOS ids, pad id, new tokens) from a resolved config."""
    sample = bool(config.do_sample)
    copies = int(config.num_return_sequences or 1)
    beams = Beams(num_beams=int(config.num_beams or 1), length_penalty=float(config.length_penalty),
                  early_stopping=config.early_stopping, num_return_sequences=copies)
    if beams.num_beams > 1 and sample:
        raise InputError(f"{name}: generate() does not implement beam sampling (num_beams="
                         f"{beams.num_beams} with do_sample=True); use one or the other")
    if beams.num_beams > 1 and copies > beams.num_beams:
        raise InputError(f"{name}: num_return_sequences={copies} is more than num_beams={beams.num_beams}")
    if copies > 1 and not sample and beams.num_beams == 1:
        raise InputError(f"{name}: num_return_sequences={copies} needs do_sample=True (greedy "
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


def default_mask(ids: jax.Array, eos: tuple[int, ...], pad: int) -> jax.Array:
    """transformers' default attention mask: the tokens that are not padding, where the padding
    token is distinct from EOS and present; otherwise every token."""
    if pad not in eos and bool(jnp.any(ids == pad)):
        return (ids != pad).astype(jnp.int32)
    return jnp.ones(ids.shape, jnp.int32)


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


def model_generation_config(model) -> Any:
    """The model's generation config with transformers' global defaults filled in, as its
    `generate` resolves it before applying the call's own settings."""
    try:
        config, _ = model._prepare_generation_config(None)
    except Exception:  # noqa: BLE001 - an older transformers: its config as it is
        config = model.generation_config
    return config
