"""ATen lowerings: `torch.fft` transforms.

Integer and bool inputs are transformed as the default float dtype, like PyTorch; real
outputs have the real dtype of the (complex) transform precision. The `_fft_*` core ops
take LAPACK-free `normalization` codes: 0 none, 1 by 1/sqrt(n), 2 by 1/n, where n is the
product of the signal sizes over the transformed dims.
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np

from ..registry import aten
from ._promotion import canonical, canonical_dim

_SWAPPED = {None: "forward", "backward": "forward", "forward": "backward", "ortho": "ortho"}


def _complex(x):
    """x as the complex dtype PyTorch transforms it in."""
    if jnp.iscomplexobj(x):
        return x
    if not jnp.issubdtype(x.dtype, jnp.floating) or x.dtype in (jnp.float16, jnp.bfloat16):
        x = x.astype(np.float32)
    return x.astype(canonical(np.complex128) if x.dtype == np.float64 else np.complex64)


def _real_dtype(c):
    return np.float64 if c.dtype == np.complex128 else np.float32


def _scale(out, sizes, normalization):
    n = math.prod(sizes)
    if normalization == 0 or n == 0:
        return out
    factor = 1 / math.sqrt(n) if normalization == 1 else 1 / n
    return out * jnp.asarray(factor, out.dtype)


def _c2r_axes(x, s, dim):
    """Resolve torch's (s, dim) of an n-dim c2r transform: (sizes, axes); -1 in s means default."""
    if dim is None:
        dim = range(-len(s), 0) if s is not None else range(x.ndim)
    axes = [canonical_dim(d, x.ndim) for d in dim]
    sizes = []
    for i, a in enumerate(axes):
        default = 2 * (x.shape[a] - 1) if i == len(axes) - 1 else x.shape[a]
        sizes.append(default if s is None or s[i] == -1 else int(s[i]))
    return sizes, axes


def _irfftn(x, s, dim, norm):
    c = _complex(x)
    sizes, axes = _c2r_axes(c, s, dim)
    out = jnp.fft.irfftn(c, s=sizes, axes=axes, norm=norm or "backward")
    return out.astype(_real_dtype(c))


def _hfftn(x, s, dim, norm):
    # A Hermitian-input forward transform is the inverse real transform of the conjugate
    # with the normalization swapped.
    return _irfftn(jnp.conj(_complex(x)), s, dim, _SWAPPED[norm])


@aten("_fft_c2c.default")
def aten__fft_c2c(self, dim, normalization, forward):
    """_fft_c2c(Tensor self, SymInt[] dim, int normalization, bool forward) -> Tensor"""
    axes = [canonical_dim(d, self.ndim) for d in dim]
    fn = jnp.fft.fftn if forward else jnp.fft.ifftn
    out = fn(self, axes=axes, norm="backward" if forward else "forward") if axes else self
    return _scale(out, [self.shape[a] for a in axes], normalization).astype(self.dtype)


@aten("_fft_c2r.default")
def aten__fft_c2r(self, dim, normalization, last_dim_size):
    """_fft_c2r(Tensor self, int[] dim, int normalization, SymInt last_dim_size) -> Tensor"""
    axes = [canonical_dim(d, self.ndim) for d in dim]
    sizes = [self.shape[a] for a in axes[:-1]] + [int(last_dim_size)]
    out = jnp.fft.irfftn(self, s=sizes, axes=axes, norm="forward")
    return _scale(out, sizes, normalization).astype(_real_dtype(self))


@aten("_fft_r2c.default")
def aten__fft_r2c(self, dim, normalization, onesided):
    """_fft_r2c(Tensor self, int[] dim, int normalization, bool onesided) -> Tensor"""
    axes = [canonical_dim(d, self.ndim) for d in dim]
    c = _complex(self)
    out = (jnp.fft.rfftn(self.astype(_real_dtype(c)), axes=axes) if onesided
           else jnp.fft.fftn(c, axes=axes))
    return _scale(out, [self.shape[a] for a in axes], normalization).astype(c.dtype)


@aten("fft_hfft.default")
def aten_fft_hfft(self, n=None, dim=-1, norm=None):
    """fft_hfft(Tensor self, SymInt? n=None, int dim=-1, str? norm=None) -> Tensor"""
    return _hfftn(self, None if n is None else [n], [dim], norm)


@aten("fft_hfft2.default", "fft_hfftn.default")
def aten_fft_hfftn(self, s=None, dim=None, norm=None):
    """fft_hfftn(Tensor self, SymInt[1]? s=None, int[1]? dim=None, str? norm=None) -> Tensor"""
    return _hfftn(self, s, dim, norm)


@aten("fft_ihfftn.default")
def aten_fft_ihfftn(self, s=None, dim=None, norm=None):
    """fft_ihfftn(Tensor self, SymInt[1]? s=None, int[1]? dim=None, str? norm=None) -> Tensor"""
    # The inverse of a Hermitian-output transform: the conjugate of the real forward transform
    # with the normalization swapped (the last dim halved, as rfftn's).
    c = _complex(self)
    x = self.astype(_real_dtype(c))
    if dim is None:
        dim = range(-len(s), 0) if s is not None else range(x.ndim)
    axes = [canonical_dim(d, x.ndim) for d in dim]
    sizes = [x.shape[a] if s is None or s[i] == -1 else int(s[i]) for i, a in enumerate(axes)]
    return jnp.conj(jnp.fft.rfftn(x, s=sizes, axes=axes, norm=_SWAPPED[norm])).astype(c.dtype)


@aten("fft_ihfft2.default")
def aten_fft_ihfft2(self, s=None, dim=(-2, -1), norm=None):
    """fft_ihfft2(Tensor self, SymInt[1]? s=None, int[1] dim=[-2,-1], str? norm=None) -> Tensor"""
    return aten_fft_ihfftn(self, s, dim, norm)


@aten("fft_irfft.default")
def aten_fft_irfft(self, n=None, dim=-1, norm=None):
    """fft_irfft(Tensor self, SymInt? n=None, int dim=-1, str? norm=None) -> Tensor"""
    return _irfftn(self, None if n is None else [n], [dim], norm)


@aten("fft_irfft2.default", "fft_irfftn.default")
def aten_fft_irfftn(self, s=None, dim=None, norm=None):
    """fft_irfftn(Tensor self, SymInt[1]? s=None, int[1]? dim=None, str? norm=None) -> Tensor"""
    return _irfftn(self, s, dim, norm)
