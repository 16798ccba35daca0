"""How `generate` picks each token, as transformers' logits processors pick it."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from jax import lax


@dataclasses.dataclass(frozen=True)
class Sampling:
    """How `generate` picks each token: greedy (`do_sample=False`) or from the logits processed
    with temperature, then top-k, then top-p, in transformers' order."""

    do_sample: bool = False
    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None


def process_logits(logits: jax.Array, *, temperature: float = 1.0, top_k: int | None = None,
                   top_p: float | None = None, min_tokens_to_keep: int = 1) -> jax.Array:
    """Next-token logits `[..., vocab]` as transformers' sampling processors leave them, in float32:
    `TemperatureLogitsWarper` (divide by `temperature`), `TopKLogitsWarper` (-inf below the k-th
    largest, ties with it kept) and `TopPLogitsWarper` (-inf for the smallest tokens whose
    probabilities sum to at most 1 - `top_p`), each skipped at its neutral value."""
    scores = logits.astype(jnp.float32)
    if temperature is not None and temperature != 1.0:
        scores = scores / jnp.float32(temperature)
    if top_k is not None and top_k != 0:
        k = min(max(top_k, min_tokens_to_keep), scores.shape[-1])
        kth = lax.top_k(scores, k)[0][..., -1:]
        scores = jnp.where(scores < kth, -jnp.inf, scores)
    if top_p is not None and top_p < 1.0:
        order = jnp.argsort(scores, axis=-1)  # ascending, as transformers sorts
        ascending = jnp.take_along_axis(scores, order, axis=-1)
        cumulative = jnp.cumsum(jax.nn.softmax(ascending, axis=-1), axis=-1)
        drop = cumulative <= 1 - top_p
        drop = drop.at[..., -min_tokens_to_keep:].set(False)
        dropped = jnp.put_along_axis(jnp.zeros_like(drop), order, drop, axis=-1, inplace=False)
        scores = jnp.where(dropped, -jnp.inf, scores)
    return scores
