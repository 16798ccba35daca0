"""jax.grad and jax.vmap through converted models agree with PyTorch."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

import jaxport
from tests.support.zoo import MODELS, SmallCNN


def _main(out):
    return out["logits"] if isinstance(out, dict) else out


@pytest.mark.parametrize("name", ["gpt2", "cnn", "bert"])
def test_grad_matches_torch_autograd(name):
    module, args, kwargs = MODELS[name]()
    model = jaxport.from_torch(module, args, kwargs)

    trainable, buffers = model.split_params()

    def loss(trainable):
        out = model.apply({**trainable, **buffers}, *args, **kwargs)
        out = out["last_hidden_state"] if isinstance(out, dict) and "last_hidden_state" in out else _main(out)
        return jnp.mean(out**2)

    grads = jax.jit(jax.grad(loss))(trainable)

    module.zero_grad()
    out = module(*args, **kwargs)
    out = out.last_hidden_state if hasattr(out, "last_hidden_state") else _main(out)
    torch.mean(out**2).backward()
    checked = 0
    for pname, p in module.named_parameters():
        if p.grad is None:
            continue
        np.testing.assert_allclose(np.asarray(grads[pname]), p.grad.numpy(), rtol=1e-4, atol=1e-5,
                                   err_msg=pname)
        checked += 1
    assert checked == len([p for p in module.parameters() if p.requires_grad and p.grad is not None]) > 0


def test_vmap_over_a_batch_axis():
    torch.manual_seed(0)
    module, (x,), _ = MODELS["cnn"]()
    model = jaxport.from_torch(module, (x[:1],))  # exported for one image
    images = torch.randn(6, 1, 3, 32, 32)
    batched = jax.vmap(model.apply, in_axes=(None, 0))(model.params, jnp.asarray(images.numpy()))
    with torch.no_grad():
        expected = module(images.reshape(6, 3, 32, 32))
    np.testing.assert_allclose(np.asarray(batched).reshape(6, -1), expected.numpy(), rtol=1e-4, atol=1e-4)


def test_vmap_gpt2_over_sequences():
    module, (ids,), _ = MODELS["gpt2"]()
    model = jaxport.from_torch(module, (ids[:1],))
    stacked = ids.reshape(2, 1, -1)
    batched = jax.vmap(lambda i: model.apply(model.params, i)["logits"])(jnp.asarray(stacked.numpy()))
    with torch.no_grad():
        expected = module(ids).logits
    np.testing.assert_allclose(np.asarray(batched).reshape(expected.shape), expected.numpy(), rtol=1e-4, atol=1e-4)


def test_grad_wrt_input():
    torch.manual_seed(0)
    module = SmallCNN().eval()
    x = torch.randn(2, 3, 16, 16, requires_grad=True)
    model = jaxport.from_torch(module, (x.detach(),))
    g = jax.grad(lambda xx: jnp.sum(model.apply(model.params, xx) ** 2))(jnp.asarray(x.detach().numpy()))
    (module(x) ** 2).sum().backward()
    np.testing.assert_allclose(np.asarray(g), x.grad.numpy(), rtol=1e-4, atol=1e-5)
