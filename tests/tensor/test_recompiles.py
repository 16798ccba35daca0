"""Training loops on the jax device compile nothing once warm: `torch.optim`'s optimizers under
its learning-rate schedulers, whose Python floats (bias corrections, rates, decays) change every
step, reach the compiled eager calls as traced arguments, not as parts of their keys
(`tensor/compiled.py`)."""

from __future__ import annotations

import jax
import pytest
import torch

import jaxport
from jaxport.tensor import compiled
from tests.support.optimizers import FOREACH, OPTIMIZERS, SCHEDULERS

_COMPILES = [0]


def _count(event: str, *args, **kwargs) -> None:
    if event == "/jax/core/compile/backend_compile_duration":
        _COMPILES[0] += 1


jax.monitoring.register_event_duration_secs_listener(_count)

WARM_UP, MEASURED = 12, 8


def _steady_compiles(optimizer: str, scheduler: str | None, seed: int, **options) -> tuple[int, int, int]:
    """(Compiles, new compiled-call entries, calls run op by op) over `MEASURED` steps after
    `WARM_UP` of training a small MLP on the jax device."""
    torch.manual_seed(seed)
    with jaxport.eager():
        model = torch.nn.Sequential(torch.nn.Linear(6, 12), torch.nn.Tanh(), torch.nn.Linear(12, 3)).to("jax")
        x, y = torch.randn(16, 6).to("jax"), torch.randn(16, 3).to("jax")
        opt = getattr(torch.optim, optimizer)(model.parameters(), **OPTIMIZERS[optimizer], **options)
        schedule = SCHEDULERS[scheduler](opt) if scheduler else None

        def closure():
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            return loss

        before = (0, 0, 0)
        for step in range(WARM_UP + MEASURED):
            if step == WARM_UP:
                before = (_COMPILES[0], len(compiled._CALLS), compiled.counts["op by op"])
            opt.step(closure)
            if schedule is not None:
                schedule.step()
        losses = float(closure().detach())
    assert losses == losses  # the loop trained (a NaN would say otherwise)
    return _COMPILES[0] - before[0], len(compiled._CALLS) - before[1], compiled.counts["op by op"] - before[2]


@pytest.mark.parametrize("optimizer", list(OPTIMIZERS))
def test_every_optimizer_under_a_changing_rate_compiles_nothing_once_warm(optimizer):
    compiles, entries, op_by_op = _steady_compiles(optimizer, "CosineAnnealingLR", seed=1)
    assert (compiles, entries, op_by_op) == (0, 0, 0)


@pytest.mark.parametrize("scheduler", list(SCHEDULERS))
def test_adamw_under_every_scheduler_compiles_nothing_once_warm(scheduler):
    compiles, entries, op_by_op = _steady_compiles("AdamW", scheduler, seed=2)
    assert (compiles, entries, op_by_op) == (0, 0, 0)


@pytest.mark.parametrize("optimizer", FOREACH)
def test_the_foreach_forms_compile_nothing_once_warm(optimizer):
    compiles, entries, op_by_op = _steady_compiles(optimizer, "CosineAnnealingLR", seed=3, foreach=True)
    assert (compiles, entries, op_by_op) == (0, 0, 0)


def test_a_float_that_decides_a_shape_stays_in_the_key():
    with jaxport.eager():
        x = torch.arange(6.0).to("jax")
        for scale in (1.0, 1.0, 2.0, 2.0, 3.0, 3.0):
            out = torch.nn.functional.interpolate(x.view(1, 1, 6), scale_factor=scale, mode="nearest")
            expected = torch.nn.functional.interpolate(torch.arange(6.0).view(1, 1, 6), scale_factor=scale,
                                                       mode="nearest")
            torch.testing.assert_close(out.cpu(), expected)


def test_traced_floats_give_the_values_pytorch_gives():
    with jaxport.eager():
        x = torch.linspace(-3, 3, 7).to("jax")
        for value in (0.5, 0.25, -0.0, float("inf"), float("nan"), 1e-30):
            got = torch.add(x, x, alpha=value).cpu()
            want = torch.add(x.cpu(), x.cpu(), alpha=value)
            torch.testing.assert_close(got, want, equal_nan=True)
            assert got.dtype == want.dtype


def test_a_full_cache_drops_its_least_recently_used_call_not_the_hot_ones(monkeypatch):
    monkeypatch.setattr(compiled, "_MAX_CALLS", 16)
    with jaxport.eager():
        x = torch.randn(5, generator=torch.Generator().manual_seed(4)).to("jax")
        for _ in range(3):  # seen twice: made a jitted call, compiled when it first runs
            torch.mul(x, 3)
        torch.add(x, -1), torch.add(x, -2)  # one-offs run uncompiled: JAX's own op-by-op programs made once
        before = _COMPILES[0]
        for i in range(64):  # one-off calls, each a new signature
            torch.add(x, i)
            torch.mul(x, 3)
        assert _COMPILES[0] == before, "the hot call was evicted and compiled again"
        assert len(compiled._CALLS) <= 16


def _trained(optimizer: str, device: str, seed: int, **options) -> list[torch.Tensor]:
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(6, 12), torch.nn.Tanh(), torch.nn.Linear(12, 3)).to(device)
    x, y = torch.randn(16, 6).to(device), torch.randn(16, 3).to(device)
    opt = getattr(torch.optim, optimizer)(model.parameters(), **OPTIMIZERS[optimizer], **options)
    schedule = SCHEDULERS["CosineAnnealingLR"](opt)

    def closure():
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        return loss

    for _ in range(10):
        opt.step(closure)
        schedule.step()
    return [p.detach().cpu() for p in model.parameters()]


@pytest.mark.parametrize("optimizer", list(OPTIMIZERS))
def test_every_optimizer_trains_on_the_jax_device_as_on_the_cpu(optimizer):
    expected = _trained(optimizer, "cpu", seed=5)
    with jaxport.eager():
        got = _trained(optimizer, "jax", seed=5)
    # LBFGS divides by dot products of its curvature pairs, which turns a reduction's last-ulp
    # difference (XLA's summation order against PyTorch's) into about 1e-3 of a weight's change
    tolerance = dict(rtol=2e-3, atol=2e-5) if optimizer == "LBFGS" else dict(rtol=2e-5, atol=2e-6)
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e, **tolerance)


@pytest.mark.parametrize("optimizer", FOREACH)
def test_every_foreach_form_trains_on_the_jax_device_as_on_the_cpu(optimizer):
    expected = _trained(optimizer, "cpu", seed=6, foreach=True)
    with jaxport.eager():
        got = _trained(optimizer, "jax", seed=6, foreach=True)
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e, rtol=2e-5, atol=2e-6)
