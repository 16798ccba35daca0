"""Products of one row of 16-bit floats (a batch of one decoding): as two rows on the CPU, so that
XLA:CPU reads the weight as it lies instead of converting it to float32 first; the same values
as PyTorch's, special values included, and no float32 copy of the weight in the compiled program."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from jaxport import dlpack
from jaxport.ops import _products

HALVES = [torch.bfloat16, torch.float16]


def _one_row(dtype, k=96, n=80, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(1, k, generator=g).to(dtype), torch.randn(n, k, generator=g).to(dtype)


@pytest.mark.parametrize("dtype", HALVES, ids=str)
@pytest.mark.parametrize("layout", ["weight", "matrix"])
def test_one_row_matches_pytorch(dtype, layout):
    row, weight = _one_row(dtype)
    if layout == "weight":
        got = jax.jit(lambda r, w: _products.rows_times_weight(r, w, np.float32))(dlpack.to_jax(row), dlpack.to_jax(weight))
        expected = row.double() @ weight.double().T
    else:
        matrix = weight.T.contiguous()
        got = jax.jit(lambda r, m: _products.rows_times_matrix(r, m, np.float32))(dlpack.to_jax(row), dlpack.to_jax(matrix))
        expected = row.double() @ matrix.double()
    assert got.shape == (1, 80) and got.dtype == np.float32
    np.testing.assert_allclose(np.asarray(got), expected.numpy(), rtol=1e-5, atol=1e-4)
    # against PyTorch's own bfloat16/float16 linear, rounded to the dtype as it rounds
    with torch.no_grad():
        theirs = torch.nn.functional.linear(row, weight).float().numpy()
    np.testing.assert_allclose(np.asarray(jnp.asarray(got).astype(jnp.dtype(str(dtype).split(".")[1]))
                                          .astype(np.float32)), theirs, rtol=1e-2, atol=1e-2)


def test_special_values_propagate_from_the_one_row():
    row, weight = _one_row(torch.bfloat16)
    row[0, 0], row[0, 1] = float("nan"), float("inf")
    weight[3, :] = 0
    got = np.asarray(jax.jit(lambda r, w: _products.rows_times_weight(r, w, np.float32))(
        dlpack.to_jax(row), dlpack.to_jax(weight)))
    expected = (row.double() @ weight.double().T).numpy()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(expected))
    assert np.isnan(got).all()  # NaN and inf times any weight: every column NaN, as in float64


def test_no_float32_copy_of_a_16_bit_weight():
    """XLA's own accounting: a one-row bfloat16 product needs no buffer the size of a float32 weight
    (11 MiB for 2816 x 1024 before)."""
    weight = jnp.zeros((2816, 1024), jnp.bfloat16)
    row = jnp.zeros((1, 1024), jnp.bfloat16)
    compiled = jax.jit(lambda r, w: _products.rows_times_weight(r, w, np.float32)).lower(row, weight).compile()
    analysis = compiled.memory_analysis()
    if analysis is None:
        pytest.skip("this backend reports no memory analysis")
    assert analysis.temp_size_in_bytes < weight.size  # far below the 11 MiB a float32 copy takes
