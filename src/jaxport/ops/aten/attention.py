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

`is_causal` here is PyTorch's SDPA meaning, a causal mask aligned to the top-left corner
(`torch.tril(ones(L, S))`, `torch.nn.attention.bias.causal_upper_left`), as the math kernel
builds it; kernels that align it otherwise pass their own `band` (`attention_kernels`).

Backward ops differentiate this same formulation (`_attention_grads`, `jax.vjp` in opmath),
never a second copy of it, so forward and backward agree on masks, dead rows and dropout.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from .._attention import group_heads, ungroup_heads, unmasked_attention
from ..registry import aten
from ._promotion import opmath_type
from .softmax import safe_softmax


def _scale(query, scale):
    return 1.0 / math.sqrt(query.shape[-1]) if scale is None else scale


def _causal(query, key):
    return jnp.tril(jnp.ones((query.shape[-2], key.shape[-2]), dtype=bool))


def _masked_scores(query, key, attn_mask, is_causal, scale, band=None):
    """Scores (..., kv_heads, groups, q, k) in opmath, masked with -inf: by the causal mask, by
    `band` ((q, k), True where a query may attend) and by `attn_mask`."""
    groups = query.shape[-3] // key.shape[-3]
    compute = opmath_type(query.dtype)
    scores = jnp.einsum("...gqd,...kd->...gqk", group_heads(query, groups), key,
                        preferred_element_type=compute) * _scale(query, scale)
    if is_causal:
        scores = jnp.where(_causal(query, key), scores, -jnp.inf)
    if band is not None:
        scores = jnp.where(band, scores, -jnp.inf)
    if attn_mask is not None:
        attn_mask = group_heads(attn_mask[None] if attn_mask.ndim == 2 else attn_mask, groups)
        if attn_mask.dtype == jnp.bool_:
            scores = jnp.where(attn_mask, scores, -jnp.inf)
        else:
            # A float mask is float32 or the query's dtype (PyTorch checks): this only widens.
            scores = scores + attn_mask.astype(compute)
    return scores


def _attention(query, key, value, attn_mask, dropout_p, is_causal, scale, key_rng, *, band=None, keep=None):
    """(output, weights after dropout, scores, dead rows), the last three grouped as
    `_masked_scores` leaves them. Dropout keeps the weights `keep` says (True: kept; the math
    kernel's `dropout_mask`) or draws them from `key_rng`, and scales the kept by 1 / (1 - p)."""
    if query.ndim == 2:  # no head axis: one head
        out, weights, scores, dead = _attention(query[None], key[None], value[None], attn_mask, dropout_p,
                                                is_causal, scale, key_rng, band=band, keep=keep)
        return out[0], weights[0], scores[0], dead[0]
    scores = _masked_scores(query, key, attn_mask, is_causal, scale, band)
    # Like torch's _safe_softmax: fully masked rows get zero weights, not NaN (nor NaN gradients).
    weights, dead = safe_softmax(scores, -1)
    if dropout_p > 0.0:
        if keep is None:
            keep = jax.random.bernoulli(key_rng, 1.0 - dropout_p, weights.shape)
        else:
            keep = group_heads(keep, query.shape[-3] // key.shape[-3])
        weights = jnp.where(keep, weights / (1.0 - dropout_p), 0.0)
    out = jnp.einsum("...gqk,...kd->...gqd", weights, value.astype(weights.dtype))
    return ungroup_heads(out).astype(query.dtype), weights, scores, dead


def _logsumexp(scores, dead):
    """(..., heads, q) logsumexp of each query row's scores, 0 for a dead row (as the CPU flash
    kernel reports it), in the scores' dtype."""
    logsumexp = jnp.where(dead, 0.0, jax.nn.logsumexp(jnp.where(dead, 0.0, scores), axis=-1, keepdims=True))
    return ungroup_heads(logsumexp)[..., 0]


def _attention_grads(grad_out, query, key, value, attn_mask, wanted, dropout_p, is_causal, scale, key_rng=None, *,
                     band=None):
    """(grad_query, grad_key, grad_value, grad_attn_mask): `jax.vjp` of `_attention`'s output,
    computed in opmath (float32 for half inputs) and returned in each input's dtype.

    Only the inputs `wanted` says (four bools, as the ops' `grad_input_mask`) are differentiated;
    the others get zeros of their shape, and a missing or boolean mask None. With dropout,
    `key_rng` must be the key the forward drew its mask from."""
    primals = (query, key, value, attn_mask)
    wanted = [bool(w) and p is not None and jnp.issubdtype(p.dtype, jnp.floating) for w, p in zip(wanted, primals)]
    compute = opmath_type(query.dtype)
    upcast = [p if p is None or not jnp.issubdtype(p.dtype, jnp.floating) else p.astype(compute) for p in primals]
    chosen = [i for i, w in enumerate(wanted) if w]

    def output(*differentiated):
        args = list(upcast)
        for i, array in zip(chosen, differentiated):
            args[i] = array
        return _attention(*args, dropout_p, is_causal, scale, key_rng, band=band)[0]

    _, pullback = jax.vjp(output, *(upcast[i] for i in chosen))
    grads = dict(zip(chosen, pullback(grad_out.astype(compute))))
    return tuple(grads[i].astype(p.dtype) if i in grads else None if p is None or i == 3 else jnp.zeros_like(p)
                 for i, p in enumerate(primals))


@aten("scaled_dot_product_attention.default", random="key_rng")
def aten_scaled_dot_product_attention(
    query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, *, scale=None, enable_gqa=False, key_rng=None
):
    """scaled_dot_product_attention(Tensor query, Tensor key, Tensor value, Tensor? attn_mask=None, float dropout_p=0., bool is_causal=False, *, float? scale=None, bool enable_gqa=False) -> Tensor"""
    if attn_mask is None and dropout_p == 0.0 and not is_causal:
        return _unmasked(query, key, value, scale)[0]
    return _attention(query, key, value, attn_mask, dropout_p, is_causal, scale, key_rng)[0]


def _unmasked(query, key, value, scale):
    """(output, logsumexp) of attention without mask or dropout, through `unmasked_attention`
    (a compiled kernel on CPU where one applies)."""

    def formulation(query, key, value):
        out, _, scores, dead = _attention(query, key, value, None, 0.0, False, scale, None)
        return out, _logsumexp(scores, dead)

    return unmasked_attention(query, key, value, _scale(query, scale), formulation)


def _math(query, key, value, attn_mask, dropout_p, is_causal, dropout_mask, scale, key_rng):
    """The math kernels' (output, weights after dropout), the weights ungrouped in the query's dtype."""
    out, weights, _, _ = _attention(query, key, value, attn_mask, dropout_p, is_causal, scale, key_rng,
                                    keep=dropout_mask)
    if dropout_p > 0.0 and dropout_mask is not None:
        weights = weights * (1.0 - dropout_p)  # PyTorch returns these weights masked but not rescaled
    return out, ungroup_heads(weights).astype(query.dtype)


@aten("_scaled_dot_product_attention_math.default", random="key_rng")
def aten__scaled_dot_product_attention_math(
    query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, dropout_mask=None, *, scale=None,
    enable_gqa=False, key_rng=None
):
    """_scaled_dot_product_attention_math(Tensor query, Tensor key, Tensor value, Tensor? attn_mask=None, float dropout_p=0., bool is_causal=False, Tensor? dropout_mask=None, *, float? scale=None, bool enable_gqa=False) -> (Tensor, Tensor)"""
    if attn_mask is not None and attn_mask.dtype == jnp.bool_:
        # This kernel adds its mask as it is, a boolean one as 0 and 1 (SDPA makes one additive
        # before it calls the kernel).
        attn_mask = attn_mask.astype(query.dtype)
    return _math(query, key, value, attn_mask, dropout_p, is_causal, dropout_mask, scale, key_rng)


@aten("_scaled_dot_product_attention_math_for_mps.default", random="key_rng")
def aten__scaled_dot_product_attention_math_for_mps(
    query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, dropout_mask=None, *, scale=None,
    enable_gqa=False, key_rng=None
):
    """_scaled_dot_product_attention_math_for_mps(Tensor query, Tensor key, Tensor value, Tensor? attn_mask=None, float dropout_p=0., bool is_causal=False, Tensor? dropout_mask=None, *, float? scale=None, bool enable_gqa=False) -> (Tensor, Tensor)"""
    # A boolean mask masks here (True: attend): the MPS kernels take boolean masks on paths of their
    # own, unlike the CPU math kernel (read from PyTorch's sources; no MPS device checked it).
    return _math(query, key, value, attn_mask, dropout_p, is_causal, dropout_mask, scale, key_rng)


@aten("_scaled_dot_product_flash_attention_for_cpu.default", random="key_rng")
def aten__scaled_dot_product_flash_attention_for_cpu(
    query, key, value, dropout_p=0.0, is_causal=False, *, attn_mask=None, scale=None, key_rng=None
):
    """_scaled_dot_product_flash_attention_for_cpu(Tensor query, Tensor key, Tensor value, float dropout_p=0., bool is_causal=False, *, Tensor? attn_mask=None, float? scale=None) -> (Tensor output, Tensor logsumexp)"""
    if attn_mask is None and dropout_p == 0.0 and not is_causal:
        return _unmasked(query, key, value, scale)
    out, _, scores, dead = _attention(query, key, value, attn_mask, dropout_p, is_causal, scale, key_rng)
    # The CPU flash kernel reports logsumexp 0 for fully masked rows, in opmath (float64 for float64).
    return out, _logsumexp(scores, dead)


@aten("_scaled_dot_product_flash_attention_for_cpu_backward.default")
def aten__scaled_dot_product_flash_attention_for_cpu_backward(
    grad_out, query, key, value, out, logsumexp, dropout_p, is_causal, *, attn_mask=None, scale=None
):
    """_scaled_dot_product_flash_attention_for_cpu_backward(Tensor grad_out, Tensor query, Tensor key, Tensor value, Tensor out, Tensor logsumexp, float dropout_p, bool is_causal, *, Tensor? attn_mask=None, float? scale=None) -> (Tensor grad_query, Tensor grad_key, Tensor grad_value)"""
    if dropout_p > 0.0:
        raise NotImplementedError(
            f"_scaled_dot_product_flash_attention_for_cpu_backward with dropout_p={dropout_p}: the forward "
            "returns no seed to redraw its dropout mask from, so the gradient cannot be computed (PyTorch's "
            "CPU flash kernel refuses dropout too; its math kernel, which SDPA uses then, is supported)")
    return _attention_grads(grad_out, query, key, value, attn_mask, (True, True, True, False), 0.0, is_causal,
                            scale)[:3]
