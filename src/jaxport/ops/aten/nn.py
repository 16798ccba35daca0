"""ATen lowerings: nn layers that fit no other family (bilinear and its core form, _trilinear)."""

from __future__ import annotations

import jax.numpy as jnp
from jax import lax

from ..registry import aten
from ._promotion import opmath_type


@aten("_trilinear.default")
def aten__trilinear(i1, i2, i3, expand1, expand2, expand3, sumdim, unroll_dim=1):
    """_trilinear(Tensor i1, Tensor i2, Tensor i3, int[] expand1, int[] expand2, int[] expand3, int[] sumdim, int unroll_dim=1) -> Tensor"""
    dtype = i1.dtype
    compute = opmath_type(dtype)
    ops = []
    for t, expand in ((i1, expand1), (i2, expand2), (i3, expand3)):
        t = t.astype(compute)
        for d in sorted(expand):
            t = jnp.expand_dims(t, d)
        ops.append(t)
    out = ops[0] * ops[1] * ops[2]
    return jnp.sum(out, axis=tuple(sumdim)).astype(dtype)


@aten("bilinear.default")
def aten_bilinear(input1, input2, weight, bias=None):
    """bilinear(Tensor input1, Tensor input2, Tensor weight, Tensor? bias=None) -> Tensor"""
    dtype = input1.dtype
    compute = opmath_type(dtype)
    out = jnp.einsum(
        "...i,oij,...j->...o",
        input1.astype(compute),
        weight.astype(compute),
        input2.astype(compute),
        precision=lax.Precision.HIGHEST,
    )
    if bias is not None:
        out = out + bias.astype(compute)
    return out.astype(dtype)
