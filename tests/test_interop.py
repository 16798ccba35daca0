"""jax_fn, torch_fn and callback: PyTorch and JAX calling each other, with gradients both ways."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

import jaxport


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def _torch_code(x, y):
    return torch.tanh(x @ y).sum(dim=-1) * 2 + x.mean()


@pytest.mark.compat
def test_jax_fn_under_jit_grad_vmap_jvp():
    x = np.random.default_rng(0).standard_normal((3, 4), dtype=np.float32)
    y = np.random.default_rng(1).standard_normal((4, 5), dtype=np.float32)
    fn = jaxport.interop.jax_fn(_torch_code)
    want = _torch_code(torch.from_numpy(x), torch.from_numpy(y)).numpy()
    np.testing.assert_allclose(fn(x, y), want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(jax.jit(fn)(x, y), want, rtol=1e-5, atol=1e-6)
    xt = torch.from_numpy(x).requires_grad_()
    _torch_code(xt, torch.from_numpy(y)).sum().backward()
    grad = jax.jit(jax.grad(lambda a: fn(a, y).sum()))(x)
    np.testing.assert_allclose(grad, xt.grad.numpy(), rtol=1e-4, atol=1e-5)
    batched = jax.vmap(fn, in_axes=(0, None))(np.stack([x, 2 * x]), y)
    np.testing.assert_allclose(batched[1], _torch_code(torch.from_numpy(2 * x), torch.from_numpy(y)).numpy(),
                               rtol=1e-5, atol=1e-6)
    _, tangent = jax.jvp(lambda a: fn(a, y), (x,), (np.ones_like(x),))
    np.testing.assert_allclose(tangent, jax.jvp(lambda a: fn(a, y), (x,), (np.ones_like(x),))[1])
    assert tangent.shape == (3,)


def test_jax_fn_module_gives_params_and_pure_apply():
    module = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.GELU(), torch.nn.LayerNorm(8))
    x = np.random.default_rng(0).standard_normal((2, 4), dtype=np.float32)
    params, apply = jaxport.interop.jax_fn(module)
    assert set(params) == set(module.state_dict())  # no buffers or tied weights here
    np.testing.assert_allclose(jax.jit(apply)(params, x), module(torch.from_numpy(x)).detach().numpy(),
                               rtol=1e-5, atol=1e-5)
    grads = jax.grad(lambda p: apply(p, x).sum())(params)
    module(torch.from_numpy(x)).sum().backward()
    for name, p in module.named_parameters():
        np.testing.assert_allclose(grads[name], p.grad.numpy(), rtol=1e-4, atol=1e-5)


def test_value_dependent_python_branch_under_jit_explains_itself():
    def branchy(x):
        return x * 2 if x.sum() > 0 else x - 1

    fn = jaxport.interop.jax_fn(branchy)
    np.testing.assert_allclose(fn(np.ones(3, np.float32)), 2 * np.ones(3))  # eager: fine
    with pytest.raises(jaxport.LoweringError, match="torch.where"):
        jax.jit(fn)(np.ones(3, np.float32))


def test_torch_fn_gradients_match_jax_grad():
    def jax_code(x, w):
        return jnp.tanh(x @ w).sum(axis=1)

    fn = jaxport.interop.torch_fn(jax_code)
    x, w = torch.randn(3, 4, requires_grad=True), torch.randn(4, 2, requires_grad=True)
    fn(x, w).sum().backward()
    gx, gw = jax.grad(lambda a, b: jax_code(a, b).sum(), argnums=(0, 1))(x.detach().numpy(), w.detach().numpy())
    np.testing.assert_allclose(x.grad.numpy(), gx, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(w.grad.numpy(), gw, rtol=1e-5, atol=1e-6)


def test_torch_fn_inside_a_module_trained_by_torch():
    class Scaled(torch.nn.Module):
        def __init__(self, sin_times):
            super().__init__()
            self.w = torch.nn.Parameter(torch.ones(3))
            self.sin_times = sin_times

        def forward(self, x):
            return self.sin_times(x, self.w)

    x, target = torch.randn(8, 3), torch.zeros(8, 3)
    curves = []
    for sin_times in (jaxport.interop.torch_fn(lambda x, w: jnp.sin(x) * w), lambda x, w: torch.sin(x) * w):
        model = Scaled(sin_times)
        opt = torch.optim.SGD(model.parameters(), lr=0.5)
        losses = []
        for _ in range(20):
            loss = torch.nn.functional.mse_loss(model(x), target)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        curves.append(losses)
    np.testing.assert_allclose(curves[0], curves[1], rtol=1e-5, atol=1e-7)
    assert curves[0][-1] < curves[0][0]


def test_callback_under_jit_and_grad():
    fn = jaxport.interop.callback(lambda a: torch.sin(a) * a, jax.ShapeDtypeStruct((3,), jnp.float32))
    a = jnp.arange(3.0)
    np.testing.assert_allclose(jax.jit(fn)(a), jnp.sin(a) * a, rtol=1e-6)
    grad = jax.jit(jax.grad(lambda v: fn(v).sum()))(a)
    np.testing.assert_allclose(grad, jnp.cos(a) * a + jnp.sin(a), rtol=1e-6)
