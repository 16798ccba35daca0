"""PyTorch's fused attention kernels (flash, memory-efficient, cuDNN, the overridable hook, the math
kernels' own ops) and their backward ops, tested from their schemas: no GPU runs them here, so each
lowering is checked on CPU against what the op's meta kernel records (shapes, dtypes, sizes,
Nones) and against attention in float64 (outputs, logsumexp, and gradients by torch.autograd),
with each kernel's causal alignment, bias, scale, grouped heads and dropout."""

from __future__ import annotations

import jax
import numpy as np
import pytest
import torch

import jaxport
from jaxport import dlpack, dtypes
from jaxport.errors import LoweringError
from jaxport.ops import registry

#: (dtype, tolerance of outputs and gradients, relative to their largest value)
DTYPES = {"float32": (torch.float32, 1e-5), "float16": (torch.float16, 2e-3), "bfloat16": (torch.bfloat16, 2e-2)}
#: logsumexp is float32 whatever the inputs, computed from their exact products.
LSE_TOL = 1e-5


# --- helpers ------------------------------------------------------------------------------


def _randn(seed, dtype, *shapes):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(shape, generator=g).to(dtype) for shape in shapes]


def _jax(value):
    return dlpack.to_jax(value) if isinstance(value, torch.Tensor) else value


def _call(op, *args, rng=0, **kwargs):
    """The lowering of `aten.<op>.default` on these arguments (torch tensors as JAX arrays); a
    random op gets `jax.random.key(rng)`."""
    name = f"aten.{op}.default"
    if registry.random_keyword(name):
        kwargs[registry.random_keyword(name)] = jax.random.key(rng)
    return registry.lookup(name)(*map(_jax, args), **{k: _jax(v) for k, v in kwargs.items()})


def _meta(value):
    if isinstance(value, torch.Tensor):
        return value.to("meta")
    if isinstance(value, jax.Array):
        return torch.empty(value.shape, dtype=dtypes.torch_dtype(value.dtype), device="meta")
    return value


def _assert_as_recorded(outputs, op, *args, **kwargs):
    """Each output as the op's meta kernel records it: a tensor's shape and dtype, a size's
    value, None as None."""
    recorded = getattr(torch.ops.aten, op).default(*map(_meta, args), **{k: _meta(v) for k, v in kwargs.items()})
    assert len(outputs) == len(recorded)
    for i, (out, want) in enumerate(zip(outputs, recorded)):
        if isinstance(want, torch.Tensor):
            got = (tuple(out.shape), np.dtype(out.dtype))
            assert got == (tuple(want.shape), dtypes.numpy_dtype(want.dtype)), f"{op} output {i}: {got}, {want}"
        else:
            assert out == want, f"{op} output {i}: {out!r}, recorded {want!r}"


def _close(actual, expected, tol):
    expected = expected.detach().double().numpy()
    scale = max(1.0, float(np.abs(expected).max()))
    np.testing.assert_allclose(np.asarray(actual, np.float64), expected, rtol=tol, atol=tol * scale)


def _top_left(q_len, k_len):
    return torch.ones(q_len, k_len, dtype=torch.bool).tril()


def _bottom_right(q_len, k_len, left=None, right=0):
    """Flash's band: row i sees keys i + k_len - q_len - left ..= i + k_len - q_len + right."""
    rows = torch.arange(q_len)[:, None] + k_len - q_len
    cols = torch.arange(k_len)[None, :]
    allowed = torch.ones(q_len, k_len, dtype=torch.bool)
    if right is not None:
        allowed &= cols <= rows + right
    if left is not None:
        allowed &= cols >= rows - left
    return allowed


def _reference(q, k, v, *, allowed=None, bias=None, scale=None, keep=None, p=0.0):
    """Attention in float64 on (batch, heads, seq, dim), keys and values repeated per query head:
    (output, logsumexp with 0 for a fully masked row, whose output is zeros)."""
    groups = q.shape[-3] // k.shape[-3]
    k, v = k.repeat_interleave(groups, -3), v.repeat_interleave(groups, -3)
    scores = q @ k.transpose(-1, -2) * (q.shape[-1] ** -0.5 if scale is None else scale)
    if bias is not None:
        scores = scores + bias
    if allowed is not None:
        scores = scores.masked_fill(~allowed, float("-inf"))
    dead = (scores == float("-inf")).all(-1, keepdim=True)
    scores = scores.masked_fill(dead, 0.0)
    weights = torch.softmax(scores, -1).masked_fill(dead, 0.0)
    if keep is not None:
        weights = weights * keep / (1 - p)
    return weights @ v, torch.logsumexp(scores, -1).masked_fill(dead[..., 0], 0.0)


def _wide(*tensors):
    """float64 copies that take gradients."""
    return [None if t is None else t.double().requires_grad_() for t in tensors]


def _bshd(t):
    return t.transpose(1, 2)


# --- forward and backward, op by op ---------------------------------------------------------

#: (queries, keys, key/value heads, is_causal, scale)
FLASH_CASES = {
    "plain": (5, 7, 4, False, None),
    "causal, fewer queries": (5, 7, 4, True, None),
    "causal, more queries (dead rows)": (7, 5, 4, True, None),
    "scale": (5, 7, 4, False, 0.3),
    "gqa causal": (6, 6, 2, True, None),
}


@pytest.mark.usefixtures("x64_strict")
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("case", list(FLASH_CASES))
def test_sdpa_flash(case, dtype):
    """Causal is aligned to the bottom-right corner, as flash-attn 2 (and causal_lower_right)."""
    torch_dtype, tol = DTYPES[dtype]
    q_len, k_len, kv_heads, causal, scale = FLASH_CASES[case]
    q, k, v, grad = _randn(10, torch_dtype, (2, 4, q_len, 8), (2, kv_heads, k_len, 8), (2, kv_heads, k_len, 8),
                           (2, 4, q_len, 8))
    outputs = _call("_scaled_dot_product_flash_attention", q, k, v, 0.0, causal, scale=scale)
    _assert_as_recorded(outputs, "_scaled_dot_product_flash_attention", q, k, v, 0.0, causal, scale=scale)
    wide = _wide(q, k, v)
    expected, lse = _reference(*wide, allowed=_bottom_right(q_len, k_len) if causal else None, scale=scale)
    _close(outputs[0], expected, tol)
    _close(outputs[1], lse, LSE_TOL)
    backward = ("_scaled_dot_product_flash_attention_backward", grad, q, k, v, outputs[0], outputs[1], None, None,
                q_len, k_len, 0.0, causal, outputs[6], outputs[7])
    grads = _call(*backward, scale=scale)
    _assert_as_recorded(grads, *backward, scale=scale)
    for actual, want in zip(grads, torch.autograd.grad(expected, wide, grad.double())):
        _close(actual, want, tol)


#: (is_causal, bias, scale, compute_log_sumexp)
EFFICIENT_CASES = {
    "plain": (False, False, None, True),
    "causal top-left": (True, False, None, True),
    "bias": (False, True, None, True),
    "bias causal scale": (True, True, 0.3, True),
    "no logsumexp": (False, True, None, False),
}


@pytest.mark.usefixtures("x64_strict")
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("case", list(EFFICIENT_CASES))
def test_sdpa_efficient(case, dtype):
    """Causal from the top-left corner (SDPA's); logsumexp padded to 32 queries with +inf."""
    torch_dtype, tol = DTYPES[dtype]
    causal, with_bias, scale, compute_lse = EFFICIENT_CASES[case]
    q, k, v, grad, bias = _randn(11, torch_dtype, (2, 4, 5, 8), (2, 4, 7, 8), (2, 4, 7, 6), (2, 4, 5, 6),
                                 (2, 4, 5, 7))
    bias = bias if with_bias else None
    forward = ("_scaled_dot_product_efficient_attention", q, k, v, bias, compute_lse, 0.0, causal)
    outputs = _call(*forward, scale=scale)
    _assert_as_recorded(outputs, *forward, scale=scale)
    wide = _wide(q, k, v, bias)
    expected, lse = _reference(*wide[:3], bias=wide[3], allowed=_top_left(5, 7) if causal else None, scale=scale)
    _close(outputs[0], expected, tol)
    if compute_lse:
        _close(outputs[1][..., :5], lse, LSE_TOL)
        assert np.all(np.asarray(outputs[1][..., 5:]) == np.inf)
    for mask in ([True, True, True, True], [False, True, False, True], [True, True, True, False]):
        backward = ("_scaled_dot_product_efficient_attention_backward", grad, q, k, v, bias, outputs[0], outputs[1],
                    outputs[2], outputs[3], 0.0, mask, causal)
        grads = _call(*backward, scale=scale)
        _assert_as_recorded(grads, *backward, scale=scale)
        wanted = [w and t is not None for w, t in zip(mask, wide)]
        references = iter(torch.autograd.grad(expected, [t for t, w in zip(wide, wanted) if w], grad.double(),
                                              retain_graph=True))
        for actual, w, t in zip(grads, wanted, (q, k, v, bias)):
            if w:
                _close(actual, next(references), tol)
            elif t is not None and actual is not None:
                assert not np.asarray(actual).any()  # not asked for: zeros, no work


@pytest.mark.usefixtures("x64_strict")
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("case", ["causal top-left", "bias", "gqa causal"])
def test_sdpa_cudnn(case, dtype):
    torch_dtype, tol = DTYPES[dtype]
    kv_heads, causal = (2, True) if case == "gqa causal" else (4, case == "causal top-left")
    q, k, v, grad, bias = _randn(12, torch_dtype, (2, 4, 5, 8), (2, kv_heads, 7, 8), (2, kv_heads, 7, 8),
                                 (2, 4, 5, 8), (2, 4, 5, 7))
    bias = bias if case == "bias" else None
    forward = ("_scaled_dot_product_cudnn_attention", q, k, v, bias, True, 0.0, causal)
    outputs = _call(*forward)
    _assert_as_recorded(outputs, *forward)
    wide = _wide(q, k, v, bias)
    expected, lse = _reference(*wide[:3], bias=wide[3], allowed=_top_left(5, 7) if causal else None)
    _close(outputs[0], expected, tol)
    _close(outputs[1][..., 0], lse, LSE_TOL)
    backward = ("_scaled_dot_product_cudnn_attention_backward", grad, q, k, v, outputs[0], outputs[1], outputs[6],
                outputs[7], bias, None, None, 5, 7, 0.0, causal)
    grads = _call(*backward)
    _assert_as_recorded(grads, *backward)
    for actual, want in zip(grads, torch.autograd.grad(expected, wide[:3], grad.double())):
        _close(actual, want, tol)


#: (queries, keys, key/value heads, is_causal, window_size_left, window_size_right)
FLASH_FORWARD_CASES = {
    "causal, fewer queries": (5, 7, 4, True, None, None),
    "causal, more queries (dead rows)": (7, 5, 4, True, None, None),
    "causal sliding window": (6, 9, 4, True, 2, None),
    "window both sides": (6, 6, 4, False, 1, 1),
    "window past the keys is none": (6, 6, 2, False, 6, -1),
    "gqa": (5, 7, 2, False, None, None),
}


@pytest.mark.usefixtures("x64_strict")
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("case", list(FLASH_FORWARD_CASES))
def test_flash_attention_forward_and_backward(case, dtype):
    """(batch, seq, heads, dim) layout; causal and windows aligned to the bottom-right corner."""
    torch_dtype, tol = DTYPES[dtype]
    q_len, k_len, kv_heads, causal, left, right = FLASH_FORWARD_CASES[case]
    q, k, v, grad = _randn(13, torch_dtype, (2, q_len, 4, 8), (2, k_len, kv_heads, 8), (2, k_len, kv_heads, 8),
                           (2, q_len, 4, 8))
    windows = {"window_size_left": left, "window_size_right": right}
    forward = ("_flash_attention_forward", q, k, v, None, None, q_len, k_len, 0.0, causal, False)
    outputs = _call(*forward, **windows)
    _assert_as_recorded(outputs, *forward, **windows)
    wide = _wide(q, k, v)
    band = _bottom_right(q_len, k_len, left if left is not None and left < k_len else None,
                         0 if causal else right if right is not None and 0 <= right < k_len else None)
    expected, lse = _reference(*map(_bshd, wide), allowed=band)
    _close(outputs[0], _bshd(expected), tol)
    _close(outputs[1], lse, LSE_TOL)
    backward = ("_flash_attention_backward", grad, q, k, v, outputs[0], outputs[1], None, None, q_len, k_len, 0.0,
                causal, outputs[2], outputs[3])
    grads = _call(*backward, window_size_left=left, window_size_right=right)
    _assert_as_recorded(grads, *backward, window_size_left=left, window_size_right=right)
    for actual, want in zip(grads, torch.autograd.grad(_bshd(expected), wide, grad.double())):
        _close(actual, want, tol)


@pytest.mark.usefixtures("x64_strict")
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("custom_mask_type", [0, 1, 2], ids=["none", "top-left", "bottom-right"])
@pytest.mark.parametrize("bias_requires_grad", [True, False, None], ids=["bias", "bias no grad", "no bias"])
def test_efficient_attention_forward_and_backward(bias_requires_grad, custom_mask_type, dtype):
    torch_dtype, tol = DTYPES[dtype]
    q, k, v, grad, bias = _randn(14, torch_dtype, (2, 6, 4, 8), (2, 9, 4, 8), (2, 9, 4, 5), (2, 6, 4, 5),
                                 (2, 4, 6, 9))
    bias = None if bias_requires_grad is None else bias
    forward = ("_efficient_attention_forward", q, k, v, bias, None, None, None, None, 0.0, custom_mask_type, True)
    outputs = _call(*forward, scale=0.4)
    _assert_as_recorded(outputs, *forward, scale=0.4)
    wide = _wide(q, k, v, bias)
    band = [None, _top_left(6, 9), _bottom_right(6, 9)][custom_mask_type]
    expected, lse = _reference(*map(_bshd, wide[:3]), bias=wide[3], allowed=band, scale=0.4)
    _close(outputs[0], _bshd(expected), tol)
    _close(outputs[1][..., :6], lse, LSE_TOL)
    backward = ("_efficient_attention_backward", grad, q, k, v, bias, outputs[0], None, None, 6, 9, outputs[1], 0.0,
                outputs[2], outputs[3], custom_mask_type, bool(bias_requires_grad))
    grads = _call(*backward, scale=0.4)
    # torch 2.13's meta kernel of this op lacks the schema's `out` parameter, so its positional
    # arguments shift by one and `scale=` collides; the shapes it records come out right without it.
    _assert_as_recorded(grads, *backward)
    differentiated = wide if bias_requires_grad else wide[:3]
    for actual, want in zip(grads, torch.autograd.grad(_bshd(expected), differentiated, grad.double())):
        _close(actual, want, tol)
    if bias_requires_grad is False:
        assert not np.asarray(grads[3]).any()


@pytest.mark.usefixtures("x64_strict")
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("rank", [4, 3])
@pytest.mark.parametrize("mask", [[True, True, True, True], [True, False, True, False]], ids=["all", "some"])
def test_fused_attention_overrideable(mask, rank, dtype):
    """The hook out-of-tree backends implement: SDPA's semantics (causal from the top-left)."""
    torch_dtype, tol = DTYPES[dtype]
    q, k, v, grad, bias = _randn(15, torch_dtype, (2, 4, 5, 8), (2, 4, 7, 8), (2, 4, 7, 8), (2, 4, 5, 8),
                                 (2, 4, 5, 7))
    if rank == 3:
        q, k, v, grad, bias = (t[0] for t in (q, k, v, grad, bias))
    forward = ("_scaled_dot_product_fused_attention_overrideable", q, k, v, bias, 0.0, True)
    outputs = _call(*forward)
    _assert_as_recorded(outputs, *forward)
    wide = _wide(q, k, v, bias)
    expected, lse = _reference(*wide[:3], bias=wide[3], allowed=_top_left(5, 7))
    _close(outputs[0], expected, tol)
    _close(outputs[1].reshape(lse.shape), lse, LSE_TOL)
    backward = ("_scaled_dot_product_fused_attention_overrideable_backward", grad, q, k, v, bias, mask, outputs[0],
                outputs[1], None, None, 5, 7, 0.0, True, outputs[6], outputs[7])
    grads = _call(*backward)
    _assert_as_recorded(grads, *backward)
    references = iter(torch.autograd.grad(expected, [t for t, w in zip(wide, mask) if w], grad.double()))
    for actual, wanted in zip(grads, mask):
        if wanted:
            _close(actual, next(references), tol)
        else:
            assert not np.asarray(actual).any()


MATH_CASES = {
    "causal, fewer queries": ({"is_causal": True}, None, (4, 7)),
    "causal, more queries": ({"is_causal": True}, None, (4, 4)),
    "bool mask": ({}, "bool", (4, 7)),
    "float mask scale": ({"scale": 0.3}, "float", (4, 7)),
    "gqa": ({"enable_gqa": True, "is_causal": True}, None, (2, 7)),
    "dropout mask": ({"dropout_p": 0.5}, "dropout", (2, 7)),
}


@pytest.mark.usefixtures("x64_strict")
@pytest.mark.parametrize("op", ["_scaled_dot_product_attention_math", "_scaled_dot_product_attention_math_for_mps"])
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("case", list(MATH_CASES))
def test_math_ops_match_pytorchs_math_kernel(case, dtype, op):
    """Both outputs (the attention and its weights, after dropout) equal PyTorch's CPU math kernel,
    a boolean mask included, which that kernel adds as 0 and 1."""
    torch_dtype, tol = DTYPES[dtype]
    options, extra, (kv_heads, k_len) = MATH_CASES[case]
    q_len = 5 if k_len == 7 else 6
    q, k, v, mask = _randn(16, torch_dtype, (2, 4, q_len, 8), (2, kv_heads, k_len, 8), (2, kv_heads, k_len, 8),
                           (2, 4, q_len, k_len))
    kwargs = dict(options)
    if extra == "bool":
        kwargs["attn_mask"] = mask > -0.5
        kwargs["attn_mask"][..., 0] = True
    elif extra == "float":
        kwargs["attn_mask"] = mask
    elif extra == "dropout":
        kwargs["dropout_mask"] = torch.rand(2, 4, q_len, k_len, generator=torch.Generator().manual_seed(1)) > 0.5
        kwargs["enable_gqa"] = True
    reference = dict(kwargs)
    if op.endswith("_for_mps") and extra == "bool":
        # The MPS kernels read a boolean mask as one; PyTorch's CPU math kernel adds it as 0 and 1
        # (SDPA makes one additive before calling it), so it is compared made additive.
        reference["attn_mask"] = torch.zeros(mask.shape).masked_fill(~kwargs["attn_mask"], float("-inf"))
    expected = torch.ops.aten._scaled_dot_product_attention_math(q, k, v, **reference)
    outputs = _call(op, q, k, v, **kwargs)
    _assert_as_recorded(outputs, op, q, k, v, **kwargs)
    for actual, want in zip(outputs, expected):
        _close(np.asarray(actual, np.float32), want.float(), tol)


@pytest.mark.usefixtures("x64_strict")
@pytest.mark.parametrize("dtype", ["float64", *DTYPES])
@pytest.mark.parametrize("case", ["causal", "-inf mask", "float mask scale"])
def test_flash_attention_for_cpu_backward_matches_pytorchs_cpu_kernel(case, dtype):
    """The one backward PyTorch runs on CPU: compared with its own kernel and with autograd, a
    fully masked row included; the forward's logsumexp is in opmath (float64 for float64 inputs,
    as the meta kernel records)."""
    torch_dtype, tol = (torch.float64, 1e-7) if dtype == "float64" else DTYPES[dtype]
    q, k, v, grad, mask = _randn(17, torch_dtype, (2, 4, 5, 8), (2, 4, 7, 8), (2, 4, 7, 8), (2, 4, 5, 8),
                                 (2, 4, 5, 7))
    blocked = mask.masked_fill(mask < -0.5, float("-inf"))
    blocked[1, :, 2] = float("-inf")  # a dead row
    kwargs = {"-inf mask": {"attn_mask": blocked}, "float mask scale": {"attn_mask": mask, "scale": 0.3},
              "causal": {}}[case]
    causal = case == "causal"
    forward = ("_scaled_dot_product_flash_attention_for_cpu", q, k, v, 0.0, causal)
    outputs = _call(*forward, **kwargs)
    _assert_as_recorded(outputs, *forward, **kwargs)
    backward = ("_scaled_dot_product_flash_attention_for_cpu_backward", grad, q, k, v, outputs[0], outputs[1], 0.0,
                causal)
    grads = _call(*backward, **kwargs)
    _assert_as_recorded(grads, *backward, **kwargs)
    out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, causal, **kwargs)
    pytorch = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward(grad, q, k, v, out, lse, 0.0, causal,
                                                                                 **kwargs)
    wide = _wide(q, k, v)
    bias = kwargs.get("attn_mask")
    expected, _ = _reference(*wide, allowed=_top_left(5, 7) if causal else None,
                             bias=None if bias is None else bias.double(), scale=kwargs.get("scale"))
    for actual, theirs, want in zip(grads, pytorch, torch.autograd.grad(expected, wide, grad.double())):
        _close(actual, want, tol)
        _close(actual, theirs, 2 * tol)


# --- dropout: the backward redraws the forward's mask from its seeds ------------------------

#: forward op -> (layout, a forward call, the backward call given the forward's outputs)
DROPOUT_OPS = {
    "sdpa flash": ("bhsd", lambda q, k, v, p: ("_scaled_dot_product_flash_attention", q, k, v, p, True),
                   lambda g, q, k, v, o, p: ("_scaled_dot_product_flash_attention_backward", g, q, k, v, o[0], o[1],
                                             None, None, 5, 7, p, True, o[6], o[7])),
    "sdpa efficient": ("bhsd", lambda q, k, v, p: ("_scaled_dot_product_efficient_attention", q, k, v, None, True, p),
                       lambda g, q, k, v, o, p: ("_scaled_dot_product_efficient_attention_backward", g, q, k, v, None,
                                                 o[0], o[1], o[2], o[3], p, [True, True, True, False])),
    "cudnn": ("bhsd", lambda q, k, v, p: ("_scaled_dot_product_cudnn_attention", q, k, v, None, True, p),
              lambda g, q, k, v, o, p: ("_scaled_dot_product_cudnn_attention_backward", g, q, k, v, o[0], o[1], o[6],
                                        o[7], None, None, None, 5, 7, p, False)),
    "overrideable": ("bhsd", lambda q, k, v, p: ("_scaled_dot_product_fused_attention_overrideable", q, k, v, None,
                                                 p),
                     lambda g, q, k, v, o, p: ("_scaled_dot_product_fused_attention_overrideable_backward", g, q, k, v,
                                               None, [True] * 4, o[0], o[1], None, None, 5, 7, p, False, o[6], o[7])),
    "flash": ("bshd", lambda q, k, v, p: ("_flash_attention_forward", q, k, v, None, None, 5, 7, p, True, False),
              lambda g, q, k, v, o, p: ("_flash_attention_backward", g, q, k, v, o[0], o[1], None, None, 5, 7, p,
                                        True, o[2], o[3])),
    "efficient": ("bshd", lambda q, k, v, p: ("_efficient_attention_forward", q, k, v, None, None, None, None, None,
                                              p, 0, True),
                  lambda g, q, k, v, o, p: ("_efficient_attention_backward", g, q, k, v, None, o[0], None, None, 5, 7,
                                            o[1], p, o[2], o[3], 0, False)),
}


@pytest.mark.usefixtures("x64_strict")
@pytest.mark.parametrize("op", list(DROPOUT_OPS))
def test_dropout_backward_reuses_the_forwards_mask(op):
    layout, forward, backward = DROPOUT_OPS[op]
    p = 0.4
    q, k, v, grad = _randn(18, torch.float32, (2, 4, 5, 8), (2, 4, 7, 8), (2, 4, 7, 8), (2, 4, 5, 8))
    arrange = _bshd if layout == "bshd" else (lambda t: t)
    q, k, v, grad = map(arrange, (q, k, v, grad))
    outputs = _call(*forward(q, k, v, p), rng=3)
    _assert_as_recorded(outputs, *forward(q, k, v, p))
    # The mask the forward drew: attention over values that are the identity reads the weights off.
    eye = arrange(torch.eye(7).expand(2, 4, 7, 7))
    keep = arrange(torch.from_numpy(np.array(_call(*forward(q, k, eye, p), rng=3)[0])) != 0)
    assert 0.3 < keep.float().mean() < 0.9  # some dropped, most kept
    wide = _wide(q, k, v)
    expected, _ = _reference(*map(arrange, wide), keep=keep, p=p, allowed=_bottom_right(5, 7) if "flash" in op
                             else None)
    _close(outputs[0], arrange(expected), 1e-5)
    grads = _call(*backward(grad, q, k, v, outputs, p))
    _assert_as_recorded(grads, *backward(grad, q, k, v, outputs, p))
    for actual, want in zip(grads, torch.autograd.grad(arrange(expected), wide, grad.double())):
        _close(actual, want, 1e-5)
    # Another key draws another mask, and hands its backward other seeds.
    other = _call(*forward(q, k, v, p), rng=4)
    assert not np.allclose(np.asarray(other[0]), np.asarray(outputs[0]))


@pytest.fixture
def x64_off():
    old = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", False)
    yield
    jax.config.update("jax_enable_x64", old)


@pytest.mark.usefixtures("x64_off")
def test_dropout_seeds_are_stored_bit_for_bit_without_x64():
    """Without x64 the int64 and uint64 seeds are 32 bits wide: the key's words are bitcast in."""
    q, k, v, grad = _randn(19, torch.float32, (1, 2, 5, 8), (1, 2, 7, 8), (1, 2, 7, 8), (1, 2, 5, 8))
    for seed in range(4):  # words with the top bit set and not
        flash = _call("_scaled_dot_product_flash_attention", q, k, v, 0.5, rng=seed)
        efficient = _call("_scaled_dot_product_efficient_attention", q, k, v, None, False, 0.5, rng=seed)
        assert flash[6].dtype == np.uint32 and efficient[2].dtype == np.int32
        words = np.asarray(flash[6])
        assert np.array_equal(words.view(np.int32), [int(efficient[2]), int(efficient[3])])
        grads = _call("_scaled_dot_product_efficient_attention_backward", grad, q, k, v, None, efficient[0],
                      efficient[1], efficient[2], efficient[3], 0.5, [True, True, True, False])
        flash_grads = _call("_scaled_dot_product_flash_attention_backward", grad, q, k, v, flash[0], flash[1], None,
                            None, 5, 7, 0.5, False, flash[6], flash[7])
        for a, b in zip(grads[:3], flash_grads):  # one key, one mask: the same gradients
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-6)


# --- refusals -------------------------------------------------------------------------------

_Q, _K = torch.zeros(2, 5, 4, 8), torch.zeros(2, 7, 4, 8)
_LENGTHS = torch.tensor([0, 5, 10], dtype=torch.int32)
REFUSALS = {
    "cpu flash backward with dropout": (
        ("_scaled_dot_product_flash_attention_for_cpu_backward", _bshd(_Q), _bshd(_Q), _bshd(_K), _bshd(_K),
         _bshd(_Q), torch.zeros(2, 4, 5), 0.1, False), {}, "no seed to redraw its dropout mask"),
    "flash varlen": (("_flash_attention_forward", _Q[0], _K[0], _K[0], _LENGTHS, _LENGTHS, 5, 7, 0.0, False, False),
                     {}, "cum_seq_q, cum_seq_k: packed variable-length"),
    "flash alibi": (("_flash_attention_forward", _Q, _K, _K, None, None, 5, 7, 0.0, True, False),
                    {"alibi_slopes": torch.zeros(4)}, "alibi_slopes"),
    "flash debug mask": (("_scaled_dot_product_flash_attention", _bshd(_Q), _bshd(_K), _bshd(_K), 0.0, False, True),
                         {}, "return_debug_mask=True"),
    "efficient window": (("_efficient_attention_forward", _Q, _K, _K, None, None, None, None, None, 0.0, 1), {
        "window_size": 3}, "window_size"),
    "efficient varlen backward": (
        ("_efficient_attention_backward", _Q, _Q, _K, _K, None, _Q, _LENGTHS, _LENGTHS, 5, 7, torch.zeros(2, 4, 32),
         0.0, torch.zeros((), dtype=torch.int64), torch.zeros((), dtype=torch.int64), 0, False), {}, "cu_seqlens_q"),
}


@pytest.mark.parametrize("case", list(REFUSALS))
def test_refusals_say_what_is_not_lowered(case):
    args, kwargs, message = REFUSALS[case]
    with pytest.raises(NotImplementedError, match=message):
        _call(*args, **kwargs)


# --- end to end: graphs recorded on another device, converted and run on CPU ----------------


class _Efficient(torch.nn.Module):
    def forward(self, q, k, v, bias):
        out, lse, _, _ = torch.ops.aten._scaled_dot_product_efficient_attention(q, k, v, bias, True, 0.0, True)
        return out, lse


class _Flash(torch.nn.Module):
    def forward(self, q, k, v):
        out, lse, *_ = torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, 0.0, True, scale=0.25)
        return out, lse


def _export_on_meta(module, *args):
    return jaxport.from_exported_program(torch.export.export(module, tuple(a.to("meta") for a in args)))


def test_efficient_attention_exported_on_meta_runs_on_cpu():
    q, k, v, bias = _randn(20, torch.float32, (2, 4, 5, 8), (2, 4, 7, 8), (2, 4, 7, 8), (2, 4, 5, 7))
    model = _export_on_meta(_Efficient(), q, k, v, bias)
    assert "aten._scaled_dot_product_efficient_attention.default" in model.program.ops()
    out, lse = model(q, k, v, bias)
    causal = torch.zeros(5, 7).masked_fill(~_top_left(5, 7), float("-inf"))
    expected = torch.ops.aten._scaled_dot_product_attention_math(q, k, v, bias + causal)[0]
    np.testing.assert_allclose(np.asarray(out), expected.numpy(), rtol=1e-5, atol=1e-5)
    assert lse.shape == (2, 4, 32) and np.all(np.asarray(lse)[..., 5:] == np.inf)


def test_flash_attention_exported_on_meta_runs_on_cpu():
    q, k, v = _randn(21, torch.float16, (2, 4, 6, 8), (2, 4, 6, 8), (2, 4, 6, 8))
    model = _export_on_meta(_Flash(), q, k, v)
    out, lse = model(q, k, v)
    expected = torch.ops.aten._scaled_dot_product_attention_math(q, k, v, is_causal=True, scale=0.25)[0]
    assert out.dtype == np.float16 and lse.dtype == np.float32
    np.testing.assert_allclose(np.asarray(out, np.float32), expected.float().numpy(), rtol=2e-3, atol=2e-3)
    _, reference_lse = _reference(*_wide(q, k, v), allowed=_top_left(6, 6), scale=0.25)
    _close(lse, reference_lse, LSE_TOL)


class _TrainingStep(torch.nn.Module):
    """Forward and backward of flash attention with dropout in one graph, as a joint graph holds them."""

    def forward(self, q, k, v, grad):
        out, lse, cum_q, cum_k, max_q, max_k, seed, offset, _ = torch.ops.aten._scaled_dot_product_flash_attention(
            q, k, v, 0.3, True)
        grads = torch.ops.aten._scaled_dot_product_flash_attention_backward(
            grad, q, k, v, out, lse, cum_q, cum_k, max_q, max_k, 0.3, True, seed, offset)
        return out, *grads


def test_dropout_forward_and_backward_in_one_graph():
    """The seeds pass from the forward node to the backward node through the interpreter."""
    # Head size 7, the key length, so that values of the identity fit the graph's shapes.
    q, k, v, grad = _randn(22, torch.float32, (2, 4, 5, 7), (2, 4, 7, 7), (2, 4, 7, 7), (2, 4, 5, 7))
    ep = torch.export.export(_TrainingStep(), tuple(t.to("meta") for t in (q, k, v, grad)))
    model = jaxport.from_exported_program(ep, training=True)
    rng = jax.random.key(5)
    out, *grads = model(q, k, v, grad, rng=rng)
    eye = torch.eye(7).expand(2, 4, 7, 7)
    # The same node under the same key draws the same mask; values of the identity read it off.
    keep = torch.from_numpy(np.array(model(q, k, eye, grad, rng=rng)[0])) != 0
    wide = _wide(q, k, v)
    expected, _ = _reference(*wide, keep=keep, p=0.3, allowed=_bottom_right(5, 7))
    _close(out, expected, 1e-5)
    for actual, want in zip(grads, torch.autograd.grad(expected, wide, grad.double())):
        _close(actual, want, 1e-5)


def test_a_refusal_in_a_graph_names_the_node():
    class DebugMask(torch.nn.Module):
        def forward(self, q, k, v):
            return torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, 0.0, False, True)[0]

    q = torch.zeros(1, 2, 4, 8)
    model = _export_on_meta(DebugMask(), q, q, q)
    with pytest.raises(LoweringError, match="_scaled_dot_product_flash_attention.*return_debug_mask=True"):
        model(q, q, q)
