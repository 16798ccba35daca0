"""ATen lowerings: padding (constant_pad_nd, pad, the reflection and replication pads,
_pad_circular, _pad_enum).

PyTorch's flat pad list runs from the last dim backwards in (left, right) pairs; negative
widths crop.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax

from ..registry import aten

_PAD_MODES = {0: "constant", 1: "reflect", 2: "replicate", 3: "circular"}


_JNP_PAD_MODES = {"reflect": "reflect", "replicate": "edge"}


def _pad_widths(ndim: int, pad) -> list[tuple[int, int]]:
    """PyTorch's flat pad list (last dim first, (left, right) pairs) as per-dim pairs."""
    widths = [(0, 0)] * ndim
    for i in range(len(pad) // 2):
        widths[ndim - 1 - i] = (int(pad[2 * i]), int(pad[2 * i + 1]))
    return widths


def _pad(self, pad, mode: str, value=None):
    """Pad the trailing dims of `self` as PyTorch's pads do, negative widths cropping."""
    widths = _pad_widths(self.ndim, pad)
    if mode == "constant":
        fill = jnp.asarray(0 if value is None else value).astype(self.dtype)
        return lax.pad(self, fill, [(lo, hi, 0) for lo, hi in widths])
    if mode == "circular":
        # Negative widths crop first; the wrapped values come from what remains.
        crop = tuple(slice(max(-lo, 0), n - max(-hi, 0)) for n, (lo, hi) in zip(self.shape, widths))
        return jnp.pad(self[crop], [(max(lo, 0), max(hi, 0)) for lo, hi in widths], mode="wrap")
    if all(lo >= 0 and hi >= 0 for lo, hi in widths):
        return jnp.pad(self, widths, mode=_JNP_PAD_MODES[mode])
    # With negative widths, output position j reads input position j - left, reflected or clamped.
    for d, (lo, hi) in enumerate(widths):
        if lo or hi:
            n = self.shape[d]
            pos = np.arange(n + lo + hi) - lo
            if mode == "reflect":
                pos = np.abs(pos)
                pos = np.where(pos > n - 1, 2 * (n - 1) - pos, pos)
            self = jnp.take(self, np.clip(pos, 0, n - 1), axis=d)
    return self


@aten("_pad_circular.default")
def aten__pad_circular(self, pad):
    """_pad_circular(Tensor self, SymInt[] pad) -> Tensor"""
    return _pad(self, pad, "circular")


@aten("_pad_enum.default")
def aten__pad_enum(self, pad, mode, value=None):
    """_pad_enum(Tensor self, SymInt[] pad, int mode, float? value=None) -> Tensor"""
    return _pad(self, pad, _PAD_MODES[mode], value)


@aten("constant_pad_nd.default")
def aten_constant_pad_nd(self, pad, value=0):
    """constant_pad_nd(Tensor self, SymInt[] pad, Scalar value=0) -> Tensor"""
    return _pad(self, pad, "constant", value)


@aten("pad.default")
def aten_pad(self, pad, mode="constant", value=None):
    """pad(Tensor self, SymInt[] pad, str mode="constant", float? value=None) -> Tensor"""
    return _pad(self, pad, mode, value)


@aten("reflection_pad1d.default", "reflection_pad2d.default", "reflection_pad3d.default")
def aten_reflection_pad(self, padding):
    """reflection_pad2d(Tensor self, SymInt[4] padding) -> Tensor"""
    return _pad(self, padding, "reflect")


@aten("replication_pad1d.default", "replication_pad2d.default", "replication_pad3d.default")
def aten_replication_pad(self, padding):
    """replication_pad2d(Tensor self, SymInt[4] padding) -> Tensor"""
    return _pad(self, padding, "replicate")
