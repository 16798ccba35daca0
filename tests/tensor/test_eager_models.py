"""Whole Hugging Face models written in PyTorch, run on JAX without torch.export.

The real MiniLM and a random GPT-2 run eagerly on `device="jax"` and, through
`jaxport.interop.jax_fn`, under `jax.jit`; both match PyTorch to 1e-4 in float32.
"""

from __future__ import annotations

import copy

import jax
import numpy as np
import pytest
import torch

import jaxport
from tests.support.zoo import MODELS

MAIN_OUTPUT = {"gpt2": "logits", "minilm": "last_hidden_state"}


@pytest.fixture(scope="module", params=sorted(MAIN_OUTPUT))
def model(request):
    name = request.param
    module, args, kwargs = MODELS[name]()
    with torch.no_grad():
        expected = module(*args, **kwargs)[MAIN_OUTPUT[name]]
    return name, module, args, kwargs, expected


def test_eager_on_jax_device(model):
    name, module, args, kwargs, expected = model
    with jaxport.eager(), torch.no_grad():
        on_jax = copy.deepcopy(module).to("jax")
        out = on_jax(*[a.to("jax") for a in args], **{k: v.to("jax") for k, v in kwargs.items()})
    got = out[MAIN_OUTPUT[name]]
    assert isinstance(got, jaxport.JaxTensor) and got.dtype == expected.dtype
    torch.testing.assert_close(got.cpu(), expected, rtol=0, atol=1e-4)


def test_jax_fn_under_jit(model):
    name, module, args, kwargs, expected = model
    params, apply = jaxport.interop.jax_fn(module)
    jax_args = [jaxport.interop.to_jax(a) for a in args]
    jax_kwargs = {k: jaxport.interop.to_jax(v) for k, v in kwargs.items()}
    out = jax.jit(lambda p, a, kw: apply(p, *a, **kw)[MAIN_OUTPUT[name]])(params, jax_args, jax_kwargs)
    assert out.shape == tuple(expected.shape)
    np.testing.assert_allclose(np.asarray(out), expected.numpy(), rtol=0, atol=1e-4)
