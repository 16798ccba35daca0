"""The tiny GPT-2, its batches and its loss, shared by the sharded and multi-process scripts."""

from __future__ import annotations

import numpy as np
import optax

VOCAB = 128
BATCH, LENGTH = 8, 16


def tiny_gpt2():
    """A 2-layer GPT-2 (n_embd 32, 4 heads, vocab 128) without dropout, seeded: every process
    that calls this builds the same weights."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel
    from transformers.utils import logging

    logging.set_verbosity_error()  # the tiny vocabulary does not hold GPT-2's bos/eos ids
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=VOCAB, n_positions=32, n_embd=32, n_layer=2, n_head=4, use_cache=False,
                        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    return GPT2LMHeadModel(config)


def batches(steps: int, batch: int = BATCH) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    return [rng.integers(0, VOCAB, (batch, LENGTH)).astype(np.int32) for _ in range(steps)]


def lm_loss(outputs, batch):
    tokens = batch[0]
    return optax.softmax_cross_entropy_with_integer_labels(outputs["logits"][:, :-1], tokens[:, 1:]).mean()


def convert(module):
    import torch

    import jaxport

    return jaxport.from_torch(module, (torch.from_numpy(batches(1)[0]).long(),), train=True)
