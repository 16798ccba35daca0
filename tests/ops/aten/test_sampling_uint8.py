"""uint8 bilinear / bicubic / antialiased-bilinear resizing, bit-exact against PyTorch's CPU kernel.

PyTorch resizes uint8 images like PIL: one pass per resized dim (width first), each rounding to
uint8, with int16 fixed-point weights. It routes inputs with at most 4 channels to an AVX2 kernel
and wider (or non-AVX2) ones to a generic kernel, and reads channels_last and contiguous inputs
differently, so the cases cover 1, 3, 4 and 5 channels in both layouts.

Left out: an output width of 1 with a changing height on the generic kernel from a contiguous
input, where PyTorch 2.13 skips the vertical interpolation (it repeats the first source row) while
the same input in channels_last, or with <= 4 channels under AVX2, is resized correctly.
"""

from __future__ import annotations

import random

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from jaxport.ops import registry

MODES = {  # id: (interpolate mode, antialias, aten op)
    "bilinear": ("bilinear", False, "upsample_bilinear2d.vec"),
    "bicubic": ("bicubic", False, "upsample_bicubic2d.vec"),
    "bilinear_aa": ("bilinear", True, "_upsample_bilinear2d_aa.vec"),
}


def _torch(x, mode, size, scale, align_corners):
    interp, antialias, _ = MODES[mode]
    kwargs = {"size": size} if size is not None else {"scale_factor": scale}
    return F.interpolate(x, mode=interp, align_corners=align_corners, antialias=antialias, **kwargs)


def _jaxport(x, mode, size, scale, align_corners):
    lowering = registry.lookup(f"aten.{MODES[mode][2]}")
    size = list(size) if size is not None else None
    scale = list(scale) if scale is not None else None
    fn = jax.jit(lambda a: lowering(a, size, align_corners, scale))
    return np.asarray(fn(jnp.asarray(x.contiguous().numpy())))


def _check(x, mode, size=None, scale=None, align_corners=False):
    want = _torch(x, mode, size, scale, align_corners).numpy()
    got = _jaxport(x, mode, size, scale, align_corners)
    assert got.dtype == np.uint8 and got.shape == want.shape
    np.testing.assert_array_equal(got, want)


def _image(channels, h, w, channels_last, seed=0):
    x = torch.randint(0, 256, (2, channels, h, w), dtype=torch.uint8,
                      generator=torch.Generator().manual_seed(seed))
    return x.contiguous(memory_format=torch.channels_last) if channels_last else x


@pytest.mark.usefixtures("x64_strict")
@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("channels,channels_last", [(1, False), (3, True), (4, False), (5, True)])
@pytest.mark.parametrize("size,scale,align_corners", [
    pytest.param((7, 5), None, False, id="down"),
    pytest.param((31, 26), None, True, id="up-align"),
    pytest.param((9, 13), None, False, id="height-down-width-up"),
    pytest.param(None, (1.7, 0.45), False, id="scale"),
    pytest.param(None, (0.3, 2.5), True, id="scale-align"),
    pytest.param(None, (1.05, 1.0), False, id="scale-keeps-size"),
])
def test_matches_pytorch(mode, channels, channels_last, size, scale, align_corners):
    _check(_image(channels, 17, 21, channels_last), mode, size, scale, align_corners)


@pytest.mark.parametrize("mode", list(MODES))
def test_large_downsample(mode):
    """Wide antialiasing windows push the fixed-point precision to its 22-bit cap."""
    _check(_image(3, 400, 300, False), mode, size=(5, 7))


@pytest.mark.parametrize("seed", range(3))
def test_random_configs(seed):
    rng = random.Random(seed)
    for _ in range(20):
        mode = rng.choice(list(MODES))
        channels, channels_last = rng.choice([1, 2, 3, 4, 5]), rng.random() < 0.5
        h, w = rng.randint(1, 30), rng.randint(2, 30)
        size = (rng.randint(1, 45), rng.randint(2, 45))
        _check(_image(channels, h, w, channels_last, seed), mode, size=size,
               align_corners=rng.random() < 0.5)
