"""grid_sample with reflection padding where coordinates land on the mirror lines.

A grid value of an odd integer (±1, ±3, ...) unnormalizes to a whole number of reflection spans
from the low border, for any size and either align_corners. These are the points where a
reflection that counts its flips with floor(coord / span) goes wrong under jit: XLA may divide by
the constant span as a multiplication by its reciprocal, and 22 * (1/22) floors to 0, which lands
the sample on the opposite border.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from jaxport.ops import registry

MODES = {"bilinear": 0, "nearest": 1, "bicubic": 2}


def _grid(spatial_dims: int) -> torch.Tensor:
    """Every odd integer in [-7, 7] with a neighbour just inside and outside, on each axis."""
    lines = torch.arange(-7.0, 8.0, 2.0, dtype=torch.float64)
    values = torch.cat([lines, lines - 1e-3, lines + 1e-3])
    coords = [values.roll(shift) for shift in range(spatial_dims)]
    return torch.stack(coords, dim=-1).reshape((1, -1) + (1,) * (spatial_dims - 1) + (spatial_dims,))


@pytest.mark.usefixtures("x64_strict")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize("size", [2, 3, 7, 22, 23])
def test_reflection_on_mirror_lines_2d(dtype, mode, align_corners, size):
    torch.manual_seed(size)
    image = torch.randn(1, 2, size, size + 1, dtype=dtype)
    grid = _grid(2).to(dtype)
    want = F.grid_sample(image, grid, mode=mode, padding_mode="reflection",
                         align_corners=align_corners)
    lowering = registry.lookup("aten.grid_sampler_2d.default")
    fn = jax.jit(lambda x, g: lowering(x, g, MODES[mode], 2, align_corners))
    got = np.asarray(fn(jnp.asarray(image.numpy()), jnp.asarray(grid.numpy())))
    assert got.dtype == want.numpy().dtype and got.shape == tuple(want.shape)
    np.testing.assert_allclose(got, want.numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.usefixtures("x64_strict")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("align_corners", [False, True])
def test_reflection_on_mirror_lines_3d(dtype, align_corners):
    torch.manual_seed(0)
    image = torch.randn(1, 2, 22, 21, 23, dtype=dtype)
    grid = _grid(3).to(dtype)
    want = F.grid_sample(image.float(), grid.float(), mode="bilinear", padding_mode="reflection",
                         align_corners=align_corners)
    lowering = registry.lookup("aten.grid_sampler_3d.default")
    fn = jax.jit(lambda x, g: lowering(x, g, 0, 2, align_corners))
    got = fn(jnp.asarray(image.numpy()), jnp.asarray(grid.numpy()))
    assert got.dtype == image.numpy().dtype and got.shape == tuple(want.shape)
    # Half inputs are sampled in float32 and rounded once: within half an ulp of the float32 result.
    tolerance = 1e-5 if dtype == torch.float32 else 1e-3
    np.testing.assert_allclose(np.asarray(got, np.float32), want.numpy(), rtol=tolerance, atol=tolerance)
