"""`torch.compile(opt.step, backend="jaxport")`, PyTorch's recipe for a compiled optimizer, for
every `torch.optim` optimizer: the weights after 10 steps against eager PyTorch's; and a whole
loop compiled (the model's forward and backward, then the compiled step)."""

from __future__ import annotations

import pytest
import torch

from tests.support.optimizers import FOREACH, OPTIMIZERS

STEPS = 10


def _mlp(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(6, 12), torch.nn.Tanh(), torch.nn.Linear(12, 3))


def _train(optimizer: str, seed: int, compile_step: bool, compile_model: bool = False,
           **options) -> list[torch.Tensor]:
    torch._dynamo.reset()
    model = _mlp(seed)
    generator = torch.Generator().manual_seed(seed + 1)
    x, y = torch.randn(16, 6, generator=generator), torch.randn(16, 3, generator=generator)
    opt = getattr(torch.optim, optimizer)(model.parameters(), **OPTIMIZERS[optimizer], **options)
    forward = torch.compile(model, backend="jaxport") if compile_model else model
    step = torch.compile(opt.step, backend="jaxport") if compile_step else opt.step

    def closure():
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(forward(x), y)
        loss.backward()
        return loss

    for _ in range(STEPS):
        if optimizer == "LBFGS":
            step(closure)
        else:
            closure()
            step()
    return [p.detach().clone() for p in model.parameters()]


@pytest.mark.parametrize("optimizer,foreach", [(name, False) for name in OPTIMIZERS]
                         + [(name, True) for name in FOREACH])
def test_a_compiled_optimizer_step_gives_eager_pytorchs_weights(optimizer, foreach):
    options = dict(foreach=True) if foreach else {}  # LBFGS takes no foreach
    expected = _train(optimizer, seed=7, compile_step=False, **options)
    got = _train(optimizer, seed=7, compile_step=True, **options)
    # LBFGS amplifies a last-ulp difference (see test_recompiles); RAdam's rectified step divides
    # by a square root of a ratio near 1 in its early steps
    tolerance = dict(rtol=2e-3, atol=2e-5) if optimizer in ("LBFGS", "RAdam") else dict(rtol=1e-5, atol=2e-6)
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e, **tolerance)


def test_a_whole_compiled_loop_trains_as_eager_pytorch():
    expected = _train("AdamW", seed=8, compile_step=False)
    got = _train("AdamW", seed=8, compile_step=True, compile_model=True)
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e, rtol=1e-5, atol=2e-6)
