"""ATen lowerings: scaled dot-product attention, kept whole.

`scaled_dot_product_attention` maps onto `jax.nn.dot_product_attention`, which
XLA (and cuDNN on GPUs) implements as one fused op. PyTorch's layout is
(..., heads, seq, dim); JAX's is (batch, seq, heads, dim), so 4-D inputs are
transposed around the call. Dropout, float16/bfloat16, and ranks other than 4 take the
explicit softmax(QK^T)V form.

Fully masked rows follow PyTorch's CPU kernels (math `_safe_softmax` and the flash
kernel alike): a query row whose every score is -inf (boolean mask all False,
is_causal combined with a mask, or an additive mask of -inf) attends to nothing and
yields zeros, and the flash kernel's logsumexp for it is 0. An additive mask of
finfo.min is finite, so such a row is an ordinary softmax (uniform in float32/bf16,
where the scores are absorbed; shifted but unchanged in float16). Additive masks are
added in float32 (opmath), as PyTorch does, never rounded to the query's dtype.
`jax.nn.dot_product_attention` masks with a large finite negative instead of -inf
(uniform weights) and gives NaN for an all -inf bias, so the fast path zeroes dead
rows itself.
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


def _causal(query, key):
    return jnp.tril(jnp.ones((query.shape[-2], key.shape[-2]), dtype=bool))


def _masked_scores(query, key, attn_mask, is_causal, scale):
    compute = opmath_type(query.dtype)
    scores = jnp.einsum("...qd,...kd->...qk", query, key, preferred_element_type=compute) * _scale(query, scale)
    if is_causal:
        scores = jnp.where(_causal(query, key), scores, -jnp.inf)
    if attn_mask is not None:
        if attn_mask.dtype == jnp.bool_:
            scores = jnp.where(attn_mask, scores, -jnp.inf)
        else:
            # A float mask is float32 or the query's dtype (PyTorch checks): this only widens.
            scores = scores + attn_mask.astype(compute)
    return scores


def _dead_rows(scores):
    """(..., q, 1) True where every score of the row is -inf: PyTorch gives such rows zeros."""
    return jnp.all(scores == -jnp.inf, axis=-1, keepdims=True)


def _explicit_attention(query, key, value, attn_mask, dropout_p, is_causal, scale, key_rng):
    scores = _masked_scores(query, key, attn_mask, is_causal, scale)
    dead = _dead_rows(scores)
    # Like torch's _safe_softmax: fully masked rows get zero weights, not NaN (and no NaN
    # gradient either, so the dead rows' scores are neutralised before the softmax).
    weights = jnp.where(dead, 0.0, jax.nn.softmax(jnp.where(dead, 0.0, scores), axis=-1))
    if dropout_p > 0.0:
        keep = jax.random.bernoulli(key_rng, 1.0 - dropout_p, weights.shape)
        weights = jnp.where(keep, weights / (1.0 - dropout_p), 0.0)
    out = jnp.einsum("...qk,...kd->...qd", weights, value.astype(weights.dtype))
    return out.astype(query.dtype), scores, dead


def _live_rows(query, key, attn_mask, is_causal):
    """(..., q, 1) True where a query row may attend to at least one key."""
    if attn_mask.dtype == jnp.bool_:
        allowed = attn_mask
    else:
        allowed = attn_mask != -jnp.inf
    if is_causal:
        allowed = allowed & _causal(query, key)
    return jnp.any(allowed, axis=-1, keepdims=True)


@aten("scaled_dot_product_attention.default", random="key_rng")
def aten_scaled_dot_product_attention(
    query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, *, scale=None, enable_gqa=False, key_rng=None
):
    """scaled_dot_product_attention(Tensor query, Tensor key, Tensor value, Tensor? attn_mask=None, float dropout_p=0., bool is_causal=False, *, float? scale=None, bool enable_gqa=False) -> Tensor"""
    # Half precision stays off the fast path: for float16, jax.nn.dot_product_attention asks for
    # the F16_F16_F32 dot algorithm, which XLA:CPU rejects under jit; for bfloat16 it mixes in
    # float32 constants, which fails under strict dtype promotion. The explicit path computes
    # the same (half products accumulated in float32, softmax in float32).
    # jax.nn.dot_product_attention also needs values as wide as queries (MLA models differ).
    if dropout_p == 0.0 and query.ndim == 4 and query.dtype == jnp.float32 and value.shape[-1] == query.shape[-1]:
        bias = mask = live = None
        if attn_mask is not None:
            live = _live_rows(query, key, attn_mask, is_causal)
            if attn_mask.dtype == jnp.bool_:
                mask = attn_mask
            else:
                bias = attn_mask.astype(jnp.float32)
                if is_causal:
                    # JAX masks causal positions with -0.7 * finfo.max, which outweighs a finfo.min
                    # bias; PyTorch masks them with -inf. Fold the causal mask into the bias.
                    bias = jnp.where(_causal(query, key), bias, -jnp.inf)
                    is_causal = False
                # Dead rows get a zero bias so that nothing NaN reaches the softmax.
                bias = jnp.where(live, bias, 0.0)
        out = jax.nn.dot_product_attention(
            jnp.swapaxes(query, 1, 2),
            jnp.swapaxes(key, 1, 2),
            jnp.swapaxes(value, 1, 2),
            bias=bias,
            mask=mask,
            scale=_scale(query, scale),
            is_causal=is_causal,
        )
        out = jnp.swapaxes(out, 1, 2)
        return out if live is None else jnp.where(live, out, jnp.zeros((), out.dtype))
    key, value = _repeat_kv(query, key, value)
    return _explicit_attention(query, key, value, attn_mask, dropout_p, is_causal, scale, key_rng)[0]


@aten("_scaled_dot_product_flash_attention_for_cpu.default", random="key_rng")
def aten__scaled_dot_product_flash_attention_for_cpu(
    query, key, value, dropout_p=0.0, is_causal=False, *, attn_mask=None, scale=None, key_rng=None
):
    """_scaled_dot_product_flash_attention_for_cpu(Tensor query, Tensor key, Tensor value, float dropout_p=0., bool is_causal=False, *, Tensor? attn_mask=None, float? scale=None) -> (Tensor output, Tensor logsumexp)"""
    key, value = _repeat_kv(query, key, value)
    out, scores, dead = _explicit_attention(query, key, value, attn_mask, dropout_p, is_causal, scale, key_rng)
    # The CPU flash kernel reports logsumexp 0 for fully masked rows.
    logsumexp = jnp.where(dead, 0.0, jax.nn.logsumexp(jnp.where(dead, 0.0, scores), axis=-1, keepdims=True))
    logsumexp = logsumexp[..., 0].astype(np.float32)
    return out, logsumexp
