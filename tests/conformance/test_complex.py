"""Complex numbers family by family: each op family's ops on complex inputs, converted and run
through JAX, against PyTorch: values in complex128 and complex64, and the gradient of a real loss
(PyTorch's `.grad` is the conjugate of `jax.grad`: docs/guide/training.md, "Complex numbers").

The OpInfo sweep draws complex samples of every op (`make opinfo-report`, `make opinfo-gradients`);
these cases stay in `make test` for the families where complex inputs broke lowerings written for
real numbers: a cast to a real dtype that drops the imaginary part (`angle`), a transpose that
forgot to conjugate (`Tensor.H`), a conjugate where none belongs (`dot`), a real-only formula
(`sgn`, `isclose`, `float_power`, `uniform_`, `triplet_margin_loss`), a principal logarithm where
PyTorch's formula keeps the larger operand's imaginary part (`logaddexp`).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

import jaxport
from jaxport import dlpack
from tests.support.modules import Call

pytestmark = pytest.mark.usefixtures("x64_strict")


def _z(*shape, phase=1.0):
    """A complex128 tensor whose entries stay away from 0 and from branch cuts' edges (imaginary
    parts of scale `phase`: beyond pi for a formula whose result must not be reduced to (-pi, pi])."""
    def maker(seed):
        g = torch.Generator().manual_seed(seed)
        return torch.complex(torch.rand(shape, dtype=torch.float64, generator=g) + 0.5,
                             phase * torch.randn(shape, dtype=torch.float64, generator=g))
    return maker


def _hermitian_pd(n):
    def maker(seed):
        a = _z(n, n)(seed)
        return a @ a.mH + n * torch.eye(n, dtype=torch.complex128)
    return maker


def _real(*shape):
    return lambda seed: torch.randn(shape, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))


#: family: {name: (function, input makers)}: each family's ops that take complex inputs.
FAMILIES = {
    "unary": {
        "sgn": (torch.sgn, [_z(3, 4)]),
        "angle": (torch.angle, [_z(3, 4)]),
        "abs": (torch.abs, [_z(3, 4)]),
        "exp": (torch.exp, [_z(3, 4)]),
        "log": (torch.log, [_z(3, 4)]),
        "sqrt": (torch.sqrt, [_z(3, 4)]),
        "rsqrt": (torch.rsqrt, [_z(3, 4)]),
        "reciprocal": (torch.reciprocal, [_z(3, 4)]),
        "sin": (torch.sin, [_z(3, 4)]),
        "tanh": (torch.tanh, [_z(3, 4)]),
        "sigmoid": (torch.sigmoid, [_z(3, 4)]),
        "conj_physical": (torch.conj_physical, [_z(3, 4)]),
        "real_imag": (lambda z: z.real * 2 + z.imag, [_z(3, 4)]),
    },
    "binary": {
        "mul": (torch.mul, [_z(3, 4), _z(4)]),
        "div": (torch.div, [_z(3, 4), _z(3, 4)]),
        "pow": (torch.pow, [_z(3, 4), _z(3, 4)]),
        "pow_scalar": (lambda z: z ** 2.5, [_z(3, 4)]),
        "float_power": (lambda z: torch.float_power(z.to(torch.complex64), 2), [_z(3, 4)]),
        "addcmul": (lambda a, b, c: torch.addcmul(a, b, c, value=0.5), [_z(3, 4), _z(3, 4), _z(3, 4)]),
        "isclose": (lambda a, b: torch.isclose(a, a + 1e-9 * b), [_z(3, 4), _z(3, 4)]),
        "logaddexp": (torch.logaddexp, [_z(3, 4, phase=6.0), _z(3, 4, phase=6.0)]),
    },
    "reduction": {
        "sum": (lambda z: z.sum(1), [_z(3, 4)]),
        "prod": (lambda z: z.prod(0), [_z(3, 4)]),
        "mean": (lambda z: z.mean(), [_z(3, 4)]),
        "var": (lambda z: torch.var(z, 1), [_z(3, 4)]),
        "std": (lambda z: torch.std(z, 0), [_z(3, 4)]),
        "vector_norm": (lambda z: torch.linalg.vector_norm(z, 3.0, 1), [_z(3, 4)]),
        "cumsum": (lambda z: z.cumsum(1), [_z(3, 4)]),
        "cumprod": (lambda z: z.cumprod(1), [_z(3, 4)]),
    },
    "linalg": {
        "dot": (torch.dot, [_z(5), _z(5)]),
        "vdot": (torch.vdot, [_z(5), _z(5)]),
        "matmul": (torch.matmul, [_z(3, 4), _z(4, 2)]),
        "H": (lambda z: z.H * torch.arange(3), [_z(3, 4)]),
        "mH": (lambda z: z.mH * torch.arange(3), [_z(2, 3, 4)]),
        "det": (torch.linalg.det, [_z(3, 3)]),
        "inv": (torch.linalg.inv, [_z(3, 3)]),
        "solve": (torch.linalg.solve, [_z(3, 3), _z(3, 2)]),
        "eigvalsh": (torch.linalg.eigvalsh, [_hermitian_pd(3)]),
        "cholesky": (torch.linalg.cholesky, [_hermitian_pd(3)]),
        "svdvals": (torch.linalg.svdvals, [_z(3, 4)]),
        "matrix_exp": (torch.linalg.matrix_exp, [_z(3, 3)]),
    },
    "fft": {
        "fft": (torch.fft.fft, [_z(8)]),
        "ifft2": (torch.fft.ifft2, [_z(4, 6)]),
        "rfft_angle": (lambda x: torch.fft.rfft2(x).angle(), [_real(4, 6)]),
        "irfft": (lambda z: torch.fft.irfft(z, 8), [_z(5)]),
        "hfft": (lambda z: torch.fft.hfft(z, 8), [_z(5)]),
    },
    "shape": {
        "cat_flip": (lambda a, b: torch.cat([a, b.flip(0)]), [_z(2, 3), _z(2, 3)]),
        "gather": (lambda z: z.gather(1, torch.tensor([[2, 0], [1, 1]])), [_z(2, 3)]),
        "scatter_add": (lambda z, s: z.scatter_add(0, torch.tensor([[1, 0, 1]]), s), [_z(2, 3), _z(1, 3)]),
        "roll_where": (lambda z: torch.where(z.real > 1, z.roll(1, 1), -z), [_z(3, 4)]),
        "view_as_real": (lambda z: torch.view_as_real(z) * 2, [_z(3, 4)]),
        "view_as_complex": (lambda x: torch.view_as_complex(x) ** 2, [_real(3, 2)]),
    },
    "nn": {
        "linear": (lambda x, w: torch.nn.functional.linear(x, w), [_z(2, 4), _z(3, 4)]),
        "conv1d": (lambda x, w: torch.nn.functional.conv1d(x, w, padding=1), [_z(1, 2, 6), _z(3, 2, 3)]),
        "l1_loss": (torch.nn.functional.l1_loss, [_z(3, 4), _z(3, 4)]),
        "pairwise_distance": (torch.nn.functional.pairwise_distance, [_z(3, 4), _z(3, 4)]),
        "triplet_margin_loss": (lambda a, p, n: torch.nn.functional.triplet_margin_loss(a, p, n, margin=3.0),
                                [_z(3, 4), _z(3, 4), _z(3, 4)]),
    },
}
CASES = [(family, name) for family, ops in FAMILIES.items() for name in ops]


def _inputs(family: str, name: str, dtype: torch.dtype) -> list[torch.Tensor]:
    makers = FAMILIES[family][name][1]
    seed = sum(map(ord, name))
    inputs = [make(seed + i) for i, make in enumerate(makers)]
    narrow = {torch.complex64: torch.float32}
    return [x.to(dtype) if x.is_complex() else x.to(narrow.get(dtype, x.dtype)) for x in inputs]


def _weights(out: torch.Tensor) -> torch.Tensor:
    """Fixed real weights for each real part of an output: the real loss is their dot product."""
    g = torch.Generator().manual_seed(7)
    return torch.randn(torch.view_as_real(out).shape if out.is_complex() else out.shape, dtype=torch.float64,
                       generator=g)


def _torch_loss(out: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    parts = torch.view_as_real(out) if out.is_complex() else out
    return (parts.to(torch.float64) * weights).sum()


def _jax_loss(out: jax.Array, weights: jax.Array) -> jax.Array:
    parts = jnp.stack([out.real, out.imag], -1) if jnp.iscomplexobj(out) else out
    return (parts.astype(jnp.float64) * weights).sum()


def _as_numpy(x) -> np.ndarray:
    return x.detach().resolve_conj().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)


def _assert_parts_close(got, want, rtol, atol, what):
    got, want = _as_numpy(got), _as_numpy(want)
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype}, PyTorch {want.dtype}"
    if want.dtype == np.bool_:
        np.testing.assert_array_equal(got, want, err_msg=what)
        return
    for part in (np.real, np.imag):
        np.testing.assert_allclose(part(got), part(want), rtol=rtol, atol=atol, err_msg=what)


@pytest.mark.parametrize("dtype, rtol", [(torch.complex128, 1e-10), (torch.complex64, 2e-5)], ids=str)
@pytest.mark.parametrize("family, name", CASES, ids=[f"{f}-{n}" for f, n in CASES])
def test_values(family, name, dtype, rtol):
    fn = FAMILIES[family][name][0]
    inputs = _inputs(family, name, dtype)
    want = fn(*inputs)
    model = jaxport.from_torch(Call(fn), tuple(inputs))
    got = model(*inputs)
    _assert_parts_close(got, want, rtol, rtol, f"{family}.{name} in {dtype}")


@pytest.mark.parametrize("family, name", CASES, ids=[f"{f}-{n}" for f, n in CASES])
def test_gradient_of_a_real_loss(family, name):
    fn = FAMILIES[family][name][0]
    inputs = _inputs(family, name, torch.complex128)
    leaves = [x.clone().requires_grad_(x.is_floating_point() or x.is_complex()) for x in inputs]
    out = fn(*leaves)
    if not out.requires_grad:
        pytest.skip(f"{name} has no derivative (its output is {out.dtype})")
    weights = _weights(out)
    want = torch.autograd.grad(_torch_loss(out, weights), leaves)

    model = jaxport.from_torch(Call(fn), tuple(inputs))
    w = jnp.asarray(weights.numpy())
    got = jax.grad(lambda *xs: _jax_loss(model.apply(model.params, *xs), w), argnums=tuple(range(len(inputs))))(
        *[dlpack.to_jax(x) for x in inputs])
    for i, (g, t) in enumerate(zip(got, want)):
        # PyTorch's gradient of a real loss in a complex input is the conjugate of JAX's.
        _assert_parts_close(jnp.conj(g), t, 1e-9, 1e-10, f"{family}.{name}: gradient {i}")


def test_random_complex_draws_have_pytorchs_moments():
    """rand/uniform_ draw each part uniformly, randn each part with variance 1/2, as PyTorch does."""
    def draws(x):
        return torch.rand_like(x), x.clone().uniform_(2.0, 3.0), torch.randn_like(x)

    x = torch.zeros(40_000, dtype=torch.complex64)
    model = jaxport.from_torch(Call(draws), (x,))
    for got, (mean, var) in zip(model(x, rng=jax.random.key(0)), [(0.5, 1 / 12), (2.5, 1 / 12), (0.0, 0.5)]):
        got = np.asarray(got)
        assert got.dtype == np.complex64
        for part in (got.real, got.imag):
            assert abs(part.mean() - mean) < 0.01 and abs(part.var() - var) < 0.01
