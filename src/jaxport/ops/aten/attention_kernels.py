"""ATen lowerings: PyTorch's fused attention kernels, forward and backward, as graphs recorded on
a GPU hold them (a CUDA `.pt2` after `run_decompositions()`, AOTAutograd's graphs under
`torch.compile`): flash, memory-efficient, cuDNN, and the overridable hook out-of-tree
backends implement.

Each is the math of `attention._attention` (scores and softmax in opmath, fully masked rows
zeros), and each backward is that math's `jax.vjp` (`attention._attention_grads`), recomputed
from the query, key and value: the saved output and logsumexp are not read. What differs per
kernel is said here, as PyTorch 2.13's meta kernels and CUDA sources have it:

- Layout: the SDPA-level ops take (batch, heads, seq, dim); `_flash_attention_*` and
  `_efficient_attention_*` take (batch, seq, heads, dim), their bias (batch, heads, q, k).
- Causal alignment when the query and key lengths differ. `_scaled_dot_product_efficient_attention`,
  the cuDNN op and the overridable one mean SDPA's causal mask, aligned to the top-left corner
  (`causal_upper_left`); `_efficient_attention_*` take `custom_mask_type` (1 top-left, 2
  bottom-right). The flash ops align it to the bottom-right corner, as flash-attn 2 does: SDPA
  never calls them causal with unequal lengths (`check_flash_causal_non_square_seqlens`), and
  `torch.nn.attention.bias.causal_lower_right` calls them for exactly that.
- logsumexp: float32, (batch, heads, q) for flash and the overridable op, (batch, heads, q, 1) for
  cuDNN; the efficient kernels pad q to a multiple of 32 and fill the padding with +inf, as their
  CUDA kernel does, or record (batch, heads, 0) without `compute_log_sumexp`. A fully masked row
  gets output zeros (as every kernel gives) and logsumexp 0, as the CPU flash kernel reports it;
  on the GPU the flash kernel reports +inf there and the efficient kernel -inf.
- Shapes follow what the meta kernels record for a CUDA graph. A ROCm (or XPU) build records
  some outputs otherwise (the efficient logsumexp unpadded, flash's seeds as int64 scalars): the
  interpreter's shape check refuses such a node by name rather than run on.
- Dropout: the mask is drawn from a threefry key whose two 32-bit words the forward returns as
  its philox seed and offset (flash: both in `rng_state`, uint64[2]; the others: one in each
  int64 scalar), and the backward redraws the same mask from them. So forward and backward must
  both run in jaxport (as they do in one exported graph or one `torch.compile`); seeds from a
  CUDA run would give another mask, which nothing can check.

Not lowered, refused with the reason: packed variable-length batches (`cum_seq_*`,
`cu_seqlens_*`, `seqused_k`, `seqlen_k`, `block_table`), ALiBi slopes, the efficient kernel's
`window_size`, and flash's `return_debug_mask` (the CUDA kernel's own dropout pattern).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ..registry import aten
from ._promotion import canonical
from .attention import _attention, _attention_grads, _logsumexp


def _bhsd(*arrays):
    """(batch, seq, heads, dim) <-> (batch, heads, seq, dim)."""
    return tuple(None if a is None else jnp.swapaxes(a, -3, -2) for a in arrays)


def _band(query, key, offset, left=None, right=None):
    """(q, k) True where query row i may attend key j: i + offset - left <= j <= i + offset + right
    (None: unbounded on that side)."""
    rows = jnp.arange(query.shape[-2])[:, None] + offset
    cols = jnp.arange(key.shape[-2])[None, :]
    allowed = jnp.ones((query.shape[-2], key.shape[-2]), dtype=bool)
    if right is not None:
        allowed = allowed & (cols <= rows + right)
    if left is not None:
        allowed = allowed & (cols >= rows - left)
    return allowed


def _flash_band(query, key, is_causal, window_size_left=None, window_size_right=None):
    """Flash's mask, as `mha_fwd` sets it: causal from the bottom-right corner, and a sliding
    window (a negative size or one reaching past the keys: unbounded). None: no mask."""
    length = key.shape[-2]

    def bound(size):
        return size if size is not None and 0 <= size < length else None

    left, right = bound(window_size_left), 0 if is_causal else bound(window_size_right)
    if left is None and right is None:
        return None
    return _band(query, key, length - query.shape[-2], left, right)


def _efficient_band(query, key, custom_mask_type):
    """The efficient kernel's `custom_mask_type`: 0 none, 1 causal from the top-left corner,
    2 causal from the bottom-right one."""
    if custom_mask_type == 0:
        return None
    if custom_mask_type not in (1, 2):
        raise ValueError(f"_efficient_attention: unknown custom_mask_type {custom_mask_type}")
    return _band(query, key, 0 if custom_mask_type == 1 else key.shape[-2] - query.shape[-2], None, 0)


def _refuse_unsupported(op, **arguments):
    given = [name for name, value in arguments.items() if value is not None]
    if given:
        raise NotImplementedError(
            f"{op} with {', '.join(given)}: packed variable-length batches, paged keys, ALiBi and "
            "the efficient kernel's window are not lowered (jaxport lowers the dense kernels)")


def _dropout_key(dropout_p, key_rng):
    """(the key a forward draws its dropout mask from, its two uint32 words), which the forward
    returns as its philox seed and offset; without dropout no key and zero words."""
    if dropout_p > 0.0:
        words = jax.random.bits(key_rng, (2,), jnp.uint32)
        return jax.random.wrap_key_data(words, impl="threefry2x32"), words
    return None, jnp.zeros((2,), jnp.uint32)


def _stored(words, dtype):
    """uint32 words in a recorded integer dtype (int64 or uint64, 32 bits wide without x64)."""
    dtype = canonical(dtype)
    return lax.bitcast_convert_type(words, dtype) if dtype.itemsize == 4 else words.astype(dtype)


def _backward_key(dropout_p, *seeds):
    """The forward's dropout key, from the seeds `_stored` it in (None without dropout)."""
    if dropout_p <= 0.0:
        return None
    flat = jnp.concatenate([jnp.ravel(s) for s in seeds])
    words = lax.bitcast_convert_type(flat, jnp.uint32) if flat.dtype.itemsize == 4 else flat.astype(jnp.uint32)
    return jax.random.wrap_key_data(words, impl="threefry2x32")


def _flash_seeds(words):
    """flash's (rng_state uint64[2], unused uint64 scalar)."""
    return _stored(words, np.uint64), jnp.zeros((), canonical(np.uint64))


def _seeds(words):
    """(philox_seed, philox_offset): int64 scalars."""
    return _stored(words[0], np.int64), _stored(words[1], np.int64)


def _forward(query, key, value, attn_bias, dropout_p, is_causal, scale, key_rng, band=None):
    """(output, float32 logsumexp (..., heads, q), the dropout key's words), (batch, heads, seq, dim)."""
    dropout_key, words = _dropout_key(dropout_p, key_rng)
    out, _, scores, dead = _attention(query, key, value, attn_bias, dropout_p, is_causal, scale, dropout_key,
                                      band=band)
    return out, _logsumexp(scores, dead).astype(jnp.float32), words


def _padded_logsumexp(logsumexp, compute_log_sumexp):
    """The efficient kernels' logsumexp: q padded to a multiple of 32 with +inf, or none."""
    if not compute_log_sumexp:
        return logsumexp[..., :0]
    padding = -logsumexp.shape[-1] % 32
    return jnp.pad(logsumexp, [(0, 0)] * (logsumexp.ndim - 1) + [(0, padding)], constant_values=jnp.inf)


def _refuse_debug_mask(op, return_debug_mask):
    if return_debug_mask:
        raise NotImplementedError(f"{op} with return_debug_mask=True: the debug mask is the CUDA kernel's own "
                                  "dropout pattern, which jaxport does not reproduce")


@aten("_efficient_attention_backward.default")
def aten__efficient_attention_backward(
    grad_out_, query, key, value, bias, out, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, logsumexp,
    dropout_p, philox_seed, philox_offset, custom_mask_type, bias_requires_grad, *, scale=None,
    num_splits_key=None, window_size=None, shared_storage_dqdkdv=False
):
    """_efficient_attention_backward(Tensor grad_out_, Tensor query, Tensor key, Tensor value, Tensor? bias, Tensor out, Tensor? cu_seqlens_q, Tensor? cu_seqlens_k, SymInt max_seqlen_q, SymInt max_seqlen_k, Tensor logsumexp, float dropout_p, Tensor philox_seed, Tensor philox_offset, int custom_mask_type, bool bias_requires_grad, *, float? scale=None, int? num_splits_key=None, int? window_size=None, bool shared_storage_dqdkdv=False) -> (Tensor, Tensor, Tensor, Tensor)"""
    _refuse_unsupported("_efficient_attention_backward", cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k,
                        window_size=window_size)
    query, key, value, grad_out = _bhsd(query, key, value, grad_out_)
    grads = _attention_grads(grad_out, query, key, value, bias, (True, True, True, bias_requires_grad), dropout_p,
                             False, scale, _backward_key(dropout_p, philox_seed, philox_offset),
                             band=_efficient_band(query, key, custom_mask_type))
    if bias is None:
        grad_bias = jnp.zeros((), jnp.float32)  # the meta kernel's placeholder
    else:
        grad_bias = jnp.zeros_like(bias) if grads[3] is None else grads[3]
    return (*_bhsd(*grads[:3]), grad_bias)


@aten("_efficient_attention_forward.default", random="key_rng")
def aten__efficient_attention_forward(
    query, key, value, bias, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p, custom_mask_type,
    compute_log_sumexp=False, *, scale=None, seqlen_k=None, window_size=None, key_rng=None
):
    """_efficient_attention_forward(Tensor query, Tensor key, Tensor value, Tensor? bias, Tensor? cu_seqlens_q, Tensor? cu_seqlens_k, SymInt? max_seqlen_q, SymInt? max_seqlen_k, float dropout_p, int custom_mask_type, bool compute_log_sumexp=False, *, float? scale=None, Tensor? seqlen_k=None, int? window_size=None) -> (Tensor output, Tensor logsumexp, Tensor philox_seed, Tensor philox_offset, SymInt max_seqlen_batch_q, SymInt max_seqlen_batch_k)"""
    _refuse_unsupported("_efficient_attention_forward", cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k,
                        seqlen_k=seqlen_k, window_size=window_size)
    query_, key_, value_ = _bhsd(query, key, value)
    out, logsumexp, words = _forward(query_, key_, value_, bias, dropout_p, False, scale, key_rng,
                                     _efficient_band(query_, key_, custom_mask_type))
    return (_bhsd(out)[0], _padded_logsumexp(logsumexp, compute_log_sumexp), *_seeds(words),
            query.shape[1], key.shape[1])


@aten("_flash_attention_backward.default")
def aten__flash_attention_backward(
    grad_out, query, key, value, out, logsumexp, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p, is_causal,
    rng_state, unused, *, scale=None, window_size_left=None, window_size_right=None
):
    """_flash_attention_backward(Tensor grad_out, Tensor query, Tensor key, Tensor value, Tensor out, Tensor logsumexp, Tensor cum_seq_q, Tensor cum_seq_k, SymInt max_q, SymInt max_k, float dropout_p, bool is_causal, Tensor rng_state, Tensor unused, *, float? scale=None, SymInt? window_size_left=None, SymInt? window_size_right=None) -> (Tensor, Tensor, Tensor)"""
    _refuse_unsupported("_flash_attention_backward", cum_seq_q=cum_seq_q, cum_seq_k=cum_seq_k)
    query, key, value, grad_out = _bhsd(query, key, value, grad_out)
    grads = _attention_grads(grad_out, query, key, value, None, (True, True, True, False), dropout_p, False, scale,
                             _backward_key(dropout_p, rng_state),
                             band=_flash_band(query, key, is_causal, window_size_left, window_size_right))
    return _bhsd(*grads[:3])


@aten("_flash_attention_forward.default", random="key_rng")
def aten__flash_attention_forward(
    query, key, value, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p, is_causal, return_debug_mask, *, scale=None,
    window_size_left=None, window_size_right=None, seqused_k=None, alibi_slopes=None, block_table=None,
    num_splits=None, key_rng=None
):
    """_flash_attention_forward(Tensor query, Tensor key, Tensor value, Tensor? cum_seq_q, Tensor? cum_seq_k, SymInt max_q, SymInt max_k, float dropout_p, bool is_causal, bool return_debug_mask, *, float? scale=None, SymInt? window_size_left=None, SymInt? window_size_right=None, Tensor? seqused_k=None, Tensor? alibi_slopes=None, Tensor? block_table=None, int? num_splits=None) -> (Tensor output, Tensor softmax_logsumexp, Tensor rng_state, Tensor unused, Tensor debug_attn_mask)"""
    _refuse_unsupported("_flash_attention_forward", cum_seq_q=cum_seq_q, cum_seq_k=cum_seq_k, seqused_k=seqused_k,
                        alibi_slopes=alibi_slopes, block_table=block_table)
    _refuse_debug_mask("_flash_attention_forward", return_debug_mask)
    query_, key_, value_ = _bhsd(query, key, value)
    out, logsumexp, words = _forward(query_, key_, value_, None, dropout_p, False, scale, key_rng,
                                     _flash_band(query_, key_, is_causal, window_size_left, window_size_right))
    return (_bhsd(out)[0], logsumexp, *_flash_seeds(words), jnp.zeros((0,), query.dtype))


@aten("_scaled_dot_product_cudnn_attention.default", random="key_rng")
def aten__scaled_dot_product_cudnn_attention(
    query, key, value, attn_bias, compute_log_sumexp, dropout_p=0.0, is_causal=False, return_debug_mask=False, *,
    scale=None, key_rng=None
):
    """_scaled_dot_product_cudnn_attention(Tensor query, Tensor key, Tensor value, Tensor? attn_bias, bool compute_log_sumexp, float dropout_p=0., bool is_causal=False, bool return_debug_mask=False, *, float? scale=None) -> (Tensor output, Tensor logsumexp, Tensor cum_seq_q, Tensor cum_seq_k, SymInt max_q, SymInt max_k, Tensor philox_seed, Tensor philox_offset, Tensor debug_attn_mask)"""
    out, logsumexp, words = _forward(query, key, value, attn_bias, dropout_p, is_causal, scale, key_rng)
    # The meta kernel records the logsumexp (b, h, q, 1) whether asked for or not, and no debug mask.
    return (out, logsumexp[..., None], None, None, query.shape[-2], key.shape[-2], *_seeds(words), None)


@aten("_scaled_dot_product_cudnn_attention_backward.default")
def aten__scaled_dot_product_cudnn_attention_backward(
    grad_out, query, key, value, out, logsumexp, philox_seed, philox_offset, attn_bias, cum_seq_q, cum_seq_k, max_q,
    max_k, dropout_p, is_causal, *, scale=None
):
    """_scaled_dot_product_cudnn_attention_backward(Tensor grad_out, Tensor query, Tensor key, Tensor value, Tensor out, Tensor logsumexp, Tensor philox_seed, Tensor philox_offset, Tensor attn_bias, Tensor cum_seq_q, Tensor cum_seq_k, SymInt max_q, SymInt max_k, float dropout_p, bool is_causal, *, float? scale=None) -> (Tensor, Tensor, Tensor)"""
    _refuse_unsupported("_scaled_dot_product_cudnn_attention_backward", cum_seq_q=cum_seq_q, cum_seq_k=cum_seq_k)
    return _attention_grads(grad_out, query, key, value, attn_bias, (True, True, True, False), dropout_p, is_causal,
                            scale, _backward_key(dropout_p, philox_seed, philox_offset))[:3]


@aten("_scaled_dot_product_efficient_attention.default", random="key_rng")
def aten__scaled_dot_product_efficient_attention(
    query, key, value, attn_bias, compute_log_sumexp, dropout_p=0.0, is_causal=False, *, scale=None, key_rng=None
):
    """_scaled_dot_product_efficient_attention(Tensor query, Tensor key, Tensor value, Tensor? attn_bias, bool compute_log_sumexp, float dropout_p=0., bool is_causal=False, *, float? scale=None) -> (Tensor output, Tensor log_sumexp, Tensor philox_seed, Tensor philox_offset)"""
    out, logsumexp, words = _forward(query, key, value, attn_bias, dropout_p, is_causal, scale, key_rng)
    return (out, _padded_logsumexp(logsumexp, compute_log_sumexp), *_seeds(words))


@aten("_scaled_dot_product_efficient_attention_backward.default")
def aten__scaled_dot_product_efficient_attention_backward(
    grad_out_, query, key, value, attn_bias, out, logsumexp, philox_seed, philox_offset, dropout_p, grad_input_mask,
    is_causal=False, *, scale=None
):
    """_scaled_dot_product_efficient_attention_backward(Tensor grad_out_, Tensor query, Tensor key, Tensor value, Tensor attn_bias, Tensor out, Tensor logsumexp, Tensor philox_seed, Tensor philox_offset, float dropout_p, bool[4] grad_input_mask, bool is_causal=False, *, float? scale=None) -> (Tensor, Tensor, Tensor, Tensor)"""
    # The bias gradient is None unless asked for, as the meta kernel records it.
    return _attention_grads(grad_out_, query, key, value, attn_bias, grad_input_mask, dropout_p, is_causal, scale,
                            _backward_key(dropout_p, philox_seed, philox_offset))


@aten("_scaled_dot_product_flash_attention.default", random="key_rng")
def aten__scaled_dot_product_flash_attention(
    query, key, value, dropout_p=0.0, is_causal=False, return_debug_mask=False, *, scale=None, key_rng=None
):
    """_scaled_dot_product_flash_attention(Tensor query, Tensor key, Tensor value, float dropout_p=0., bool is_causal=False, bool return_debug_mask=False, *, float? scale=None) -> (Tensor output, Tensor logsumexp, Tensor cum_seq_q, Tensor cum_seq_k, SymInt max_q, SymInt max_k, Tensor rng_state, Tensor unused, Tensor debug_attn_mask)"""
    _refuse_debug_mask("_scaled_dot_product_flash_attention", return_debug_mask)
    out, logsumexp, words = _forward(query, key, value, None, dropout_p, False, scale, key_rng,
                                     _flash_band(query, key, is_causal))
    return (out, logsumexp, None, None, query.shape[2], key.shape[2], *_flash_seeds(words),
            jnp.zeros((0,), query.dtype))


@aten("_scaled_dot_product_flash_attention_backward.default")
def aten__scaled_dot_product_flash_attention_backward(
    grad_out, query, key, value, out, logsumexp, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p, is_causal,
    philox_seed, philox_offset, *, scale=None
):
    """_scaled_dot_product_flash_attention_backward(Tensor grad_out, Tensor query, Tensor key, Tensor value, Tensor out, Tensor logsumexp, Tensor cum_seq_q, Tensor cum_seq_k, SymInt max_q, SymInt max_k, float dropout_p, bool is_causal, Tensor philox_seed, Tensor philox_offset, *, float? scale=None) -> (Tensor grad_query, Tensor grad_key, Tensor grad_value)"""
    _refuse_unsupported("_scaled_dot_product_flash_attention_backward", cum_seq_q=cum_seq_q, cum_seq_k=cum_seq_k)
    return _attention_grads(grad_out, query, key, value, None, (True, True, True, False), dropout_p, False, scale,
                            _backward_key(dropout_p, philox_seed), band=_flash_band(query, key, is_causal))[:3]


@aten("_scaled_dot_product_fused_attention_overrideable.default", random="key_rng")
def aten__scaled_dot_product_fused_attention_overrideable(
    query, key, value, attn_bias=None, dropout_p=0.0, is_causal=False, return_debug_mask=False, *, scale=None,
    key_rng=None
):
    """_scaled_dot_product_fused_attention_overrideable(Tensor query, Tensor key, Tensor value, Tensor? attn_bias=None, float dropout_p=0., bool is_causal=False, bool return_debug_mask=False, *, float? scale=None) -> (Tensor output, Tensor logsumexp, Tensor cum_seq_q, Tensor cum_seq_k, SymInt max_q, SymInt max_k, Tensor philox_seed, Tensor philox_offset, Tensor debug_attn_mask)"""
    out, logsumexp, words = _forward(query, key, value, attn_bias, dropout_p, is_causal, scale, key_rng)
    if query.ndim == 3:  # (heads, q, dim): the meta kernel records the logsumexp (1, heads, q)
        logsumexp = logsumexp[None]
    return (out, logsumexp, None, None, query.shape[-2], key.shape[-2], *_seeds(words), None)


@aten("_scaled_dot_product_fused_attention_overrideable_backward.default")
def aten__scaled_dot_product_fused_attention_overrideable_backward(
    grad_out, query, key, value, attn_bias, grad_input_mask, out, logsumexp, cum_seq_q, cum_seq_k, max_q, max_k,
    dropout_p, is_causal, philox_seed, philox_offset, *, scale=None
):
    """_scaled_dot_product_fused_attention_overrideable_backward(Tensor grad_out, Tensor query, Tensor key, Tensor value, Tensor attn_bias, bool[4] grad_input_mask, Tensor out, Tensor logsumexp, Tensor cum_seq_q, Tensor cum_seq_k, SymInt max_q, SymInt max_k, float dropout_p, bool is_causal, Tensor philox_seed, Tensor philox_offset, *, float? scale=None) -> (Tensor grad_query, Tensor grad_key, Tensor grad_value, Tensor grad_attn_bias)"""
    _refuse_unsupported("_scaled_dot_product_fused_attention_overrideable_backward", cum_seq_q=cum_seq_q,
                        cum_seq_k=cum_seq_k)
    grads = _attention_grads(grad_out, query, key, value, attn_bias, grad_input_mask, dropout_p, is_causal, scale,
                             _backward_key(dropout_p, philox_seed, philox_offset))
    if attn_bias is not None and grads[3] is None:  # the meta kernel records a bias gradient whenever there is a bias
        grads = (*grads[:3], jnp.zeros_like(attn_bias))
    return grads
