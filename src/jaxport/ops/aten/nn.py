"""ATen lowerings: nn layers that fit no other family: bilinear and its core form `_trilinear`,
linear's backward, and the fused dropout of CUDA's older dropout path (`_fused_dropout` and its
backward `_masked_scale`, with uint8 masks); the last three are GPU-only ops with no CPU kernel.

`_fused_dropout` draws which elements to keep from the interpreter's key, as the other random
ops do: PyTorch's distribution, not CUDA's Philox stream.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ..registry import aten
from ._promotion import opmath_type


@aten("_fused_dropout.default", random=True)
def aten__fused_dropout(self, p, generator=None, *, key):
    """_fused_dropout(Tensor self, float p, Generator? generator=None) -> (Tensor, Tensor)

    `p` is the probability of keeping an element: (self * mask / p, mask), the mask uint8. As in
    CUDA's kernel, the product is `self * mask * (1 / p)` in opmath, so p=0 gives NaN."""
    compute = opmath_type(self.dtype)
    keep = jax.random.bernoulli(key, p, self.shape)
    scale = math.inf if p == 0 else 1.0 / p
    out = self.astype(compute) * keep.astype(compute) * np.asarray(scale, compute)
    return out.astype(self.dtype), keep.astype(np.uint8)


@aten("_masked_scale.default")
def aten__masked_scale(self, mask, scale):
    """_masked_scale(Tensor self, Tensor mask, float scale) -> Tensor; mask * self * scale in opmath,
    the mask broadcast to self's shape (`_fused_dropout`'s backward)."""
    compute = opmath_type(self.dtype)
    out = mask.astype(compute) * self.astype(compute) * np.asarray(scale, compute)
    return jnp.broadcast_to(out, self.shape).astype(self.dtype)


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


@aten("linear_backward.default")
def aten_linear_backward(self, grad_output, weight, output_mask):
    """linear_backward(Tensor self, Tensor grad_output, Tensor weight, bool[3] output_mask) -> (Tensor, Tensor, Tensor)

    Products accumulate in opmath; every gradient in grad_output's dtype, and the weight's and
    bias's both whenever either is asked for, as the meta kernel records them."""
    dtype = np.dtype(grad_output.dtype)
    compute = opmath_type(dtype)
    grad_input = grad_weight = grad_bias = None
    if output_mask[0]:
        last = grad_output.ndim - 1
        grad_input = lax.dot_general(grad_output, weight.astype(dtype), (((last,), (0,)), ((), ())),
                                     preferred_element_type=compute).astype(dtype)
    if output_mask[1] or output_mask[2]:
        batch = tuple(range(grad_output.ndim - 1))
        grad_weight = lax.dot_general(grad_output, self.astype(dtype), ((batch, batch), ((), ())),
                                      preferred_element_type=compute).astype(dtype)
        grad_bias = jnp.sum(grad_output.astype(compute), axis=batch).astype(dtype)
    return grad_input, grad_weight, grad_bias
