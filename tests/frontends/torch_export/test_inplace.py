"""In-place writes through views (`t[:, :4] = s`, `t[0].add_(1)`): run as scatters where that is
exact, by PyTorch's functionalization where it is not, and right either way."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import jaxport
from jaxport.frontends import torch_export


class SinusoidalTable(torch.nn.Module):
    """Pegasus-X's position table: a zeros tensor written in two halves, under no_grad."""

    def forward(self, x):
        with torch.no_grad():
            table = torch.zeros(x.shape[0], 8)
            table[:, :4] = torch.sin(x)
            table[:, 4:] = torch.cos(x)
        return table * 2


class WritesThroughChains(torch.nn.Module):
    def forward(self, x, y):
        t = x * 2
        t[0, :, 1:3] = y  # slice of a select
        t[:, 1].add_(1.5)  # an in-place op other than copy_
        t[1].mul_(-1)
        t[2, 2].diagonal().fill_(0.25)
        t[2].permute(2, 0, 1)[1:3].transpose(0, 1).unsqueeze(0).sub_(2)  # views that rearrange
        t[1, 0].t().add_(y[0, 0])
        return t + 1


class ShiftRight(torch.nn.Module):
    """BART-family `shift_tokens_right`: writes through views of an in-place op's result (the
    clone that masked_fill_ wrote), then the clone and the result are read: both are one tensor."""

    def forward(self, ids):
        shifted = ids.clone()
        filled = shifted.masked_fill_(shifted == -100, 1)
        shifted[:, 1:] = shifted[:, :-1].clone()
        filled[:, 0] = 7
        return shifted * 10 + filled


class StaleAlias(torch.nn.Module):
    """`row` is taken before the write and read after it: only functionalization gets it right."""

    def forward(self, x):
        t = x * 2
        row = t[0]
        t[:, 1] = 5.0
        return row + 0, t


class WritesIntoInput(torch.nn.Module):
    """A write into an input must reach the caller: left to functionalization."""

    def forward(self, x):
        x[:, 0] = 0.0
        return x * 3


CASES = {
    "table": (SinusoidalTable(), lambda g: (torch.randn(5, 4, generator=g),), True),
    "chains": (WritesThroughChains(), lambda g: (torch.randn(3, 4, 5, 5, generator=g),
                                                 torch.randn(4, 2, 5, generator=g)), True),
    "shift_right": (ShiftRight(), lambda g: (torch.randint(-100, 50, (2, 6), generator=g),), True),
    "stale_alias": (StaleAlias(), lambda g: (torch.randn(3, 4, generator=g),), False),
    "input": (WritesIntoInput(), lambda g: (torch.randn(3, 4, generator=g),), False),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_writes_through_views_match_pytorch(case):
    module, make_inputs, as_scatters = CASES[case]
    inputs = make_inputs(torch.Generator().manual_seed(0))
    want = module(*[x.clone() for x in inputs])
    ep = torch_export.export(module, tuple(x.clone() for x in inputs), {})
    # Without functionalization when scatters are exact; with it (a new program) otherwise.
    assert (torch_export.lowerable(ep) is ep) == as_scatters
    got = jaxport.from_exported_program(ep)(*[x.numpy() for x in inputs])
    want = want if isinstance(want, tuple) else (want,)
    got = got if isinstance(got, tuple) else (got,)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g), w.numpy(), rtol=1e-6, atol=1e-6)
