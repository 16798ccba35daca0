"""Mixed-precision training (issue 31): float32 master weights and dynamic loss scaling, against
PyTorch's AMP (`torch.autocast` at float16 with `torch.amp.GradScaler`) step for step."""

from __future__ import annotations

import jax
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
    """(losses, scales, finite flags) of SGD steps under `policy` on a float16 jaxport MLP."""
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
    return losses, scales, finite


def test_float16_training_follows_pytorch_amp():
    """14 SGD steps at float16 from an initial scale of 2**30: the first 12 overflow and are
    skipped while the scale backs off, as GradScaler's, then the losses follow PyTorch's. (Longer
    runs reach steps whose largest gradient sits at float16's overflow edge at that scale, where
    rounding decides; `test_loss_scale_follows_gradscalers_rule` covers those.)"""
    data = batches(1, 14)
    reference = mlp(0)
    optimizer = torch.optim.SGD(reference.parameters(), lr=0.05)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**30, growth_interval=1000)
    want_losses, want_scales = [], []
    for x, y in data:
        optimizer.zero_grad()
        with torch.autocast("cpu", dtype=torch.float16):
            out = reference(x)
        loss = torch.nn.functional.mse_loss(out.float(), y)
        want_scales.append(scaler.get_scale())
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        want_losses.append(loss.item())

    losses, scales, finite = run_amp(MixedPrecision(loss_scale="dynamic", initial_scale=2.0**30), data, 0)
    assert scales == want_scales
    assert not any(finite[:3]) and all(finite[-2:])
    np.testing.assert_allclose(losses, want_losses, rtol=2e-3)


def test_loss_scale_follows_gradscalers_rule():
    """With growth every 3 finite steps the scale climbs back to where float16 gradients overflow;
    whether a step at that edge overflows depends on rounding, so the scales are checked against
    GradScaler's own update kernel fed jaxport's finite flags."""
    policy = MixedPrecision(loss_scale="dynamic", initial_scale=2.0**30, growth_interval=3)
    _, scales, finite = run_amp(policy, batches(1, 20), 0)
    scale, tracker = torch.tensor([2.0**30]), torch.tensor([0], dtype=torch.int32)
    for got, ok in zip(scales, finite):
        assert got == scale.item()
        torch._amp_update_scale_(scale, tracker, torch.tensor([0.0 if ok else 1.0]), 2.0, 0.5, 3)
    assert finite.count(True) >= 6 and sorted(set(scales))[-1] == 2.0**30


def test_master_weights_stay_float32_while_the_model_holds_bfloat16():
    """A model stored in bfloat16: the state trains float32 copies (updates too small for
    bfloat16 still accumulate), the forward gets them cast to bfloat16."""
    module, data = mlp(2), batches(3, 5)
    policy = jaxport.Precision(compute=jnp.bfloat16, params=jnp.bfloat16)
    model = jaxport.from_torch(module, (data[0][0],), train=True, dtype=policy)
    assert {model.params[k].dtype for k in model.parameter_names} == {jnp.dtype(jnp.bfloat16)}
    loss_fn = lambda out, batch: jnp.mean((out.astype(jnp.float32) - batch[1]) ** 2)  # noqa: E731
    step = train_step(model, loss_fn, optax.sgd(1e-4), precision=MixedPrecision())
    state = step.init(0)
    start = jax.tree.map(np.asarray, state.params)
    for x, y in data:
        state, metrics = step(state, (x.numpy(), y.numpy()))
    assert all(v.dtype == jnp.float32 for v in state.params.values())
    moved = [np.abs(np.asarray(state.params[k]) - start[k]).max() for k in start]
    assert max(moved) > 0
    # steps of 1e-4 * grad are below bfloat16's resolution of these weights: stored in
    # bfloat16 they would not move at all
    plain = train_step(model, loss_fn, optax.sgd(1e-4))
    low = plain.init(0)
    before = jax.tree.map(np.asarray, low.params)
    low, _ = plain(low, (data[0][0].numpy(), data[0][1].numpy()))
    unchanged = sum(np.array_equal(np.asarray(low.params[k], np.float32), before[k].astype(np.float32)) for k in before)
    assert unchanged >= 1


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
