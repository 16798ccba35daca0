"""ATen lowerings: scaled dot-product attention, kept whole.

`scaled_dot_product_attention` maps onto `jax.nn.dot_product_attention`, which
XLA (and cuDNN on GPUs) implements as one fused op. PyTorch's layout is
(..., heads, seq, dim); JAX's is (batch, seq, heads, dim), so 4-D inputs are
transposed around the call. Dropout, and ranks other than 4, take the explicit
softmax(QK^T)V form.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from ..registry import aten
from ._promotion import opmath_type


def _scale(query, scale):
    return 1.0 / math.sqrt(query.shape[-1]) if scale is None else scale


def _repeat_kv(query, key, value):
    # Grouped-query attention: each key/value head serves heads_q // heads_kv query heads.
    heads_q, heads_kv = query.shape[-3], key.shape[-3]
    if heads_q == heads_kv:
        return key, value
    repeats = heads_q // heads_kv
    return jnp.repeat(key, repeats, axis=-3), jnp.repeat(value, repeats, axis=-3)


def _masked_scores(query, key, attn_mask, is_causal, scale):
    compute = opmath_type(query.dtype)
    scores = jnp.einsum("...qd,...kd->...qk", query.astype(compute), key.astype(compute)) * _scale(query, scale)
    if is_causal:
        causal = jnp.tril(jnp.ones((query.shape[-2], key.shape[-2]), dtype=bool))
        scores = jnp.where(causal, scores, -jnp.inf)
    if attn_mask is not None:
        if attn_mask.dtype == jnp.bool_:
            scores = jnp.where(attn_mask, scores, -jnp.inf)
        else:
            scores = scores + attn_mask.astype(compute)
    return scores


def _explicit_attention(query, key, value, attn_mask, dropout_p, is_causal, scale, key_rng):
    scores = _masked_scores(query, key, attn_mask, is_causal, scale)
    weights = jax.nn.softmax(scores, axis=-1)
    if dropout_p > 0.0:
        keep = jax.random.bernoulli(key_rng, 1.0 - dropout_p, weights.shape)
        weights = jnp.where(keep, weights / (1.0 - dropout_p), 0.0)
    out = jnp.einsum("...qk,...kd->...qd", weights, value.astype(weights.dtype))
    return out.astype(query.dtype), scores


@aten("scaled_dot_product_attention.default", random="key_rng")
def aten_scaled_dot_product_attention(
    query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, *, scale=None, enable_gqa=False, key_rng=None
):
    """scaled_dot_product_attention(Tensor query, Tensor key, Tensor value, Tensor? attn_mask=None, float dropout_p=0., bool is_causal=False, *, float? scale=None, bool enable_gqa=False) -> Tensor"""
    if dropout_p == 0.0 and query.ndim == 4 and query.dtype in (jnp.float32, jnp.float16, jnp.bfloat16):
        bias = mask = None
        if attn_mask is not None:
            if attn_mask.dtype == jnp.bool_:
                mask = attn_mask
            else:
                bias = attn_mask.astype(query.dtype)
        out = jax.nn.dot_product_attention(
            jnp.swapaxes(query, 1, 2),
            jnp.swapaxes(key, 1, 2),
            jnp.swapaxes(value, 1, 2),
            bias=bias,
            mask=mask,
            scale=_scale(query, scale),
            is_causal=is_causal,
        )
        return jnp.swapaxes(out, 1, 2)
    key, value = _repeat_kv(query, key, value)
    return _explicit_attention(query, key, value, attn_mask, dropout_p, is_causal, scale, key_rng)[0]


@aten("_scaled_dot_product_flash_attention_for_cpu.default", random="key_rng")
def aten__scaled_dot_product_flash_attention_for_cpu(
    query, key, value, dropout_p=0.0, is_causal=False, *, attn_mask=None, scale=None, key_rng=None
):
    """_scaled_dot_product_flash_attention_for_cpu(Tensor query, Tensor key, Tensor value, float dropout_p=0., bool is_causal=False, *, Tensor? attn_mask=None, float? scale=None) -> (Tensor output, Tensor logsumexp)"""
    key, value = _repeat_kv(query, key, value)
    out, scores = _explicit_attention(query, key, value, attn_mask, dropout_p, is_causal, scale, key_rng)
    logsumexp = jax.nn.logsumexp(scores, axis=-1).astype(np.float32)
    return out, logsumexp
