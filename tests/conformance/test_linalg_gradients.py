"""Linear algebra derivatives at the edge cases, jaxport's (`jax.grad` through the converted
program, conjugated to PyTorch's convention for complex inputs) against PyTorch's autograd:
repeated eigenvalues and singular values, where the derivative is defined (symmetric functions of
them) and where neither side can give one (an eigenvector of a repeated eigenvalue), complex
Hermitian inputs, and batches. Float64 and complex128, so a wrong formula cannot hide in rounding.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

import jaxport
from tests.support.modules import Call

pytestmark = pytest.mark.usefixtures("x64_strict")


def _gradients(fn, a):
    """(PyTorch's gradient of the real scalar fn(a), jaxport's in PyTorch's convention)."""
    leaf = a.clone().requires_grad_()
    (want,) = torch.autograd.grad(fn(leaf), leaf)
    model = jaxport.from_torch(Call(fn), (a,))
    got = jax.grad(lambda x: model.apply(model.params, x))(jnp.asarray(a.numpy()))
    return want.numpy(), np.conj(np.asarray(got))


def _orthogonal(n, seed, dtype=torch.float64):
    q, _ = torch.linalg.qr(torch.randn(n, n, dtype=dtype, generator=torch.Generator().manual_seed(seed)))
    return q


def _with_spectrum(values, seed, dtype=torch.float64):
    """Q diag(values) Q^H for a random unitary Q: a Hermitian matrix with exactly these eigenvalues."""
    q = _orthogonal(len(values), seed, dtype)
    return q @ torch.diag(torch.tensor(values, dtype=dtype)) @ q.mH


REPEATED = [1.0, 1.0, 3.0, -2.0]


@pytest.mark.parametrize("name, fn", [
    ("sum of squares of eigvalsh", lambda a: (torch.linalg.eigvalsh(a) ** 2).sum()),
    ("trace of exp through eigh", lambda a: torch.linalg.eigh(a)[0].exp().sum()),
    ("logsumexp of eigvalsh", lambda a: torch.logsumexp(torch.linalg.eigvalsh(a), 0)),
])
def test_symmetric_functions_of_repeated_eigenvalues(name, fn):
    """A symmetric function of the eigenvalues has a gradient even where two coincide (it does not
    depend on the eigenvectors' basis in the repeated eigenspace); both sides give it."""
    want, got = _gradients(fn, _with_spectrum(REPEATED, 0))
    assert np.isfinite(want).all()
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-11)


def test_eigenvector_of_a_repeated_eigenvalue_has_no_gradient_on_either_side():
    """An eigenvector of a repeated eigenvalue is not a differentiable function of the matrix:
    PyTorch's formula divides by the eigenvalue gap, and so does JAX's. The computed gap is
    rounding's (about 1e-16), so neither side gives a usable gradient: each is not finite or
    beyond 1e8."""
    fn = lambda a: torch.linalg.eigh(a)[1][:, 1].pow(2).mul(torch.arange(4.0, dtype=a.dtype)).sum()  # noqa: E731
    for seed in range(3):  # eigenvalues ascend: -2, 1, 1, 3, so vector 1 is in the repeated pair
        for gradient in _gradients(fn, _with_spectrum(REPEATED, seed)):
            assert not np.isfinite(gradient).all() or np.abs(gradient).max() > 1e8


def test_eigenvector_of_a_simple_eigenvalue_beside_a_repeated_one():
    """The eigenvector of a simple eigenvalue stays differentiable beside a repeated pair."""
    fn = lambda a: torch.linalg.eigh(a)[1][:, 3].pow(2).mul(torch.arange(4.0, dtype=a.dtype)).sum()  # noqa: E731
    want, got = _gradients(fn, _with_spectrum(REPEATED, 1))
    assert np.isfinite(want).all()
    np.testing.assert_allclose(got, want, rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("name, fn", [
    ("nuclear norm", lambda a: torch.linalg.matrix_norm(a, "nuc")),
    ("sum of squared singular values", lambda a: (torch.linalg.svdvals(a) ** 2).sum()),
])
def test_symmetric_functions_of_repeated_singular_values(name, fn):
    u, v = _orthogonal(4, 2), _orthogonal(4, 3)
    a = u @ torch.diag(torch.tensor([2.0, 2.0, 0.5, 1.5], dtype=torch.float64)) @ v.mT
    want, got = _gradients(fn, a)
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-11)


def _hermitian(n, seed):
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(n, n, dtype=torch.complex128, generator=g)
    return a @ a.mH + n * torch.eye(n, dtype=torch.complex128)


_WEIGHTS = torch.diag(torch.arange(1.0, 5.0, dtype=torch.float64)).to(torch.complex128)
_SCALES = torch.tensor([1.0, -2.0, 0.5, 3.0], dtype=torch.float64)


@pytest.mark.parametrize("name, fn", [
    ("eigvalsh", lambda a: (torch.linalg.eigvalsh(a) * torch.arange(1.0, 5.0, dtype=torch.float64)).sum()),
    # v^H B v of each eigenvector: real, and free of the vector's phase
    ("eigh vectors (phase-free)", lambda a: torch.einsum("ik,ij,jk->k", torch.linalg.eigh(a)[1].conj(), _WEIGHTS,
                                                          torch.linalg.eigh(a)[1]).real.mul(_SCALES).sum()),
    ("cholesky", lambda a: torch.linalg.cholesky(a).abs().sum()),
    ("inverse", lambda a: torch.linalg.inv(a).real.sum() + torch.linalg.inv(a).imag.pow(2).sum()),
    ("log-determinant", lambda a: torch.linalg.slogdet(a)[1]),
    ("solve", lambda a: torch.linalg.solve(a, torch.ones(4, 2, dtype=torch.complex128)).abs().sum()),
])
def test_complex_hermitian_inputs(name, fn):
    """Complex Hermitian matrices: PyTorch's gradient equals the conjugate of jax.grad's."""
    want, got = _gradients(fn, _hermitian(4, 4))
    assert np.abs(want).max() > 1e-3
    np.testing.assert_allclose(got, want, rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("name, fn", [
    ("inverse", lambda a: torch.linalg.inv(a).sum()),
    ("determinant", lambda a: torch.linalg.det(a).sum()),
    ("eigvalsh", lambda a: torch.linalg.eigvalsh(a + a.mT).pow(2).sum()),
    ("cholesky", lambda a: torch.linalg.cholesky(a @ a.mT + 4 * torch.eye(4, dtype=a.dtype)).sum()),
    ("svdvals", lambda a: torch.linalg.svdvals(a).sum()),
    ("qr", lambda a: torch.linalg.qr(a)[1].diagonal(dim1=-2, dim2=-1).abs().sum()),
    ("matrix_exp", lambda a: torch.linalg.matrix_exp(a / 4).sum()),
    ("pinv", lambda a: torch.linalg.pinv(a).sum()),
])
def test_batched_inputs(name, fn):
    """A (2, 3) batch of 4x4 matrices: each matrix's gradient as if it stood alone."""
    a = torch.randn(2, 3, 4, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(5))
    want, got = _gradients(fn, a)
    np.testing.assert_allclose(got, want, rtol=1e-8, atol=1e-10)
