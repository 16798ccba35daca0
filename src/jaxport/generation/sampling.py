"""How `generate` picks each token, as transformers' logits processors pick it.

`Sampling` holds the settings; `split` parts them into their structure (which processors run:
hashable, one jitted loop each) and their numeric values (temperature, top-k, top-p, min-p, the
penalties, the minimum lengths), which reach the loop as traced arguments, so new values compile
nothing. `process_scores`
applies transformers' processors in the order its `generate` builds them, over the token buffer
`[B, S]` of the rows so far (prompts with their left padding, then the new tokens), of which the
first `length` are written, and last, where `renormalize_logits` asks, transformers'
`LogitNormalization` (a log-softmax); `process_logits` is the sampling part alone (temperature,
top-k, top-p, min-p). All of it is plain `jax.numpy` and runs inside the jitted decode loop.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from jax import lax


@dataclasses.dataclass(frozen=True)
class Sampling:
    """How `generate` picks each token: greedy (`do_sample=False`) or sampled, after transformers'
    processors; each field has the meaning (and the neutral value) of the `GenerationConfig`
    field of the same name. `sequence_bias` holds `bad_words_ids` too, as -inf biases."""

    do_sample: bool = False
    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None
    min_p: float | None = None
    repetition_penalty: float | None = None
    encoder_repetition_penalty: float | None = None
    no_repeat_ngram_size: int = 0
    encoder_no_repeat_ngram_size: int = 0
    sequence_bias: tuple[tuple[tuple[int, ...], float], ...] = ()
    bad_words_ids: tuple[tuple[int, ...], ...] = ()
    min_length: int = 0
    min_new_tokens: int = 0
    suppress_tokens: tuple[int, ...] = ()
    begin_suppress_tokens: tuple[int, ...] = ()
    forced_bos_token_id: int | None = None
    forced_eos_token_id: tuple[int, ...] = ()
    remove_invalid_values: bool = False
    renormalize_logits: bool = False


#: The settings that are numbers, each with a stand-in that is not its neutral value: the
#: structure `split` gives keeps whether a processor runs, not with what value.
NUMERIC = {"temperature": 0.5, "top_k": 1, "top_p": 0.5, "min_p": 0.5, "repetition_penalty": 2.0,
           "encoder_repetition_penalty": 2.0, "min_length": 1, "min_new_tokens": 1}


def _neutral(name: str, value) -> bool:
    """Whether a numeric setting (or a warper's operand) leaves the scores as they are."""
    if name in ("temperature", "repetition_penalty", "encoder_repetition_penalty"):
        return value == 1.0
    if name == "top_p":
        return value >= 1.0
    if name == "top_p_drop":
        return value <= 0.0
    if name in ("top_k", "min_length", "min_new_tokens"):
        return value <= 0
    return False  # min_p: applied whenever set


def _operands(settings: Sampling) -> dict:
    """The numbers the processors in force compute with, as Python numbers: the ones transformers'
    processors compute with (1 - top_p and 1 / the encoder penalty in double precision)."""
    operands = {}
    for name in NUMERIC:
        value = getattr(settings, name)
        if value is None or _neutral(name, value):
            continue
        if name == "top_p":
            operands["top_p_drop"] = 1 - value
        elif name == "encoder_repetition_penalty":
            operands["encoder_repetition_inverse"] = 1 / value
        else:
            operands[name] = value
    return operands


def split(settings: Sampling) -> tuple[Sampling, dict[str, jax.Array]]:
    """(The settings with every numeric one in force replaced by its stand-in, the operands of
    those in force as scalars, which `process_scores` takes as `values=`). One compiled loop per
    structure serves every value."""
    operands = _operands(settings)
    structure = dataclasses.replace(settings, **{name: stand_in for name, stand_in in NUMERIC.items()
                                                 if getattr(settings, name) is not None
                                                 and not _neutral(name, getattr(settings, name))})
    values = {name: jnp.asarray(value, jnp.int32 if name in ("top_k", "min_length", "min_new_tokens")
                                else jnp.float32) for name, value in operands.items()}
    return structure, values


def process_scores(scores: jax.Array, tokens: jax.Array, length: jax.Array, *, settings: Sampling,
                   eos: tuple[int, ...], prompt_length: int, max_length, prompt_start: jax.Array | None = None,
                   values: dict | None = None) -> jax.Array:
    """Next-token logits `[B, V]` as transformers' processors leave them (float32), in the order
    its `_get_logits_processor` builds them: sequence bias, the penalties and n-gram bans, bad
    words, the length rules, forced tokens, invalid values, suppressed tokens, then when sampling
    the warpers (`process_logits`), and `LogitNormalization` last.

    `tokens [B, S]` holds each row's tokens, the first `length` (a traced scalar) written;
    `prompt_length` is the padded prompt's length (so `length - prompt_length` tokens are new),
    `max_length` the prompt plus `max_new_tokens`, and `prompt_start [B]` each row's count of
    left padding (the repetition penalty skips it, as transformers' does). With `values` (from
    `split`), `settings` is a structure and the numbers in force are those values (traced)."""
    s = settings
    if values is None:
        values = _operands(s)
    scores = scores.astype(jnp.float32)
    vocab = scores.shape[-1]
    if s.sequence_bias:
        scores = _sequence_bias(scores, tokens, length, s.sequence_bias)
    if "encoder_repetition_inverse" in values:
        # the prompt (padding included) counts as the "encoder input" of a decoder-only model
        in_prompt = _seen_tokens(tokens, prompt_length, vocab, None)
        inverse = jnp.float32(values["encoder_repetition_inverse"])
        scores = jnp.where(in_prompt, jnp.where(scores < 0, scores * inverse, scores / inverse), scores)
    if "repetition_penalty" in values:
        seen = _seen_tokens(tokens, length, vocab, prompt_start)
        penalty = values["repetition_penalty"]
        penalised = jnp.where(scores < 0, scores * penalty, scores / penalty)
        scores = jnp.where(seen, penalised, scores)
    if s.no_repeat_ngram_size > 0:
        scores = _no_repeat_ngram(scores, tokens, length, s.no_repeat_ngram_size)
    if s.encoder_no_repeat_ngram_size > 0:
        scores = _no_repeat_ngram(scores, tokens, length, s.encoder_no_repeat_ngram_size, within=prompt_length)
    if s.bad_words_ids:
        scores = _sequence_bias(scores, tokens, length, tuple((w, -jnp.inf) for w in s.bad_words_ids))
    eos_ids = jnp.asarray(eos, jnp.int32)
    if eos and "min_length" in values:
        scores = jnp.where((length < values["min_length"]) & _members(vocab, eos_ids), -jnp.inf, scores)
    if eos and "min_new_tokens" in values:
        new = length - prompt_length
        scores = jnp.where((new < values["min_new_tokens"]) & _members(vocab, eos_ids), -jnp.inf, scores)
    if s.forced_bos_token_id is not None:
        scores = jnp.where(length == 1, _only(vocab, jnp.asarray([s.forced_bos_token_id])), scores)
    if s.forced_eos_token_id:
        scores = jnp.where(length == max_length - 1, _only(vocab, jnp.asarray(s.forced_eos_token_id)), scores)
    if s.remove_invalid_values:
        finfo = jnp.finfo(jnp.float32)
        scores = jnp.where(jnp.isnan(scores), 0.0, scores)
        scores = jnp.clip(scores, finfo.min, finfo.max)
    if s.suppress_tokens:
        scores = jnp.where(_members(vocab, jnp.asarray(s.suppress_tokens)), -jnp.inf, scores)
    if s.begin_suppress_tokens:
        begin = prompt_length + (1 if prompt_length == 1 and s.forced_bos_token_id is not None else 0)
        scores = jnp.where((length == begin) & _members(vocab, jnp.asarray(s.begin_suppress_tokens)),
                           -jnp.inf, scores)
    if s.do_sample:
        scores = _warp(scores, {k: v for k, v in values.items() if k in ("temperature", "top_k", "top_p_drop",
                                                                            "min_p")})
    if s.renormalize_logits:
        # `LogitNormalization`, which transformers always appends last: what beam search adds up
        # (and `output_scores` returns) are then log-probabilities again after the processors
        scores = jax.nn.log_softmax(scores, axis=-1)
    return scores


def process_logits(logits: jax.Array, *, temperature: float = 1.0, top_k: int | None = None,
                   top_p: float | None = None, min_p: float | None = None,
                   min_tokens_to_keep: int = 1) -> jax.Array:
    """Next-token logits `[..., vocab]` as transformers' sampling processors leave them, in float32:
    `TemperatureLogitsWarper` (divide by `temperature`), `TopKLogitsWarper` (-inf below the k-th
    largest, ties with it kept), `TopPLogitsWarper` (-inf for the smallest tokens whose
    probabilities sum to at most 1 - `top_p`) and `MinPLogitsWarper` (-inf below `min_p` times the
    most likely token's probability), each skipped at its neutral value."""
    operands = {"temperature": temperature, "top_k": top_k, "min_p": min_p,
                "top_p_drop": None if top_p is None else 1 - top_p}
    return _warp(logits, {k: v for k, v in operands.items() if v is not None and not _neutral(k, v)},
                 min_tokens_to_keep)


def _warp(logits: jax.Array, operands: dict, min_tokens_to_keep: int = 1) -> jax.Array:
    """`process_logits` with the warpers in force given as their operands (`_operands`): Python
    numbers or traced scalars."""
    scores = logits.astype(jnp.float32)
    if "temperature" in operands:
        scores = scores / jnp.float32(operands["temperature"])
    if "top_k" in operands:
        top_k = operands["top_k"]
        if isinstance(top_k, jax.Array):  # the k-th largest of the sorted scores, at a traced index
            k = jnp.clip(top_k, min_tokens_to_keep, scores.shape[-1])
            kth = jnp.take(jnp.sort(scores, axis=-1), scores.shape[-1] - k, axis=-1)[..., None]
        else:
            kth = lax.top_k(scores, min(max(top_k, min_tokens_to_keep), scores.shape[-1]))[0][..., -1:]
        scores = jnp.where(scores < kth, -jnp.inf, scores)
    if "top_p_drop" in operands:
        order = jnp.argsort(scores, axis=-1)  # ascending, as transformers sorts
        ascending = jnp.take_along_axis(scores, order, axis=-1)
        cumulative = jnp.cumsum(jax.nn.softmax(ascending, axis=-1), axis=-1)
        drop = cumulative <= operands["top_p_drop"]
        drop = drop.at[..., -min_tokens_to_keep:].set(False)
        dropped = jnp.put_along_axis(jnp.zeros_like(drop), order, drop, axis=-1, inplace=False)
        scores = jnp.where(dropped, -jnp.inf, scores)
    if "min_p" in operands:
        probs = jax.nn.softmax(scores, axis=-1)
        drop = probs < operands["min_p"] * jnp.max(probs, axis=-1, keepdims=True)
        keep = lax.top_k(probs, min(min_tokens_to_keep, scores.shape[-1]))[1]
        drop = jnp.put_along_axis(drop, keep, False, axis=-1, inplace=False)
        scores = jnp.where(drop, -jnp.inf, scores)
    return scores


def _traced(value) -> bool:
    return isinstance(value, jax.Array)


def _members(vocab: int, ids: jax.Array) -> jax.Array:
    """`[V]` True at the token ids listed."""
    return jnp.isin(jnp.arange(vocab), ids)


def _only(vocab: int, ids: jax.Array) -> jax.Array:
    """Scores that force one of `ids`: 0 there, -inf elsewhere (transformers' forced tokens)."""
    return jnp.where(_members(vocab, ids), 0.0, -jnp.inf).astype(jnp.float32)


def _seen_tokens(tokens: jax.Array, length, vocab: int, prompt_start: jax.Array | None) -> jax.Array:
    """`[B, V]` True for each token a row holds among its first `length`, left padding excluded."""
    positions = jnp.arange(tokens.shape[1])
    valid = positions[None, :] < length
    if prompt_start is not None:
        valid = valid & (positions[None, :] >= prompt_start[:, None])
    ids = jnp.where(valid, tokens, vocab)  # out of range: dropped by the scatter
    rows = jnp.arange(tokens.shape[0])[:, None]
    return jnp.zeros((tokens.shape[0], vocab), bool).at[rows, ids].set(True, mode="drop")


def _no_repeat_ngram(scores: jax.Array, tokens: jax.Array, length, n: int, within: int | None = None) -> jax.Array:
    """`NoRepeatNGramLogitsProcessor`: a token that would complete an n-gram the row already holds
    (its whole first `length` tokens, padding included, as transformers counts them) is -inf.
    With `within`, the n-grams are those of the first `within` tokens only (the prompt, as
    `EncoderNoRepeatNGramLogitsProcessor` takes them)."""
    batch, size = tokens.shape
    starts = (size if within is None else within) - n + 1
    if starts <= 0:
        return scores
    # the row's last n - 1 tokens, and every earlier n-gram's first n - 1
    tail = lax.dynamic_slice_in_dim(jnp.pad(tokens, ((0, 0), (n, 0))), length + 1, n - 1, axis=1)
    windows = jnp.stack([tokens[:, i:i + starts] for i in range(n)], axis=-1)  # [B, starts, n]
    match = jnp.all(windows[:, :, : n - 1] == tail[:, None, :], axis=-1)
    if within is None:
        match = match & (jnp.arange(starts)[None, :] <= length - n) & (length + 1 >= n)
    banned = jnp.where(match, windows[:, :, -1], scores.shape[-1])
    rows = jnp.arange(batch)[:, None]
    mask = jnp.zeros(scores.shape, bool).at[rows, banned].set(True, mode="drop")
    return jnp.where(mask, -jnp.inf, scores)


def _sequence_bias(scores: jax.Array, tokens: jax.Array, length,
                   biases: tuple[tuple[tuple[int, ...], float], ...]) -> jax.Array:
    """`SequenceBiasLogitsProcessor`: each sequence's bias added to its last token's score where the
    row ends with the rest of it (always, for one-token sequences)."""
    bias = jnp.zeros(scores.shape, jnp.float32)
    padded = jnp.pad(tokens, ((0, 0), (tokens.shape[1], 0)), constant_values=-1)
    for sequence, value in biases:
        *prefix, last = sequence
        if prefix:
            if len(prefix) > tokens.shape[1]:
                continue
            ends = lax.dynamic_slice_in_dim(padded, tokens.shape[1] + length - len(prefix), len(prefix), axis=1)
            hit = jnp.all(ends == jnp.asarray(prefix), axis=-1) & (length >= len(prefix))
        else:
            hit = jnp.ones(scores.shape[:1], bool)
        bias = bias.at[:, last].add(jnp.where(hit, jnp.float32(value), 0.0))
    return scores + bias
