"""Judging low-precision generation against PyTorch: where greedy tokens part, was it a tie?"""

from __future__ import annotations

import math

import numpy as np


def ulp(value: float, mantissa_bits: int) -> float:
    """The spacing of floats with `mantissa_bits` explicit mantissa bits at `value` (bfloat16: 7)."""
    if value == 0 or not math.isfinite(value):
        return 0.0
    return 2.0 ** (math.floor(math.log2(abs(value))) - mantissa_bits)


def first_difference_is_a_tie(model, mask, got: np.ndarray, want: np.ndarray, *, prompt: int,
                              dtype) -> tuple[bool, str]:
    """Where `got` first differs from PyTorch's greedy `want` (both `[B, prompt + n]`, same
    left-padded prompts), whether PyTorch's logits for the two tokens at that step, under
    `torch.autocast` at `dtype`, lie within one ulp of each other; and a line saying so."""
    import torch

    width = min(got.shape[1], want.shape[1])
    wrong = np.argwhere(got[:, :width] != want[:, :width])
    if not len(wrong):
        return got.shape == want.shape, f"shapes {got.shape} and {want.shape}"
    row, col = (int(i) for i in wrong[0])
    prefix = torch.from_numpy(want[row:row + 1, :col].astype(np.int64))
    prefix_mask = torch.cat([mask[row:row + 1], torch.ones(1, col - prompt, dtype=mask.dtype)], dim=1)
    with torch.no_grad(), torch.autocast("cpu", dtype=dtype):
        logits = model(input_ids=prefix, attention_mask=prefix_mask).logits[0, -1].float().numpy()
    ours, theirs = logits[got[row, col]], logits[want[row, col]]
    bits = {torch.bfloat16: 7, torch.float16: 10}[dtype]
    spacing = ulp(max(abs(ours), abs(theirs)), bits)
    tie = abs(float(ours) - float(theirs)) <= spacing
    return tie, (f"row {row}, new token {col - prompt}: jaxport {got[row, col]} (PyTorch's logit {ours:.6g}), "
                 f"PyTorch {want[row, col]} ({theirs:.6g}); one ulp is {spacing:.3g}")
