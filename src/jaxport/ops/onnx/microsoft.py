"""onnxruntime's `com.microsoft` ops that exported and optimized transformers use.

onnxruntime's transformer optimizer fuses BERT/GPT-style graphs into these (fused
attention, skip + layer norm, bias + GeLU). Semantics follow onnxruntime's CPU kernels,
which the tests compare against.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from ..registry import onnx

_MS = "com.microsoft"


def _gelu_erf(x):
    return 0.5 * x * (1.0 + jax.lax.erf(x / math.sqrt(2.0)).astype(x.dtype))


def _gelu_tanh(x):
    inner = math.sqrt(2.0 / math.pi) * (x + 0.044715 * x * x * x)
    return 0.5 * x * (1.0 + jnp.tanh(inner))


def _layer_norm(x, gamma, beta, epsilon: float, simplified: bool):
    """Normalize over the last axis in float32 (as onnxruntime does for half inputs); returns
    (y, mean, inverse standard deviation), the statistics keeping a trailing axis of 1."""
    xf = x.astype(jnp.float32) if jnp.dtype(x.dtype).itemsize < 4 else x
    mean = jnp.zeros(xf.shape[:-1] + (1,), xf.dtype) if simplified else jnp.mean(xf, -1, keepdims=True)
    centered = xf - mean
    variance = jnp.mean(centered * centered, -1, keepdims=True)
    inv_std = jax.lax.rsqrt(variance + epsilon)
    y = centered * inv_std * gamma.astype(xf.dtype)
    if beta is not None:
        y = y + beta.astype(xf.dtype)
    return y.astype(x.dtype), mean, inv_std


def _attention_mask(mask, batch: int, q_len: int, kv_len: int, past_len: int, filter_value: float, dtype):
    """An onnxruntime mask_index (any of its layouts) as an additive (B, 1, Sq, Skv) bias."""
    mask = jnp.asarray(mask)
    keys = jnp.arange(kv_len)
    if mask.ndim == 1 and mask.shape[0] == batch:  # valid key length per batch entry
        keep = keys[None, :] < mask[:, None]
        keep = keep[:, None, None, :]
    elif mask.ndim == 1 and mask.shape[0] == 2 * batch:  # end positions, then start positions
        end, start = mask[:batch], mask[batch:]
        keep = (keys[None, :] < end[:, None]) & (keys[None, :] >= start[:, None])
        keep = keep[:, None, None, :]
    elif mask.ndim == 2:  # (B, total length), 1 keep, 0 mask
        keep = (mask != 0)[:, None, None, :]
    elif mask.ndim == 3:  # (B, Sq, total length)
        keep = (mask != 0)[:, None, :, :]
    elif mask.ndim == 4:  # (B, 1, max, max): the window of this step
        keep = (mask[:, :, past_len:past_len + q_len, :kv_len] != 0)
    else:
        raise ValueError(f"unsupported mask_index of shape {mask.shape}")
    return jnp.where(keep, jnp.asarray(0, dtype), jnp.asarray(filter_value, dtype))


def _multi_head(q, k, v, num_heads: int, scale, bias_4d, causal: bool, past_len: int):
    """Softmax attention of (B, S, N*h) queries over (B, Skv, N*h) keys and values."""
    batch, q_len, _ = q.shape
    kv_len = k.shape[1]
    head = q.shape[-1] // num_heads
    v_head = v.shape[-1] // num_heads

    def split(t, size):
        return t.reshape(t.shape[0], t.shape[1], num_heads, size).transpose(0, 2, 1, 3)

    qh, kh, vh = split(q, head), split(k, head), split(v, v_head)
    scale = 1.0 / math.sqrt(head) if not scale else scale
    scores = jnp.einsum("bnqh,bnkh->bnqk", qh, kh) * jnp.asarray(scale, q.dtype)
    if bias_4d is not None:
        scores = scores + bias_4d.astype(scores.dtype)
    if causal:
        allowed = jnp.arange(kv_len)[None, :] <= (jnp.arange(q_len)[:, None] + past_len)
        scores = jnp.where(allowed, scores, jnp.asarray(jnp.finfo(scores.dtype).min, scores.dtype))
    weights = jax.nn.softmax(scores.astype(jnp.float32), axis=-1).astype(q.dtype)
    out = jnp.einsum("bnqk,bnkh->bnqh", weights, vh)
    return out.transpose(0, 2, 1, 3).reshape(batch, q_len, num_heads * v_head)


@onnx("Attention", since=1, domain=_MS)
def attention(input, weights, bias=None, mask_index=None, past=None, attention_bias=None,
              past_sequence_length=None, *, num_heads, unidirectional=0, qkv_hidden_sizes=None,
              mask_filter_value=-10000.0, scale=0.0, do_rotary=0, past_present_share_buffer=0,
              rotary_embedding_dim=0):
    """Attention(T input, T weights, T bias?, M mask_index?, T past?, T attention_bias?, ...)
    -> (T output, T present?): fused QKV projection and multi-head self-attention."""
    if do_rotary or past is not None:
        raise NotImplementedError("com.microsoft.Attention with do_rotary or past state")
    hidden = weights.shape[1] // 3 if qkv_hidden_sizes is None else None
    sizes = (hidden, hidden, hidden) if qkv_hidden_sizes is None else tuple(qkv_hidden_sizes)
    qkv = jnp.matmul(input, weights)
    if bias is not None:
        qkv = qkv + bias
    q = qkv[..., : sizes[0]]
    k = qkv[..., sizes[0]: sizes[0] + sizes[1]]
    v = qkv[..., sizes[0] + sizes[1]:]
    batch, seq = input.shape[0], input.shape[1]
    bias_4d = None
    if mask_index is not None:
        bias_4d = _attention_mask(mask_index, batch, seq, seq, 0, mask_filter_value, q.dtype)
    if attention_bias is not None:
        bias_4d = attention_bias if bias_4d is None else bias_4d + attention_bias
    out = _multi_head(q, k, v, num_heads, scale, bias_4d, bool(unidirectional), 0)
    present = jnp.stack([
        k.reshape(batch, seq, num_heads, -1).transpose(0, 2, 1, 3),
        v.reshape(batch, seq, num_heads, -1).transpose(0, 2, 1, 3),
    ])
    return out, present


@onnx("BiasAdd", since=1, domain=_MS)
def bias_add(X, bias, skip):
    """BiasAdd(T X, T bias, T skip) -> T: X + bias + skip."""
    return X + bias + skip


@onnx("BiasGelu", since=1, domain=_MS)
def bias_gelu(A, B):
    """BiasGelu(T A, T B) -> T: GeLU (erf) of A + B."""
    return _gelu_erf(A + B)


@onnx("EmbedLayerNormalization", since=1, domain=_MS)
def embed_layer_normalization(input_ids, segment_ids, word_embedding, position_embedding,
                              segment_embedding=None, gamma=None, beta=None, mask=None, position_ids=None,
                              *, epsilon=1e-12, mask_index_type=1):
    """EmbedLayerNormalization(T1 input_ids, T1 segment_ids?, T word_embedding, T position_embedding,
    T segment_embedding?, T gamma, T beta, T1 mask?, T1 position_ids?)
    -> (T output, T1 mask_index, T embedding_sum?)."""
    seq = input_ids.shape[1]
    positions = jnp.arange(seq)[None, :] if position_ids is None else position_ids
    total = jnp.take(word_embedding, input_ids, axis=0) + jnp.take(position_embedding, positions, axis=0)
    if segment_embedding is not None and segment_ids is not None:
        total = total + jnp.take(segment_embedding, segment_ids, axis=0)
    out, _, _ = _layer_norm(total, gamma, beta, epsilon, simplified=False)
    if mask is None:
        mask_index = jnp.zeros(input_ids.shape[:1], jnp.int32)
    else:
        mask_index = jnp.sum(mask != 0, axis=1).astype(jnp.int32)
    return out, mask_index, total


@onnx("FastGelu", since=1, domain=_MS)
def fast_gelu(X, bias=None):
    """FastGelu(T X, T bias?) -> T: GeLU's tanh approximation of X + bias."""
    return _gelu_tanh(X if bias is None else X + bias)


@onnx("FusedMatMul", since=1, domain=_MS)
def fused_matmul(A, B, *, alpha=1.0, transA=0, transB=0, transBatchA=0, transBatchB=0):
    """FusedMatMul(T A, T B) -> T: alpha * op(A) @ op(B), op transposing the last two dims."""
    if transBatchA or transBatchB:
        raise NotImplementedError("FusedMatMul with transBatchA/transBatchB")
    a = jnp.swapaxes(A, -1, -2) if transA else A
    b = jnp.swapaxes(B, -1, -2) if transB else B
    out = jnp.matmul(a, b)
    return out if alpha == 1.0 else out * jnp.asarray(alpha, out.dtype)


@onnx("Gelu", since=1, domain=_MS)
def gelu(X):
    """Gelu(T X) -> T: GeLU with erf."""
    return _gelu_erf(X)


@onnx("MultiHeadAttention", since=1, domain=_MS)
def multi_head_attention(query, key=None, value=None, bias=None, key_padding_mask=None, attention_bias=None,
                         past_key=None, past_value=None, *, num_heads, mask_filter_value=-10000.0,
                         scale=0.0, unidirectional=0):
    """MultiHeadAttention(T query, T key?, T value?, T bias?, M key_padding_mask?, T attention_bias?,
    T past_key?, T past_value?) -> (T output, T present_key?, T present_value?); 3-D BSH inputs."""
    if key is None or value is None or key.ndim != 3 or query.ndim != 3:
        raise NotImplementedError("MultiHeadAttention with packed QKV or BNSH key/value")
    if bias is not None:
        hidden = query.shape[-1]
        query = query + bias[:hidden]
        key = key + bias[hidden: 2 * hidden]
        value = value + bias[2 * hidden:]
    past_len = 0
    if past_key is not None:
        batch = key.shape[0]
        key_bnsh = key.reshape(batch, key.shape[1], num_heads, -1).transpose(0, 2, 1, 3)
        value_bnsh = value.reshape(batch, value.shape[1], num_heads, -1).transpose(0, 2, 1, 3)
        past_len = past_key.shape[2]
        key_bnsh = jnp.concatenate([past_key, key_bnsh], axis=2)
        value_bnsh = jnp.concatenate([past_value, value_bnsh], axis=2)
        key = key_bnsh.transpose(0, 2, 1, 3).reshape(batch, key_bnsh.shape[2], -1)
        value = value_bnsh.transpose(0, 2, 1, 3).reshape(batch, value_bnsh.shape[2], -1)
    batch, q_len, kv_len = query.shape[0], query.shape[1], key.shape[1]
    bias_4d = None
    if key_padding_mask is not None:
        bias_4d = _attention_mask(key_padding_mask, batch, q_len, kv_len, past_len, mask_filter_value, query.dtype)
    if attention_bias is not None:
        bias_4d = attention_bias if bias_4d is None else bias_4d + attention_bias
    out = _multi_head(query, key, value, num_heads, scale, bias_4d, bool(unidirectional), past_len)
    present_key = key.reshape(batch, kv_len, num_heads, -1).transpose(0, 2, 1, 3)
    present_value = value.reshape(batch, kv_len, num_heads, -1).transpose(0, 2, 1, 3)
    return out, present_key, present_value


@onnx("QuickGelu", since=1, domain=_MS)
def quick_gelu(X, *, alpha=1.702):
    """QuickGelu(T X) -> T: X * sigmoid(alpha * X)."""
    return X * jax.nn.sigmoid(jnp.asarray(alpha, X.dtype) * X)


@onnx("SkipLayerNormalization", since=1, domain=_MS)
def skip_layer_normalization(input, skip, gamma, beta=None, bias=None, *, epsilon=1e-12):
    """SkipLayerNormalization(T input, T skip, T gamma, T beta?, T bias?)
    -> (T output, U mean?, U inv_std_var?, T input_skip_bias_sum?)."""
    total = input + skip if bias is None else input + skip + bias
    out, mean, inv_std = _layer_norm(total, gamma, beta, epsilon, simplified=False)
    return out, mean, inv_std, total


@onnx("SkipSimplifiedLayerNormalization", since=1, domain=_MS)
def skip_simplified_layer_normalization(input, skip, gamma, bias=None, *, epsilon=1e-12):
    """SkipSimplifiedLayerNormalization(T input, T skip, T gamma, T bias?)
    -> (T output, U mean?, U inv_std_var?, T input_skip_bias_sum?): RMS normalization."""
    total = input + skip if bias is None else input + skip + bias
    out, mean, inv_std = _layer_norm(total, gamma, None, epsilon, simplified=True)
    return out, mean, inv_std, total


@onnx("SimplifiedLayerNormalization", since=1)
def simplified_layer_normalization(X, scale, *, axis=-1, epsilon=1e-5, stash_type=1):
    """SimplifiedLayerNormalization(T X, V scale) -> (V Y, U inv_std_var?): RMS normalization over
    the axes from `axis` on (onnxruntime registers it in the default domain)."""
    axis = axis % X.ndim
    axes = tuple(range(axis, X.ndim))
    xf = X.astype(jnp.float32) if stash_type == 1 and X.dtype != np.float64 else X
    inv_std = jax.lax.rsqrt(jnp.mean(xf * xf, axis=axes, keepdims=True) + epsilon)
    y = (xf * inv_std).astype(X.dtype) * scale
    return y, inv_std
