"""ATen lowerings: softmax and log-softmax, their backward ops, and `_safe_softmax`.

float16/bfloat16 inputs are computed in float32 (`opmath_type`) and rounded once, or returned
in float32 where `half_to_float` asks. `safe_softmax` (rows of -inf give zeros, with zero
gradient) serves attention too.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ..registry import aten
from ._promotion import cast, opmath_type
from .reduction import _on_axis


def _softmax(fn, self, dim, out_dtype):
    x = self.astype(opmath_type(out_dtype))
    return _on_axis(lambda v, axis: fn(v, axis=axis), x, dim).astype(out_dtype)


def _softmax_grad_dtype(grad, input_dtype):
    """The grad's dtype, except that a float32 grad of a float16 input gives float16 (PyTorch's meta)."""
    if grad.dtype == np.float32 and np.dtype(input_dtype) == np.float16:
        return np.dtype(np.float16)
    return np.dtype(grad.dtype)


def _softmax_grad_axis(x, dim):
    return dim % x.ndim if x.ndim else None


@aten("_log_softmax.default")
def aten__log_softmax(self, dim, half_to_float):
    """_log_softmax(Tensor self, int dim, bool half_to_float) -> Tensor"""
    out_dtype = np.dtype(np.float32) if half_to_float else np.dtype(self.dtype)
    return _softmax(jax.nn.log_softmax, self, dim, out_dtype)


@aten("_log_softmax_backward_data.default")
def aten__log_softmax_backward_data(grad_output, output, dim, input_dtype):
    """_log_softmax_backward_data(Tensor grad_output, Tensor output, int dim, ScalarType input_dtype) -> Tensor"""
    out_dtype, axis = _softmax_grad_dtype(grad_output, input_dtype), _softmax_grad_axis(output, dim)
    grad, output = (t.astype(opmath_type(out_dtype)) for t in (grad_output, output))
    return (grad - jnp.exp(output) * jnp.sum(grad, axis=axis, keepdims=True)).astype(out_dtype)


@aten("_softmax.default")
def aten__softmax(self, dim, half_to_float):
    """_softmax(Tensor self, int dim, bool half_to_float) -> Tensor"""
    out_dtype = np.dtype(np.float32) if half_to_float else np.dtype(self.dtype)
    return _softmax(jax.nn.softmax, self, dim, out_dtype)


@aten("_safe_softmax.default")
def aten__safe_softmax(self, dim, dtype=None):
    """_safe_softmax(Tensor self, int dim, ScalarType? dtype=None) -> Tensor"""
    out_dtype = np.dtype(dtype) if dtype is not None else np.dtype(self.dtype)
    x = self.astype(opmath_type(out_dtype))
    # A row of -inf only softmaxes to zeros, not NaN; its scores are neutralised first so that
    # its gradient is zero too (PyTorch's backward runs on the zero output), not 0 * NaN.
    axis = dim % x.ndim if x.ndim else None
    return safe_softmax(x, axis)[0].astype(out_dtype)


def safe_softmax(x, axis):
    """(softmax of x over `axis`, dead rows): a row whose every entry is -inf (or that is empty)
    is dead and softmaxes to zeros, as PyTorch's `_safe_softmax` and attention kernels give,
    not NaN, with zero gradient. One pass for the row maxima, one for the sums: the rows
    found dead by their maximum, not by a pass of their own (attention's scores are the
    largest arrays of a long sequence: Whisper's encoder, 8 x 1500 x 1500 per layer)."""
    top = jnp.max(x, axis=axis, keepdims=True, initial=-jnp.inf)
    dead = top == -jnp.inf
    # A dead row shifted by 0: exp(-inf) = 0 everywhere, summed to 0 and divided by 1.
    shifted = jnp.exp(x - lax.stop_gradient(jnp.where(dead, jnp.zeros((), x.dtype), top)))
    total = jnp.sum(shifted, axis=axis, keepdims=True)
    return shifted / jnp.where(dead, jnp.ones((), x.dtype), total), dead


@aten("_softmax_backward_data.default")
def aten__softmax_backward_data(grad_output, output, dim, input_dtype):
    """_softmax_backward_data(Tensor grad_output, Tensor output, int dim, ScalarType input_dtype) -> Tensor"""
    out_dtype, axis = _softmax_grad_dtype(grad_output, input_dtype), _softmax_grad_axis(output, dim)
    grad, output = (t.astype(opmath_type(out_dtype)) for t in (grad_output, output))
    return (output * (grad - jnp.sum(grad * output, axis=axis, keepdims=True))).astype(out_dtype)


@aten("log_softmax.int")
def aten_log_softmax(self, dim, dtype=None):
    """log_softmax.int(Tensor self, int dim, ScalarType? dtype=None) -> Tensor"""
    out_dtype = np.dtype(dtype) if dtype is not None else np.dtype(self.dtype)
    return _softmax(jax.nn.log_softmax, cast(self, out_dtype), dim, out_dtype)


@aten("softmax.int")
def aten_softmax(self, dim, dtype=None):
    """softmax.int(Tensor self, int dim, ScalarType? dtype=None) -> Tensor"""
    out_dtype = np.dtype(dtype) if dtype is not None else np.dtype(self.dtype)
    return _softmax(jax.nn.softmax, cast(self, out_dtype), dim, out_dtype)
