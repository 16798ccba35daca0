"""scaled_dot_product_attention stays whole and matches PyTorch: masks, causal, scale, GQA."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import jaxport


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


CASES = {
    "plain": ({}, None),
    "causal": ({"is_causal": True}, None),
    "scale": ({"scale": 0.3}, None),
    "bool mask": ({}, "bool"),
    "float mask": ({}, "float"),
    "gqa": ({"enable_gqa": True}, None),
    "gqa causal mask": ({"enable_gqa": True, "is_causal": False}, "bool"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_sdpa_matches_pytorch(case):
    options, mask_kind = CASES[case]
    q, k, v = _qkv(heads_kv=2 if options.get("enable_gqa") else 4, seq_k=5 if options.get("is_causal") else 7)
    args = [q, k, v]
    if mask_kind == "bool":
        mask = torch.rand(2, 1, q.shape[2], k.shape[2], generator=torch.Generator().manual_seed(1)) > 0.3
        mask[..., 0] = True  # no fully masked rows
        args.append(mask)
    elif mask_kind == "float":
        args.append(torch.randn(1, 4, q.shape[2], k.shape[2]))
    module = Attention(**options)
    model = jaxport.from_torch(module, tuple(args))
    assert "aten.scaled_dot_product_attention.default" in model.program.ops()
    np.testing.assert_allclose(np.asarray(model(*args)), module(*args).numpy(), rtol=1e-5, atol=1e-5)
