"""Bad input gets a clear error: missing ops listed at once, exporter reasons, wrong inputs named."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
import torch

import jaxport


@torch.library.custom_op("jaxport_test::mystery", mutates_args=())
def mystery(x: torch.Tensor) -> torch.Tensor:
    return x.clone() * 3


@mystery.register_fake
def _(x):
    return torch.empty_like(x)


@torch.library.custom_op("jaxport_test::enigma", mutates_args=())
def enigma(x: torch.Tensor) -> torch.Tensor:
    return x.clone() - 1


@enigma.register_fake
def _(x):
    return torch.empty_like(x)


class Inner(torch.nn.Module):
    def forward(self, x):
        return enigma(x)


class UsesUnknownOps(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = Inner()

    def forward(self, x):
        y = mystery(x)  # the line the error should point at
        return self.inner(y) + mystery(y)


def test_every_missing_op_is_listed_with_module_and_line():
    with pytest.raises(jaxport.UnsupportedOpsError) as info:
        jaxport.from_torch(UsesUnknownOps(), (torch.randn(3),))
    err = info.value
    assert err.ops == ["jaxport_test.enigma.default", "jaxport_test.mystery.default"]
    message = str(err)
    assert "2 uses" in message  # mystery is used twice
    assert "module 'inner'" in message
    assert "test_errors.py" in message and "y = mystery(x)  # the line the error should point at" in message


class DataDependent(torch.nn.Module):
    def forward(self, x):
        if x.sum() > 0:
            return x * 2
        return x - 1


def test_export_failure_gives_the_exporters_reason():
    with pytest.raises(jaxport.ExportError) as info:
        jaxport.from_torch(DataDependent(), (torch.randn(3),))
    message = str(info.value)
    assert message.startswith("torch.export could not capture DataDependent")
    assert "data-dependent" in message.lower() or "guard" in message.lower()
    assert info.value.__cause__ is None  # no traceback through jaxport internals


def test_not_a_module():
    with pytest.raises(TypeError, match="expects a torch.nn.Module"):
        jaxport.from_torch(lambda x: x, (torch.randn(2),))


class Two(torch.nn.Module):
    def forward(self, tokens, scale):
        return tokens.float() * scale


@pytest.fixture(scope="module")
def two():
    return jaxport.from_torch(Two(), (torch.arange(6).reshape(2, 3), torch.randn(2, 3)))


def test_wrong_shape_names_the_input(two):
    with pytest.raises(jaxport.InputError, match=r"input 'scale' has shape \(2, 4\).*float32\[2, 3\]"):
        two(jnp.zeros((2, 3), jnp.int32), jnp.zeros((2, 4)))


def test_wrong_dtype_names_the_input(two):
    with pytest.raises(jaxport.InputError, match="input 'tokens' has dtype float32, but the model expects int64"):
        two(jnp.zeros((2, 3)), jnp.zeros((2, 3)))


def test_wrong_count(two):
    with pytest.raises(jaxport.InputError, match="expected 2 positional input"):
        two(jnp.zeros((2, 3), jnp.int32))


def test_unknown_keyword(two):
    with pytest.raises(jaxport.InputError, match="unexpected keyword input"):
        two(jnp.zeros((2, 3), jnp.int32), jnp.zeros((2, 3)), bias=1)


def test_inputs_may_be_torch_numpy_or_jax(two):
    tokens = torch.arange(6).reshape(2, 3)
    scale = torch.randn(2, 3)
    expected = Two()(tokens, scale).numpy()
    for t, s in [(tokens, scale), (tokens.numpy(), scale.numpy()), (jnp.asarray(tokens.numpy()), jnp.asarray(scale.numpy()))]:
        np.testing.assert_allclose(np.asarray(two(t, s)), expected, rtol=1e-6)
