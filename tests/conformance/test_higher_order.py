"""Second derivatives through converted programs: `jax.hessian` and Hessian-vector products
(`jax.jvp` of `jax.grad`) against `torch.autograd.functional.hessian` and `.hvp`, on 20 ops and on
three models (an MLP, a CNN with BatchNorm in eval mode, a small transformer encoder), in float64
so that a wrong second derivative cannot hide in rounding.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

import jaxport

pytestmark = pytest.mark.usefixtures("x64_strict")


class Scalar(torch.nn.Module):
    """`fn(x)` reduced to a scalar against fixed weights, so every output element's second
    derivative counts."""

    def __init__(self, fn, out_shape):
        super().__init__()
        self.fn = fn
        self.register_buffer("weights", torch.randn(out_shape, dtype=torch.float64, generator=_generator(1)))

    def forward(self, x):
        return (self.fn(x) * self.weights).sum()


def _generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _positive(shape, seed):
    return torch.rand(shape, dtype=torch.float64, generator=_generator(seed)) + 0.5


def _normal(shape, seed):
    return torch.randn(shape, dtype=torch.float64, generator=_generator(seed))


def _spd(shape, seed):
    a = _normal(shape, seed)
    return a @ a.mT + shape[-1] * torch.eye(shape[-1], dtype=torch.float64)


#: name: (function of one tensor, its input)
OPS = {
    "sin": (torch.sin, _normal((3, 4), 0)),
    "tanh": (torch.tanh, _normal((3, 4), 0)),
    "exp": (torch.exp, _normal((3, 4), 0)),
    "log": (torch.log, _positive((3, 4), 0)),
    "sqrt": (torch.sqrt, _positive((3, 4), 0)),
    "reciprocal": (torch.reciprocal, _positive((3, 4), 0)),
    "pow": (lambda x: x.pow(3.5), _positive((3, 4), 0)),
    "sigmoid": (torch.sigmoid, _normal((3, 4), 0)),
    "gelu": (torch.nn.functional.gelu, _normal((3, 4), 0)),
    "gelu_tanh": (lambda x: torch.nn.functional.gelu(x, approximate="tanh"), _normal((3, 4), 0)),
    "softplus": (torch.nn.functional.softplus, _normal((3, 4), 0)),
    "silu": (torch.nn.functional.silu, _normal((3, 4), 0)),
    "erf": (torch.erf, _normal((3, 4), 0)),
    "softmax": (lambda x: torch.softmax(x, -1), _normal((3, 4), 0)),
    "log_softmax": (lambda x: torch.log_softmax(x, -1), _normal((3, 4), 0)),
    "logsumexp": (lambda x: torch.logsumexp(x, -1), _normal((3, 4), 0)),
    "layer_norm": (lambda x: torch.nn.functional.layer_norm(x, (4,)), _normal((3, 4), 0)),
    "matmul": (lambda x: x @ x.mT, _normal((3, 4), 0)),
    "cumprod": (lambda x: torch.cumprod(x, -1), _positive((3, 4), 0)),
    "norm": (lambda x: torch.linalg.vector_norm(x, dim=-1), _normal((3, 4), 0)),
    "inv": (torch.linalg.inv, _spd((3, 3), 0)),
    "det": (torch.linalg.det, _spd((2, 3, 3), 0)),
    "cholesky": (torch.linalg.cholesky, _spd((3, 3), 0)),
    "eigvalsh": (torch.linalg.eigvalsh, _normal((3, 3), 0) + _normal((3, 3), 0).mT),
}


def _converted(module, x):
    model = jaxport.from_torch(module.eval(), (x,))
    return lambda value: model.apply(model.params, value)


@pytest.mark.parametrize("name", OPS)
def test_hessian_and_hvp_of_ops_match_autograd(name):
    fn, x = OPS[name]
    module = Scalar(fn, fn(x).shape)
    f = _converted(module, x)
    v = _normal(x.shape, 2)

    want = torch.autograd.functional.hessian(module, x)
    got = jax.hessian(f)(jnp.asarray(x.numpy()))
    np.testing.assert_allclose(np.asarray(got), want.numpy(), rtol=1e-9, atol=1e-10)

    _, want_hvp = torch.autograd.functional.hvp(module, x, v)
    _, got_hvp = jax.jvp(jax.grad(f), (jnp.asarray(x.numpy()),), (jnp.asarray(v.numpy()),))
    np.testing.assert_allclose(np.asarray(got_hvp), want_hvp.numpy(), rtol=1e-9, atol=1e-10)
    assert np.abs(want_hvp.numpy()).max() > 1e-3, "a vanishing Hessian would prove nothing"


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 16),
                                       torch.nn.GELU(), torch.nn.Linear(16, 3))

    def forward(self, x):
        return self.net(x)


class BatchNormCNN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Conv2d(2, 4, 3, padding=1), torch.nn.BatchNorm2d(4), torch.nn.SiLU(),
            torch.nn.Conv2d(4, 4, 3, stride=2), torch.nn.BatchNorm2d(4), torch.nn.Softplus(),
            torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(4, 3))

    def forward(self, x):
        return self.net(x)


class Transformer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Linear(5, 8)
        self.encoder = torch.nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, dropout=0.0, batch_first=True)
        self.head = torch.nn.Linear(8, 3)

    def forward(self, x):
        return self.head(self.encoder(self.embed(x)))


def _cnn_with_statistics():
    torch.manual_seed(0)
    module = BatchNormCNN().double()
    with torch.no_grad():  # running statistics away from their defaults, so eval mode uses them
        for bn in (module.net[1], module.net[4]):
            bn.running_mean.uniform_(-0.5, 0.5)
            bn.running_var.uniform_(0.5, 2.0)
            bn.weight.uniform_(0.5, 1.5)
    return module


MODELS = {
    "mlp": (lambda: MLP().double(), (4, 6)),
    "cnn_batchnorm_eval": (_cnn_with_statistics, (2, 2, 6, 6)),
    "transformer": (lambda: Transformer().double(), (2, 4, 5)),
}


@pytest.mark.parametrize("name", [pytest.param(n, marks=[pytest.mark.slow] if n == "transformer" else [])
                                  for n in MODELS])  # the transformer's Hessians take a minute
def test_models_hvp_in_parameters_and_hessian_in_inputs(name):
    """A Hessian-vector product of a loss in every parameter, and the full Hessian of the loss in
    the input, each against PyTorch's."""
    build, shape = MODELS[name]
    torch.manual_seed(0)
    module = build().eval()
    x = _normal(shape, 3)
    weights = _normal(module(x).shape, 4)
    model = jaxport.from_torch(module, (x,))
    names = [n for n, _ in module.named_parameters()]

    def torch_loss(*params):
        out = torch.func.functional_call(module, dict(zip(names, params)), (x,))
        return (out * weights).sum()

    def jax_loss(params):
        return (model.apply({**model.params, **params}, jnp.asarray(x.numpy())) * jnp.asarray(weights.numpy())).sum()

    params = tuple(p.detach() for p in module.parameters())
    directions = tuple(_normal(p.shape, 10 + i) for i, p in enumerate(params))
    # PyTorch's fused CPU attention has no second derivative: its reference takes the math kernel
    with sdpa_kernel(SDPBackend.MATH):
        _, want = torch.autograd.functional.hvp(torch_loss, params, directions)
        want_hessian = torch.autograd.functional.hessian(lambda value: (module(value) * weights).sum(), x)
    primal = {n: jnp.asarray(p.numpy()) for n, p in zip(names, params)}
    tangent = {n: jnp.asarray(d.numpy()) for n, d in zip(names, directions)}
    _, got = jax.jvp(jax.grad(jax_loss), (primal,), (tangent,))
    for n, w in zip(names, want):
        np.testing.assert_allclose(np.asarray(got[n]), w.numpy(), rtol=1e-8, atol=1e-10, err_msg=n)
    assert max(float(w.abs().max()) for w in want) > 1e-3

    got_hessian = jax.hessian(lambda v: (model.apply(model.params, v) * jnp.asarray(weights.numpy())).sum())(
        jnp.asarray(x.numpy()))
    np.testing.assert_allclose(np.asarray(got_hessian), want_hessian.numpy(), rtol=1e-8, atol=1e-10)
