"""A project's own ops, as users write them: `torch.library` custom ops and their JAX lowerings.

Importing this module defines the ops (namespace `jaxport_test`) and registers the lowerings,
as a user's module would; `jaxport.emit` copies or imports them from here.
"""

from __future__ import annotations

import jax.numpy as jnp
import torch

import jaxport
from tests.support import numeric

#: How often `scale_shift_lowering` has run (traced or eager): proves which implementation ran.
CALLS = {"scale_shift": 0}


@torch.library.custom_op("jaxport_test::scale_shift", mutates_args=())
def scale_shift(x: torch.Tensor, scale: float, shift: torch.Tensor) -> torch.Tensor:
    """A fused kernel as a project would ship one (here in plain torch)."""
    return x * scale + shift


@scale_shift.register_fake
def _(x, scale, shift):
    return torch.empty_like(x)


def _scale_shift_backward(ctx, grad):
    return grad * ctx.scale, None, grad.sum_to_size(ctx.shift_shape)


def _scale_shift_context(ctx, inputs, output):
    _, ctx.scale, shift = inputs
    ctx.shift_shape = shift.shape


scale_shift.register_autograd(_scale_shift_backward, setup_context=_scale_shift_context)


def _affine(x, scale, shift):
    return x * scale + shift


@jaxport.register_lowering("jaxport_test::scale_shift")
def scale_shift_lowering(x, scale, shift):
    """scale_shift(Tensor x, float scale, Tensor shift) -> Tensor"""
    CALLS["scale_shift"] += 1
    return _affine(x, jnp.asarray(scale, x.dtype), shift)


@torch.library.custom_op("jaxport_test::softsign", mutates_args=())
def softsign(x: torch.Tensor) -> torch.Tensor:
    return x / (1 + x.abs())


@softsign.register_fake
def _(x):
    return torch.empty_like(x)


@jaxport.register_lowering("jaxport_test::softsign")
def softsign_lowering(x):
    """softsign(Tensor x) -> Tensor; reads `numeric`, which generated code cannot copy: it is imported."""
    assert numeric is not None
    return x / (1 + jnp.abs(x))


@jaxport.register_lowering(("com.example", "ScaleShift"))
def scale_shift_onnx(x, shift, *, scale=1.0):
    """com.example ScaleShift(x, shift; scale: float = 1.0): x * scale + shift."""
    return x * jnp.asarray(scale, x.dtype) + shift


def gelu_sign_flipped(self, *, approximate="none"):
    """A deliberately wrong GELU, to override jaxport's own inside a scope."""
    return -jnp.asarray(self) * 0.5 * (1 + jnp.tanh(self))


def relu_times_two(x):
    """A replacement for ONNX Relu, to override jaxport's own inside a scope."""
    return jnp.maximum(x, 0) * 2
