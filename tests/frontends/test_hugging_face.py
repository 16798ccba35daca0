"""transformers' export context: the grouped-query attention switch is the context's own."""

from __future__ import annotations

import os
import threading

import pytest
import torch

pytest.importorskip("transformers")
from transformers.integrations import sdpa_attention  # noqa: E402

from jaxport.frontends.hugging_face import grouped_query_attention  # noqa: E402


def _asks(mask):
    """transformers' question: pass grouped-query heads to SDPA unrepeated?"""
    key = value = torch.zeros(1, 2, 3, 8)
    return sdpa_attention.use_gqa_in_sdpa(mask, key, value)


def test_grouped_query_attention_is_switched_for_the_context_only():
    original = sdpa_attention.use_gqa_in_sdpa
    mask = torch.ones(1, 1, 3, 3, dtype=torch.bool)
    environment = dict(os.environ)
    assert not _asks(mask)  # transformers repeats heads under a mask, for PyTorch's fused kernels
    seen_elsewhere = []
    with grouped_query_attention():
        assert _asks(mask)
        with grouped_query_attention():  # nested (a cached step converted inside another export)
            assert _asks(mask)
        assert _asks(mask) and sdpa_attention.use_gqa_in_sdpa is not original
        other = threading.Thread(target=lambda: seen_elsewhere.append(_asks(mask)))
        other.start()
        other.join()
        assert dict(os.environ) == environment
    assert seen_elsewhere == [False]  # another thread keeps transformers' own answer
    assert sdpa_attention.use_gqa_in_sdpa is original  # put back when the last context closes
    assert not _asks(mask)
