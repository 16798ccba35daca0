"""ONNX attention ops: Attention (opset 23+), RotaryEmbedding, FlexAttention, LinearAttention
and CausalConvWithState (the convolution of the linear-attention layers that use it)."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from .._attention import group_heads, ungroup_heads
from ..registry import onnx

# softmax_precision: ONNX element type -> dtype.
_PRECISIONS = {1: jnp.float32, 10: jnp.float16, 11: jnp.float64, 16: jnp.bfloat16}


def _wider(a, b):
    """The float dtype both `a` and `b` fit in (NumPy's rule, which strict promotion refuses)."""
    a, b = jnp.dtype(a), jnp.dtype(b)
    if a == b:
        return a
    if jnp.float64 in (a, b):
        return jnp.dtype(jnp.float64)
    return a if a.itemsize > b.itemsize else b if b.itemsize > a.itemsize else jnp.dtype(jnp.float32)


def _heads_first(x, num_heads: int):
    """(batch, seq, heads * size) -> (batch, heads, seq, size)."""
    batch, seq, hidden = x.shape
    return jnp.transpose(x.reshape(batch, seq, num_heads, hidden // num_heads), (0, 2, 1, 3))


def _masked_softmax(x):
    """Softmax over the last axis where a row of only -inf gives zeros, not NaN."""
    top = jnp.max(x, axis=-1, keepdims=True)
    top = jnp.where(jnp.isneginf(top), jnp.zeros_like(top), top)
    e = jnp.exp(x - top)
    total = jnp.sum(e, axis=-1, keepdims=True)
    return e / jnp.where(total == 0, jnp.ones_like(total), total)


def _allowed_positions(q_len: int, kv_len: int, offset, *, is_causal, left, right):
    """Where query i may attend key j given the causal frontier and the sliding window
    (bottom-right aligned by `offset`, a scalar or one value per batch entry). None: all."""
    if not is_causal and left < 0 and right < 0:
        return None
    i = jnp.arange(q_len)[:, None]
    j = jnp.arange(kv_len)[None, :]
    if jnp.ndim(offset):
        i = i + jnp.reshape(offset, (-1, 1, 1)).astype(i.dtype)
    else:
        i = i + offset
    allowed = jnp.ones(jnp.broadcast_shapes(i.shape, j.shape), bool)
    if is_causal:
        allowed = allowed & (j <= i)
    if left >= 0:
        allowed = allowed & (i - j <= left)
    if right >= 0:
        allowed = allowed & (j - i <= right)
    # A per-batch frontier gets its own batch axis; a rank-3 mask stays (heads, q, kv).
    return allowed[:, None] if allowed.ndim == 3 else allowed


@onnx("Attention", since=23)
def attention(Q, K, V, attn_mask=None, past_key=None, past_value=None, nonpad_kv_seqlen=None, *,
              is_causal=0, kv_num_heads=None, q_num_heads=None, qk_matmul_output_mode=0,
              scale=None, softcap=0.0, softmax_precision=None, left_window_size=-1,
              right_window_size=-1):
    """Attention(T1 Q, T2 K, T2 V, U attn_mask?, T2 past_key?, T2 past_value?,
    int64 nonpad_kv_seqlen?) -> (T1 Y, T2 present_key, T2 present_value, T1 qk_matmul_output)."""
    three_d = Q.ndim == 3
    if three_d:
        Q = _heads_first(Q, q_num_heads)
        K = _heads_first(K, kv_num_heads)
        V = _heads_first(V, kv_num_heads)
    dtype = Q.dtype
    present_key = K if past_key is None else jnp.concatenate([past_key, K], axis=2)
    present_value = V if past_value is None else jnp.concatenate([past_value, V], axis=2)
    K, V = present_key.astype(dtype), present_value.astype(dtype)
    batch, heads, q_len = Q.shape[:3]
    kv_len = K.shape[2]

    # The additive bias: the float mask plus -inf wherever a position is disallowed.
    bias_dtype = dtype
    bias = jnp.zeros((), dtype)
    if attn_mask is not None:
        pad = kv_len - attn_mask.shape[-1]
        if attn_mask.dtype == bool:
            if pad > 0:
                attn_mask = jnp.pad(attn_mask, [(0, 0)] * (attn_mask.ndim - 1) + [(0, pad)])
            bias = jnp.where(attn_mask, jnp.zeros((), dtype), jnp.asarray(-jnp.inf, dtype))
        else:
            if not jnp.issubdtype(attn_mask.dtype, jnp.floating):
                attn_mask = attn_mask.astype(dtype)
            bias_dtype = _wider(dtype, attn_mask.dtype)
            if pad > 0:
                attn_mask = jnp.pad(attn_mask, [(0, 0)] * (attn_mask.ndim - 1) + [(0, pad)],
                                    constant_values=-jnp.inf)
            bias = attn_mask.astype(bias_dtype)
    if past_key is not None:
        offset = past_key.shape[2]
    elif nonpad_kv_seqlen is not None:
        offset = jnp.reshape(nonpad_kv_seqlen, (-1,)) - q_len
    else:
        offset = 0
    allowed = _allowed_positions(q_len, kv_len, offset, is_causal=is_causal, left=left_window_size,
                                 right=right_window_size)
    if nonpad_kv_seqlen is not None:
        padding = jnp.arange(kv_len)[None, :] < jnp.reshape(nonpad_kv_seqlen, (-1, 1))
        padding = padding[:, None, None, :]
        allowed = padding if allowed is None else allowed & padding
    if allowed is not None:
        bias = bias + jnp.where(allowed, jnp.zeros((), bias_dtype), jnp.asarray(-jnp.inf, bias_dtype))
    bias = jnp.broadcast_to(bias, jnp.broadcast_shapes(jnp.shape(bias), (q_len, kv_len)))

    # Grouped-query attention: query head h reads key/value head h // groups. The query heads
    # sharing a key/value head are multiplied with it together, so K and V are never repeated.
    groups = heads // K.shape[1]
    if scale is None:
        scale = 1 / math.sqrt(Q.shape[3])
    root = jnp.asarray(math.sqrt(scale), dtype)  # both sides scaled by sqrt(scale), as ONNX does
    scores = ungroup_heads(jnp.einsum("bkgqd,bksd->bkgqs", group_heads(Q * root, groups), K * root))
    if softcap > 0:
        scores = jnp.tanh(scores / softcap) * softcap
    with_bias = scores.astype(bias_dtype) + bias
    qk_output = with_bias if qk_matmul_output_mode == 2 else scores
    if softmax_precision is not None:
        with_bias = with_bias.astype(_PRECISIONS[softmax_precision])
    probs = _masked_softmax(with_bias)
    fully_masked = jnp.isneginf(jnp.max(bias, axis=-1, keepdims=True))
    probs = jnp.where(fully_masked, jnp.zeros((), probs.dtype), probs)
    if qk_matmul_output_mode == 3:
        qk_output = probs
    Y = ungroup_heads(jnp.einsum("bkgqs,bksd->bkgqd", group_heads(probs.astype(dtype), groups), V))
    if three_d:
        Y = jnp.transpose(Y, (0, 2, 1, 3)).reshape(batch, q_len, -1)
    return Y, present_key, present_value, qk_output.astype(dtype)


@onnx("CausalConvWithState", since=27)
def causal_conv_with_state(input, weight, bias=None, past_state=None, *, activation="none"):
    """CausalConvWithState(T input, T weight, T bias?, T past_state?) -> (T output,
    T present_state): depthwise causal 1-D convolution over (batch, channels, length),
    continuing from the last k - 1 positions of the previous call; activation none/silu/swish."""
    batch, channels, length = input.shape
    k = weight.shape[2]
    if past_state is None:
        past_state = jnp.zeros((batch, channels, k - 1), input.dtype)
    padded = jnp.concatenate([past_state.astype(input.dtype), input], axis=2)
    compute = _wider(input.dtype, jnp.float32)
    wide, w = padded.astype(compute), weight.astype(compute)
    out = sum(w[None, :, 0, i, None] * wide[:, :, i:i + length] for i in range(k))
    if bias is not None:
        out = out + bias.astype(compute)[None, :, None]
    out = out.astype(input.dtype)
    if activation in ("silu", "swish"):
        wide_out = out.astype(compute)
        out = (wide_out * jax.nn.sigmoid(wide_out)).astype(input.dtype)
    return out, padded[:, :, padded.shape[2] - (k - 1):]


def _flex_softmax_dtype(dtype, softmax_precision):
    if softmax_precision is not None:
        return _PRECISIONS[softmax_precision]
    return _wider(dtype, jnp.float32)


@onnx("FlexAttention", since=1, domain="ai.onnx.preview")
def flex_attention(Q, K, V, *, scale=None, score_mod=None, prob_mod=None, softmax_precision=None):
    """FlexAttention(T Q, T K, T V) -> T Y; 4-D inputs, GQA by head groups; score_mod and
    prob_mod: graphs applied to the scores and to the probabilities (softmax precision)."""
    groups = Q.shape[1] // K.shape[1]
    if scale is None:
        scale = 1 / math.sqrt(Q.shape[3])
    root = jnp.asarray(math.sqrt(float(np.float32(scale))), Q.dtype)
    scores = ungroup_heads(jnp.einsum("bkgqd,bksd->bkgqs", group_heads(Q * root, groups), K * root))
    compute = _flex_softmax_dtype(Q.dtype, softmax_precision)
    scores = scores.astype(compute)
    if score_mod is not None:
        (scores,) = score_mod(scores)
        scores = jnp.asarray(scores).astype(compute)
    probs = jax.nn.softmax(scores, axis=-1)
    if prob_mod is not None:
        (probs,) = prob_mod(probs)
        probs = jnp.asarray(probs).astype(compute)
    Y = jnp.einsum("bkgqs,bksd->bkgqd", group_heads(probs, groups), V.astype(compute))
    return ungroup_heads(Y).astype(V.dtype)


def _packed_heads(x, num_heads: int, dtype):
    """(B, T, H * D) -> (B, H, T, D) in the computation's dtype."""
    return _heads_first(x, num_heads).astype(dtype)


@onnx("LinearAttention", since=27)
def linear_attention(query, key, value, past_state=None, decay=None, beta=None, *, chunk_size=64,
                     kv_num_heads, q_num_heads, scale=0.0, update_rule="gated_delta"):
    """LinearAttention(T query, T key, T value, T past_state?, T decay?, T beta?) -> (T output,
    T present_state); recurrent state (B, H_kv, d_k, d_v) updated per token by the rule
    linear, gated (decay), delta (beta) or gated_delta; chunk_size is only a tuning hint."""
    batch, steps = query.shape[:2]
    d_k = query.shape[-1] // q_num_heads
    d_v = value.shape[-1] // kv_num_heads
    groups = q_num_heads // kv_num_heads
    compute = _wider(query.dtype, jnp.float32)
    # Query heads grouped by the key/value head (and so the state) they read: (B, H_kv, G, T, d_k).
    q = group_heads(_packed_heads(query, q_num_heads, compute), groups)
    k = _packed_heads(key, kv_num_heads, compute)
    v = _packed_heads(value, kv_num_heads, compute)
    gated = update_rule in ("gated", "gated_delta")
    delta = update_rule in ("delta", "gated_delta")
    # Per step: decay (B, H_kv, 1 or d_k) and beta (B, H_kv or 1, 1), time first for the scan.
    g = jnp.zeros((steps, batch, kv_num_heads, 1), compute)
    if gated:
        per_head = decay.shape[-1] == kv_num_heads
        g = decay.reshape(batch, steps, kv_num_heads, 1 if per_head else d_k)
        g = jnp.transpose(g, (1, 0, 2, 3)).astype(compute)
    b = jnp.ones((steps, batch, 1, 1), compute)
    if delta:
        b = jnp.transpose(beta, (1, 0, 2))[..., None].astype(compute)
    if past_state is None:
        state = jnp.zeros((batch, kv_num_heads, d_k, d_v), compute)
        state_dtype = query.dtype
    else:
        state, state_dtype = past_state.astype(compute), past_state.dtype
    scale = scale if scale else 1 / math.sqrt(d_k)

    def step(state, inputs):
        q_t, k_t, v_t, g_t, b_t = inputs
        if gated:
            state = state * jnp.exp(g_t)[..., None]
        if delta:
            v_t = b_t * (v_t - jnp.einsum("bhkv,bhk->bhv", state, k_t))
        state = state + k_t[..., :, None] * v_t[..., None, :]
        return state, scale * jnp.einsum("bhgk,bhkv->bhgv", q_t, state)

    xs = (jnp.moveaxis(q, 3, 0), jnp.moveaxis(k, 2, 0), jnp.moveaxis(v, 2, 0), g, b)
    state, out = lax.scan(step, state, xs)  # out: (T, B, H_kv, G, d_v)
    out = jnp.transpose(out, (1, 0, 2, 3, 4)).reshape(batch, steps, q_num_heads * d_v)
    return out.astype(query.dtype), state.astype(state_dtype)


@onnx("RotaryEmbedding", since=23)
def rotary_embedding(X, cos_cache, sin_cache, position_ids=None, *, interleaved=0, num_heads=0,
                     rotary_embedding_dim=0):
    """RotaryEmbedding(T X, T cos_cache, T sin_cache, M position_ids?) -> T Y; X is
    (batch, heads, seq, size) or (batch, seq, heads * size); the first `rotary_embedding_dim`
    features of each head rotate, in halves or (interleaved) in even/odd pairs."""
    shape = X.shape
    if X.ndim == 4:
        x = jnp.transpose(X, (0, 2, 1, 3))
    else:
        x = X.reshape(shape[0], shape[1], num_heads, shape[2] // num_heads)
    dim = rotary_embedding_dim or x.shape[3]
    rotated, kept = x[..., :dim], x[..., dim:]
    if position_ids is not None:
        cos_cache, sin_cache = cos_cache[position_ids], sin_cache[position_ids]
    cos, sin = cos_cache[:, :, None, :], sin_cache[:, :, None, :]
    if interleaved:
        x1, x2 = rotated[..., 0::2], rotated[..., 1::2]
    else:
        x1, x2 = rotated[..., : dim // 2], rotated[..., dim // 2:]
    real = cos * x1 - sin * x2
    imag = sin * x1 + cos * x2
    if interleaved:
        rotated = jnp.stack([real, imag], axis=-1).reshape(rotated.shape)
    else:
        rotated = jnp.concatenate([real, imag], axis=-1)
    out = jnp.concatenate([rotated, kept], axis=-1)
    if X.ndim == 4:
        return jnp.transpose(out, (0, 2, 1, 3))
    return out.reshape(shape)
