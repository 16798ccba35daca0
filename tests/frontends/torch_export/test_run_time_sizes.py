"""Sizes computed from run-time values (unbacked SymInts, `x.item()`) that JAX must know when it
traces: a value whose range is one point becomes that constant, and an `arange` between run-time
bounds whose length is a size of an input becomes `start + arange(size)`."""

from __future__ import annotations

import jax
import numpy as np
import torch

import jaxport


class Positions(torch.nn.Module):
    """Position ids counting on from the tokens a cache holds, as TrOCR and RoFormer make them."""

    def forward(self, ids, seen):
        start = seen.item()
        torch._check(start >= 0)
        torch._check(start <= 64)
        return torch.arange(start, start + ids.shape[1]) * 2 + ids


class Clamped(torch.nn.Module):
    """`max(0, 1 - (T + seen))`, always 0 for T >= 1: a slice of that many columns."""

    def forward(self, x, seen):
        start = seen.item()
        torch._check(start >= 0)
        return x[:, : max(0, 1 - (x.shape[1] + start))].sum() + x.sum()


def test_arange_between_run_time_bounds_has_its_input_size():
    ids, seen = torch.tensor([[1, 2, 3]]), torch.tensor(5)
    dims = ({1: torch.export.Dim("tokens", min=1, max=32)}, None)
    model = jaxport.from_torch(Positions(), (ids, seen), dynamic_shapes=dims)
    assert not any(node.op.startswith("aten.arange.start") for node in model.program.nodes)
    run = jax.jit(model.apply)
    for count, start in ((3, 5), (7, 0), (1, 64)):
        ids = torch.arange(count)[None] + 10
        want = Positions()(ids, torch.tensor(start)).numpy()
        np.testing.assert_array_equal(np.asarray(run(model.params, ids.numpy(), np.int64(start))), want)


def test_a_run_time_size_with_one_possible_value_is_a_constant():
    x, seen = torch.ones(2, 3), torch.tensor(4)
    model = jaxport.from_torch(Clamped(), (x, seen), dynamic_shapes=({1: torch.export.Dim("n", min=1, max=9)}, None))
    got = jax.jit(model.apply)(model.params, np.ones((2, 5), np.float32), np.int64(2))
    np.testing.assert_allclose(np.asarray(got), 10.0)
