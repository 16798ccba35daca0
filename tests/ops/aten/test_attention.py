"""scaled_dot_product_attention stays whole and matches PyTorch: masks, causal, scale, GQA,
and fully masked query rows (zeros for all -inf / all-False rows, as PyTorch's CPU kernels give)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import jaxport
from jaxport import dtypes
from jaxport.ops.aten.attention import aten__scaled_dot_product_flash_attention_for_cpu


class Attention(torch.nn.Module):
    def __init__(self, **options):
        super().__init__()
        self.options = options

    def forward(self, q, k, v, mask=None):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, **self.options)


def _qkv(heads_q=4, heads_kv=4, seq_q=5, seq_k=7, dim=8):
    g = torch.Generator().manual_seed(0)
    return (torch.randn(2, heads_q, seq_q, dim, generator=g), torch.randn(2, heads_kv, seq_k, dim, generator=g),
            torch.randn(2, heads_kv, seq_k, dim, generator=g))


DTYPES = {"float32": (torch.float32, 1e-5), "float16": (torch.float16, 2e-3), "bfloat16": (torch.bfloat16, 2e-2)}


CASES = {
    "plain": ({}, None),
    "causal": ({"is_causal": True}, None),
    "scale": ({"scale": 0.3}, None),
    "bool mask": ({}, "bool"),
    "float mask": ({}, "float"),
    "gqa": ({"enable_gqa": True}, None),
    "gqa causal mask": ({"enable_gqa": True, "is_causal": False}, "bool"),
}


@pytest.mark.usefixtures("x64_strict")  # half inputs must not meet float32 by implicit promotion
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("case", list(CASES))
def test_sdpa_matches_pytorch(case, dtype):
    torch_dtype, tol = DTYPES[dtype]
    options, mask_kind = CASES[case]
    q, k, v = _qkv(heads_kv=2 if options.get("enable_gqa") else 4, seq_k=5 if options.get("is_causal") else 7)
    args = [t.to(torch_dtype) for t in (q, k, v)]
    if mask_kind == "bool":
        mask = torch.rand(2, 1, q.shape[2], k.shape[2], generator=torch.Generator().manual_seed(1)) > 0.3
        mask[..., 0] = True  # no fully masked rows
        args.append(mask)
    elif mask_kind == "float":
        args.append(torch.randn(1, 4, q.shape[2], k.shape[2]).to(torch_dtype))
    module = Attention(**options).eval()
    model = jaxport.from_torch(module, tuple(args))
    assert "aten.scaled_dot_product_attention.default" in model.program.ops()
    actual = model(*args)
    assert actual.dtype == dtypes.numpy_dtype(torch_dtype)
    np.testing.assert_allclose(np.asarray(actual, np.float32), module(*args).float().numpy(), rtol=tol, atol=tol)


@pytest.mark.parametrize("case", ["plain", "causal", "bool mask", "gqa"])
def test_sdpa_values_narrower_than_queries(case):
    """Multi-head latent attention (DeepSeek-V2, MiniCPM3) attends with 96-wide queries and keys
    over 64-wide values."""
    options, mask_kind = CASES[case]
    g = torch.Generator().manual_seed(3)
    heads_kv = 2 if options.get("enable_gqa") else 4
    args = [torch.randn(2, 4, 5, 12, generator=g), torch.randn(2, heads_kv, 5, 12, generator=g),
            torch.randn(2, heads_kv, 5, 8, generator=g)]
    if mask_kind == "bool":
        mask = torch.rand(2, 1, 5, 5, generator=g) > 0.3
        mask[..., 0] = True
        args.append(mask)
    module = Attention(**options).eval()
    actual = jaxport.from_torch(module, tuple(args))(*args)
    np.testing.assert_allclose(np.asarray(actual), module(*args).numpy(), rtol=1e-5, atol=1e-5)


# --- fully masked rows ------------------------------------------------------------------
#
# What torch 2.13 CPU returns (default, math and flash kernels agree) for a query row
# that may attend to no key:
#   boolean mask all False (alone or with is_causal)  -> zeros
#   additive mask of -inf on the whole row             -> zeros
#   additive mask of finfo.min on the whole row        -> an ordinary softmax of finite
#       scores: uniform (the mean of V) in float32/bfloat16, where finfo.min absorbs the
#       scores; in float16 (-65504, added in float32) the unmasked attention.



def _allowed(batch, seq_q, seq_k):
    """A boolean mask (batch, 1, q, k) with fully masked rows of every kind."""
    allowed = torch.rand(batch, 1, seq_q, seq_k, generator=torch.Generator().manual_seed(1)) > 0.4
    allowed[..., 0] = True
    allowed[0, :, 2] = False  # one row masked
    allowed[1, :, 0] = False  # the first row masked
    allowed[1, :, 3] = False
    allowed[1, :, 3, -2:] = True  # only keys in the future: dead under is_causal alone
    allowed[2] = False  # a whole batch entry masked (a padding-only sequence, as in BERT)
    return allowed


def _mask(allowed, kind, dtype):
    if kind == "bool":
        return allowed
    mask_dtype = torch.float32 if kind == "finfo.min float32" else dtype
    fill = float("-inf") if kind == "-inf" else torch.finfo(mask_dtype).min
    bias = 0.5 * torch.randn(allowed.shape, generator=torch.Generator().manual_seed(2))
    return torch.where(allowed, bias, torch.tensor(fill)).to(mask_dtype)


#: "finfo.min float32": a float32 mask with half inputs, which PyTorch adds in float32 (it must
#: not become -inf in float16).
MASK_KINDS = [(dtype, kind) for dtype in DTYPES for kind in ("bool", "-inf", "finfo.min", "finfo.min float32")
              if not (dtype == "float32" and kind == "finfo.min float32")]


@pytest.mark.parametrize("gqa", [False, True], ids=["mha", "gqa"])
@pytest.mark.parametrize("is_causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize(("dtype", "kind"), MASK_KINDS, ids=[f"{d}-{k}" for d, k in MASK_KINDS])
def test_sdpa_fully_masked_rows_match_pytorch(dtype, kind, is_causal, gqa):
    torch_dtype, tol = DTYPES[dtype]
    g = torch.Generator().manual_seed(0)
    heads_kv = 2 if gqa else 4
    q = torch.randn(3, 4, 5, 8, generator=g).to(torch_dtype)
    k, v = (torch.randn(3, heads_kv, 7, 8, generator=g).to(torch_dtype) for _ in range(2))
    mask = _mask(_allowed(3, 5, 7), kind, torch_dtype)
    module = Attention(is_causal=is_causal, enable_gqa=gqa).eval()
    expected = module(q, k, v, mask)
    model = jaxport.from_torch(module, (q, k, v, mask))
    assert "aten.scaled_dot_product_attention.default" in model.program.ops()
    actual = np.asarray(model(q, k, v, mask)).astype(np.float32)
    assert not np.isnan(actual).any()
    np.testing.assert_allclose(actual, expected.float().numpy(), rtol=tol, atol=tol)
    if kind in ("bool", "-inf"):
        assert not actual[2].any() and not actual[0, :, 2].any()  # dead rows are exact zeros


def test_sdpa_fully_masked_rows_explicit_paths():
    """Ranks other than 4 and dropout take the explicit softmax path: dead rows are zeros there too."""
    g = torch.Generator().manual_seed(0)
    q, k, v = torch.randn(3, 5, 8, generator=g), torch.randn(3, 7, 8, generator=g), torch.randn(3, 7, 8, generator=g)
    allowed = _allowed(3, 5, 7)[:, 0]
    for mask in (allowed, _mask(allowed, "-inf", torch.float32), _mask(allowed, "finfo.min", torch.float32)):
        module = Attention().eval()  # (PyTorch's math path refuses a mask with is_causal)
        model = jaxport.from_torch(module, (q, k, v, mask))
        actual = np.asarray(model(q, k, v, mask))
        np.testing.assert_allclose(actual, module(q, k, v, mask).numpy(), rtol=1e-5, atol=1e-5)
    # Dropout (training mode): the weights are random, but dead rows stay zeros, never NaN.
    q4, k4, v4 = q[:, None], k[:, None], v[:, None]
    mask = _mask(allowed[:, None], "-inf", torch.float32)
    model = jaxport.from_torch(Attention(dropout_p=0.5), (q4, k4, v4, mask))
    actual = np.asarray(model(q4, k4, v4, mask, rng=jax.random.key(0)))
    assert not np.isnan(actual).any()
    assert not actual[2].any() and not actual[0, :, 2].any()


@pytest.mark.parametrize("is_causal", [False, True], ids=["full", "causal"])
def test_flash_attention_for_cpu_fully_masked_rows(is_causal):
    """The CPU flash op gives zeros and logsumexp 0 for rows that are all -inf."""
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(3, 4, 5, 8, generator=g) for _ in range(3))
    allowed = _allowed(3, 5, 5)
    for kind in ("-inf", "finfo.min"):
        mask = _mask(allowed, kind, torch.float32)
        out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, is_causal=is_causal,
                                                                              attn_mask=mask)
        actual_out, actual_lse = aten__scaled_dot_product_flash_attention_for_cpu(
            *(jnp.asarray(t.numpy()) for t in (q, k, v)), is_causal=is_causal, attn_mask=jnp.asarray(mask.numpy()))
        np.testing.assert_allclose(np.asarray(actual_out), out.numpy(), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(np.asarray(actual_lse), lse.numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kind", ["bool", "-inf", "finfo.min"])
def test_sdpa_fully_masked_rows_gradients_match_pytorch(kind):
    """No NaN reaches the backward pass through a dead row; gradients are PyTorch's.

    Compared with the math kernel: for a finfo.min row the CPU flash kernel's backward
    recomputes the weights as exp(score - logsumexp), and logsumexp = finfo.min + log(k)
    rounds back to finfo.min, so it differentiates weights of 1 instead of 1/k.
    """
    g = torch.Generator().manual_seed(0)
    q = torch.randn(3, 4, 5, 8, generator=g, requires_grad=True)
    k, v = (torch.randn(3, 4, 7, 8, generator=g, requires_grad=True) for _ in range(2))
    mask = _mask(_allowed(3, 5, 7), kind, torch.float32)
    module = Attention().eval()
    with sdpa_kernel(SDPBackend.MATH):
        (module(q, k, v, mask) ** 2).sum().backward()
    model = jaxport.from_torch(module, (q.detach(), k.detach(), v.detach(), mask))
    grads = jax.grad(lambda *qkv: (model(*qkv, jnp.asarray(mask.numpy())) ** 2).sum(), argnums=(0, 1, 2))(
        *(jnp.asarray(t.detach().numpy()) for t in (q, k, v)))
    for actual, tensor in zip(grads, (q, k, v)):
        np.testing.assert_allclose(np.asarray(actual), tensor.grad.numpy(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("row", ["one row", "single token"])
def test_bert_with_fully_masked_attention_row(row):
    """Hugging Face BERT passes a boolean mask: a sequence that is all padding attends to nothing."""
    from tests.support.zoo import MODELS

    module, args, kwargs = MODELS["bert"]()
    if row == "one row":
        kwargs["attention_mask"][1] = 0
    else:
        kwargs = {"input_ids": kwargs["input_ids"][:1, :1], "attention_mask": torch.zeros(1, 1, dtype=torch.long)}
    model = jaxport.from_torch(module, args, kwargs)
    with torch.no_grad():
        expected = module(*args, **kwargs).last_hidden_state.numpy()
    actual = np.asarray(model(*args, **kwargs)["last_hidden_state"])
    err = float(np.max(np.abs(actual - expected)))
    assert err <= 1e-4, f"max abs error {err:.2e}"
