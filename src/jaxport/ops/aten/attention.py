"""ATen lowerings: scaled dot-product attention, kept whole.

`scaled_dot_product_attention` is two einsums and a softmax in PyTorch's own layout
(..., heads, seq, dim), so XLA reads the keys and values where they lie: no transposes
around the call, and grouped-query attention (fewer key/value heads than query heads)
attends with the query heads grouped per key/value head, never repeating the keys and
values in memory. (On CPU, `jax.nn.dot_product_attention` is these einsums too, in
(batch, seq, heads, dim) layout, which made XLA copy each layer's keys and values into
that layout: a decode step spent 7% of its time there.)

Scores are computed in float32 for half inputs (opmath), the softmax in float32, and
fully masked rows follow PyTorch's CPU kernels (math `_safe_softmax` and the flash kernel
alike): a query row whose every score is -inf (boolean mask all False, is_causal
combined with a mask, or an additive mask of -inf) attends to nothing and yields zeros,
and the flash kernel's logsumexp for it is 0. An additive mask of finfo.min is finite,
so such a row is an ordinary softmax (uniform in float32/bf16, where the scores are
absorbed; shifted but unchanged in float16). Additive masks are added in float32
(opmath), as PyTorch does, never rounded to the query's dtype.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from .._attention import group_heads, ungroup_heads
from ..registry import aten
from ._promotion import opmath_type


def _scale(query, scale):
    return 1.0 / math.sqrt(query.shape[-1]) if scale is None else scale


def _causal(query, key):
    return jnp.tril(jnp.ones((query.shape[-2], key.shape[-2]), dtype=bool))


def _masked_scores(query, key, attn_mask, is_causal, scale):
    """Scores (..., kv_heads, groups, q, k) in opmath, masked with -inf."""
    groups = query.shape[-3] // key.shape[-3]
    compute = opmath_type(query.dtype)
    scores = jnp.einsum("...gqd,...kd->...gqk", group_heads(query, groups), key,
                        preferred_element_type=compute) * _scale(query, scale)
    if is_causal:
        scores = jnp.where(_causal(query, key), scores, -jnp.inf)
    if attn_mask is not None:
        attn_mask = group_heads(attn_mask[None] if attn_mask.ndim == 2 else attn_mask, groups)
        if attn_mask.dtype == jnp.bool_:
            scores = jnp.where(attn_mask, scores, -jnp.inf)
        else:
            # A float mask is float32 or the query's dtype (PyTorch checks): this only widens.
            scores = scores + attn_mask.astype(compute)
    return scores


def _dead_rows(scores):
    """(..., q, 1) True where every score of the row is -inf: PyTorch gives such rows zeros."""
    return jnp.all(scores == -jnp.inf, axis=-1, keepdims=True)


def _attention(query, key, value, attn_mask, dropout_p, is_causal, scale, key_rng):
    """(output, scores, dead rows), the last two grouped as `_masked_scores` leaves them."""
    if query.ndim == 2:  # no head axis: one head
        out, scores, dead = _attention(query[None], key[None], value[None], attn_mask, dropout_p, is_causal,
                                       scale, key_rng)
        return out[0], scores[0], dead[0]
    scores = _masked_scores(query, key, attn_mask, is_causal, scale)
    dead = _dead_rows(scores)
    # Like torch's _safe_softmax: fully masked rows get zero weights, not NaN (and no NaN
    # gradient either, so the dead rows' scores are neutralised before the softmax).
    weights = jnp.where(dead, 0.0, jax.nn.softmax(jnp.where(dead, 0.0, scores), axis=-1))
    if dropout_p > 0.0:
        keep = jax.random.bernoulli(key_rng, 1.0 - dropout_p, weights.shape)
        weights = jnp.where(keep, weights / (1.0 - dropout_p), 0.0)
    out = jnp.einsum("...gqk,...kd->...gqd", weights, value.astype(weights.dtype))
    return ungroup_heads(out).astype(query.dtype), scores, dead


@aten("scaled_dot_product_attention.default", random="key_rng")
def aten_scaled_dot_product_attention(
    query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, *, scale=None, enable_gqa=False, key_rng=None
):
    """scaled_dot_product_attention(Tensor query, Tensor key, Tensor value, Tensor? attn_mask=None, float dropout_p=0., bool is_causal=False, *, float? scale=None, bool enable_gqa=False) -> Tensor"""
    return _attention(query, key, value, attn_mask, dropout_p, is_causal, scale, key_rng)[0]


@aten("_scaled_dot_product_flash_attention_for_cpu.default", random="key_rng")
def aten__scaled_dot_product_flash_attention_for_cpu(
    query, key, value, dropout_p=0.0, is_causal=False, *, attn_mask=None, scale=None, key_rng=None
):
    """_scaled_dot_product_flash_attention_for_cpu(Tensor query, Tensor key, Tensor value, float dropout_p=0., bool is_causal=False, *, Tensor? attn_mask=None, float? scale=None) -> (Tensor output, Tensor logsumexp)"""
    out, scores, dead = _attention(query, key, value, attn_mask, dropout_p, is_causal, scale, key_rng)
    # The CPU flash kernel reports logsumexp 0 for fully masked rows.
    logsumexp = jnp.where(dead, 0.0, jax.nn.logsumexp(jnp.where(dead, 0.0, scores), axis=-1, keepdims=True))
    return out, ungroup_heads(logsumexp)[..., 0].astype(np.float32)
