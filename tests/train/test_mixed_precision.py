"""Mixed-precision training (issue 31): float32 master weights and dynamic loss scaling, against
PyTorch's AMP (`torch.autocast` at float16 with `torch.amp.GradScaler`) step for step."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import optax
import pytest
import torch

import jaxport
from jaxport.train import MixedPrecision, ScaledState, train_step


def mlp(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.GELU(), torch.nn.Linear(32, 4))


def batches(seed: int, count: int):
    generator = torch.Generator().manual_seed(seed)
    return [(torch.randn(16, 8, generator=generator), torch.randn(16, 4, generator=generator)) for _ in range(count)]


def run_amp(policy: MixedPrecision, data, seed: int):
    """(losses, scales, finite flags, final float32 weights) of SGD steps under `policy` on a
    float16 jaxport MLP."""
    model = jaxport.from_torch(mlp(seed), (data[0][0],), train=True, dtype=jnp.float16)
    step = train_step(model, lambda out, batch: jnp.mean((out.astype(jnp.float32) - batch[1]) ** 2),
                      optax.sgd(0.05), precision=policy)
    state = step.init(0)
    assert isinstance(state.opt_state, ScaledState)
    losses, scales, finite = [], [], []
    for x, y in data:
        state, metrics = step(state, (x.numpy(), y.numpy()))
        losses.append(float(metrics["loss"]))
        scales.append(float(metrics["loss_scale"]))
        finite.append(bool(metrics["grads_finite"]))
    assert all(v.dtype == jnp.float32 for v in state.params.values())
    return losses, scales, finite, {k: np.asarray(v) for k, v in state.params.items()}


def run_pytorch_amp(data, seed: int, init_scale: float):
    """(losses, scales, final weights) of the same steps in PyTorch: `torch.autocast` at float16,
    `torch.amp.GradScaler`."""
    reference = mlp(seed)
    optimizer = torch.optim.SGD(reference.parameters(), lr=0.05)
    scaler = torch.amp.GradScaler("cpu", init_scale=init_scale, growth_interval=1000)
    losses, scales = [], []
    for x, y in data:
        optimizer.zero_grad()
        with torch.autocast("cpu", dtype=torch.float16):
            out = reference(x)
        loss = torch.nn.functional.mse_loss(out.float(), y)
        scales.append(scaler.get_scale())
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        losses.append(loss.item())
    return losses, scales, {k: v.detach().numpy() for k, v in reference.state_dict().items()}


def test_float16_training_follows_pytorch_amp():
    """20 SGD steps at float16 from GradScaler's default scale (2**16): every step updates, and
    every loss and the float32 master weights at the end follow PyTorch's AMP."""
    data = batches(1, 20)
    want_losses, want_scales, want_weights = run_pytorch_amp(data, 0, 2.0**16)
    losses, scales, finite, weights = run_amp(MixedPrecision(loss_scale="dynamic"), data, 0)
    assert all(finite) and scales == want_scales
    np.testing.assert_allclose(losses, want_losses, rtol=2e-4)
    assert losses[-1] < 0.8 * losses[0]  # it learns: equal losses mean equal updates
    _assert_moved_alike(weights, want_weights, mlp(0))


def test_overflowing_steps_are_skipped_as_gradscaler_skips_them():
    """From a scale of 2**30 the first 12 steps overflow: each is skipped (the weights stay as
    they were) while the scale backs off as GradScaler's does, and the step after them updates as
    PyTorch's does. (The step after that, at 2**18, has gradients at float16's overflow edge, where
    rounding decides how the two sides' float16 products saturate: 0.0175 apart in a weight there;
    `test_loss_scale_follows_gradscalers_rule` covers such steps.)"""
    data = batches(1, 13)
    policy = MixedPrecision(loss_scale="dynamic", initial_scale=2.0**30)
    _, _, _, skipped = run_amp(policy, data[:12], 0)
    start = {k: v.detach().numpy() for k, v in mlp(0).state_dict().items()}
    for name, value in skipped.items():  # twelve skipped steps: not a weight moved
        np.testing.assert_array_equal(value, start[name], err_msg=name)
    want_losses, want_scales, want_weights = run_pytorch_amp(data, 0, 2.0**30)
    losses, scales, finite, weights = run_amp(policy, data, 0)
    assert scales == want_scales and finite == [False] * 12 + [True]
    np.testing.assert_allclose(losses, want_losses, rtol=2e-4)
    _assert_moved_alike(weights, want_weights, mlp(0))


def _assert_moved_alike(weights: dict, want: dict, start: torch.nn.Module, share: float = 0.01) -> None:
    """Every weight moved from `start` as PyTorch's did, within `share` of its largest move
    (float16 products round differently on the two sides)."""
    for name, initial in start.state_dict().items():
        moved, want_moved = weights[name] - initial.numpy(), want[name] - initial.numpy()
        assert np.abs(want_moved).max() > 0, name
        np.testing.assert_allclose(moved, want_moved, atol=share * np.abs(want_moved).max(), err_msg=name)


def test_loss_scale_follows_gradscalers_rule():
    """With growth every 3 finite steps the scale climbs back to where float16 gradients overflow;
    whether a step at that edge overflows depends on rounding, so the scales are checked against
    GradScaler's own update kernel fed jaxport's finite flags."""
    policy = MixedPrecision(loss_scale="dynamic", initial_scale=2.0**30, growth_interval=3)
    _, scales, finite, _ = run_amp(policy, batches(1, 20), 0)
    scale, tracker = torch.tensor([2.0**30]), torch.tensor([0], dtype=torch.int32)
    for got, ok in zip(scales, finite):
        assert got == scale.item()
        torch._amp_update_scale_(scale, tracker, torch.tensor([0.0 if ok else 1.0]), 2.0, 0.5, 3)
    assert finite.count(True) >= 6 and sorted(set(scales))[-1] == 2.0**30


def _bfloat16_loss(out, batch):
    return jnp.mean((out.astype(jnp.float32) - batch[1]) ** 2)


def test_master_weights_stay_float32_while_the_model_holds_bfloat16():
    """A model stored in bfloat16 trained with float32 master weights moves as PyTorch's float32
    model under `torch.autocast(bfloat16)` does (its products take the weights in bfloat16 too),
    from the same bfloat16-rounded start: updates of 1e-4 * grad, below bfloat16's resolution of
    these weights, accumulate."""
    module, data = mlp(2), batches(3, 5)
    policy = jaxport.Precision(compute=jnp.bfloat16, params=jnp.bfloat16)
    model = jaxport.from_torch(module, (data[0][0],), train=True, dtype=policy)
    assert {model.params[k].dtype for k in model.parameter_names} == {jnp.dtype(jnp.bfloat16)}
    step = train_step(model, _bfloat16_loss, optax.sgd(1e-4), precision=MixedPrecision())
    state = step.init(0)
    start = {k: np.asarray(v) for k, v in state.params.items()}
    losses = []
    for x, y in data:
        state, metrics = step(state, (x.numpy(), y.numpy()))
        losses.append(float(metrics["loss"]))
    assert all(v.dtype == jnp.float32 for v in state.params.values())

    reference = mlp(2)
    with torch.no_grad():
        for parameter in reference.parameters():
            parameter.copy_(parameter.to(torch.bfloat16).float())
    want_start = {k: v.clone().numpy() for k, v in reference.state_dict().items()}
    optimizer = torch.optim.SGD(reference.parameters(), lr=1e-4)
    want_losses = []
    for x, y in data:
        optimizer.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = reference(x)
        loss = torch.nn.functional.mse_loss(out.float(), y)
        loss.backward()
        optimizer.step()
        want_losses.append(loss.item())
    np.testing.assert_allclose(losses, want_losses, rtol=1e-3)
    for name, want in reference.state_dict().items():
        np.testing.assert_array_equal(start[name], want_start[name])
        moved, want_moved = state.params[name] - start[name], want.numpy() - want_start[name]
        np.testing.assert_allclose(moved, want_moved, atol=0.02 * np.abs(want_moved).max(), err_msg=name)


def test_bfloat16_weights_without_master_copies_step_as_pytorchs_do():
    """Without master weights the same SGD step is rounded to bfloat16, exactly as PyTorch's SGD
    on a bfloat16 model rounds it: the weights whose updates fall below bfloat16's resolution stay
    where they were on both sides."""
    module, data = mlp(2), batches(3, 1)
    model = jaxport.from_torch(module, (data[0][0],), train=True,
                               dtype=jaxport.Precision(compute=jnp.bfloat16, params=jnp.bfloat16))
    plain = train_step(model, _bfloat16_loss, optax.sgd(1e-4))
    state = plain.init(0)
    before = {k: np.asarray(v, np.float32) for k, v in state.params.items()}
    state, _ = plain(state, (data[0][0].numpy(), data[0][1].numpy()))

    reference = mlp(2).to(torch.bfloat16)
    optimizer = torch.optim.SGD(reference.parameters(), lr=1e-4)
    torch.nn.functional.mse_loss(reference(data[0][0].to(torch.bfloat16)).float(), data[0][1]).backward()
    optimizer.step()
    unchanged = 0
    for name, want in reference.state_dict().items():
        got = np.asarray(state.params[name], np.float32)
        np.testing.assert_array_equal(got, want.float().numpy(), err_msg=name)
        unchanged += np.array_equal(got, before[name])
    assert 0 < unchanged < len(before)  # some rounded away, some not: the comparison shows both


def test_mixed_precision_refuses_an_unknown_loss_scale():
    with pytest.raises(jaxport.InputError, match="'dynamic', a number or None"):
        MixedPrecision(loss_scale="auto")


def test_loss_scale_survives_a_checkpoint(tmp_path):
    from jaxport.train import load_checkpoint, save_checkpoint

    data = batches(4, 3)
    model = jaxport.from_torch(mlp(5), (data[0][0],), train=True, dtype=jnp.float16)
    step = train_step(model, lambda out, batch: jnp.mean((out.astype(jnp.float32) - batch[1]) ** 2),
                      optax.adam(1e-3), precision=MixedPrecision(loss_scale="dynamic", initial_scale=2.0**30))
    state = step.init(0)
    for x, y in data:
        state, _ = step(state, (x.numpy(), y.numpy()))
    save_checkpoint(tmp_path, state)
    restored = load_checkpoint(tmp_path, step.init(1))
    assert float(restored.opt_state.scale) == float(state.opt_state.scale) == 2.0**27
    assert int(restored.opt_state.good_steps) == int(state.opt_state.good_steps)
