"""ATen lowerings: batch, layer, group, instance and RMS normalisation, their backward, and weight
normalisation; cuDNN's and MIOpen's batch norm kernels (GPU-only ops) with the same math.

Statistics are computed in float32 for float16/bfloat16 inputs, as PyTorch's CPU
kernels do. The saved mean/rstd outputs differ by device, so the ops that return them
take what the graph records (`recorded=`, see `registry.aten`): BatchNorm outside
training saves none on the CPU and one per channel elsewhere, and off the CPU they are
float32 for half inputs. Without a graph (the eager frontend) they follow the CPU kernel:
float32 only when the op mixes a reduced-precision input with float32 parameters, else
the input's dtype.
Variances are biased (divide by n); running variances are updated unbiased.
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np
from jax import lax

from ..registry import aten
from ._promotion import opmath_type


def _stat_dtype(input, *params):
    """The dtype PyTorch gives saved statistics: opmath when params are wider than the input."""
    compute = opmath_type(input.dtype)
    if any(p is not None and p.dtype == compute and p.dtype != input.dtype for p in params):
        return compute
    return np.dtype(input.dtype)


def _recorded_stat_dtype(recorded, input, *params):
    """The saved statistics' dtype: as the graph records it (float32 for half inputs off the
    CPU, as the meta kernels say), else as PyTorch's CPU kernel gives it."""
    if recorded is not None and recorded[1] is not None:
        return recorded[1][1]
    return _stat_dtype(input, *params)


def _moments(x, axes):
    mean = jnp.mean(x, axis=axes, keepdims=True)
    var = jnp.mean(jnp.square(x - mean), axis=axes, keepdims=True)
    return mean, var


def _channel(v, ndim, compute):
    """A per-channel vector shaped to broadcast against an N C ... input."""
    return v.astype(compute).reshape((-1,) + (1,) * max(ndim - 2, 0))


def _channel_statistics(recorded) -> bool:
    """Whether the graph records BatchNorm's saved statistics one per channel outside training,
    as every device but the CPU does (PyTorch's CPU kernel saves none: empty tensors)."""
    return recorded is not None and recorded[1] is not None and recorded[1][0] != (0,)


def _reserve(recorded):
    """The cuDNN reserve space of the `_batch_norm_*_update` ops: only cuDNN's backward reads it,
    so zeros of the size the graph records (none on the CPU)."""
    size = recorded[3][0] if recorded is not None and recorded[3] is not None else (0,)
    return jnp.zeros(tuple(0 if d is None else d for d in size), jnp.uint8)


def _batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps, recorded=None):
    """(out, save_mean, save_invstd, new_running_mean, new_running_var); `recorded` is what the
    graph records of the op's outputs (see `registry.aten`), None for the CPU kernel's."""
    compute = opmath_type(input.dtype)
    x = input.astype(compute)
    channels = _channel_statistics(recorded)
    stat_dtype = _recorded_stat_dtype(recorded, input, weight, bias, running_mean, running_var)
    if input.size == 0 and not channels:  # PyTorch returns the empty input and leaves the statistics alone
        empty = jnp.zeros((0,), stat_dtype)
        return input, empty, empty, running_mean, running_var
    axes = (0,) + tuple(range(2, input.ndim))
    new_mean, new_var = running_mean, running_var
    if training:
        mean, var = _moments(x, axes)
        mean, var = mean.reshape(-1), var.reshape(-1)
        invstd = lax.rsqrt(var + eps)
        n = input.size // max(input.shape[1], 1)
        if running_mean is not None:
            # The functional ops return updated statistics in the promoted compute dtype
            # (float32 for half inputs); the in-place wrappers cast them back when copying.
            new_mean = (1 - momentum) * running_mean.astype(compute) + momentum * mean
            new_mean = new_mean.astype(np.promote_types(compute, running_mean.dtype))
        if running_var is not None:
            unbiased = var * (n / max(n - 1, 1)) if n > 1 else jnp.full_like(var, jnp.nan)
            new_var = (1 - momentum) * running_var.astype(compute) + momentum * unbiased
            new_var = new_var.astype(np.promote_types(compute, running_var.dtype))
        save_mean, save_invstd = mean.astype(stat_dtype), invstd.astype(stat_dtype)
    else:
        mean, invstd = running_mean.astype(compute), lax.rsqrt(running_var.astype(compute) + eps)
        if channels:  # as CUDA's kernel (and PyTorch's decomposition off the CPU) saves them
            save_mean, save_invstd = mean.astype(stat_dtype), invstd.astype(stat_dtype)
        else:
            save_mean = save_invstd = jnp.zeros((0,), stat_dtype)
    # As PyTorch's CPU kernel (batch_norm_cpu_collect_linear_and_constant_terms): per channel
    # alpha = invstd * weight and beta = bias - mean * alpha, then x * alpha + beta, two
    # operations per element with its rounding (and its -0.0: beta is 0 - mean * alpha).
    alpha = invstd if weight is None else invstd * weight.astype(compute)
    beta = (jnp.zeros_like(alpha) if bias is None else bias.astype(compute)) - mean * alpha
    out = x * _channel(alpha, input.ndim, compute) + _channel(beta, input.ndim, compute)
    return out.astype(input.dtype), save_mean, save_invstd, new_mean, new_var


def _batch_norm_backward(grad_out, input, weight, save_mean, save_invstd, eps):
    """Training-mode batch norm's (grad_input, grad_weight, grad_bias), from the batch mean and
    inverse standard deviation the forward saved (recomputed from `input` with `eps` when it saved
    none, as cuDNN's backward does), in opmath precision; the weight's gradients in its dtype."""
    compute = opmath_type(input.dtype)
    axes = (0,) + tuple(range(2, input.ndim))
    x = input.astype(compute)
    if save_mean is None or save_invstd is None:
        mean, var = _moments(x, axes)
        mean, invstd = mean.reshape(-1), lax.rsqrt(var.reshape(-1) + eps)
    else:
        mean, invstd = save_mean.astype(compute), save_invstd.astype(compute)
    g = grad_out.astype(compute)
    xhat = (x - _channel(mean, input.ndim, compute)) * _channel(invstd, input.ndim, compute)
    grad_bias = jnp.sum(g, axis=axes)
    grad_weight = jnp.sum(g * xhat, axis=axes)
    n = max(input.size // max(input.shape[1], 1), 1)
    scale = invstd if weight is None else invstd * weight.astype(compute)
    grad_input = _channel(scale, input.ndim, compute) * (
        g - _channel(grad_bias / n, input.ndim, compute) - xhat * _channel(grad_weight / n, input.ndim, compute)
    )
    wdtype = input.dtype if weight is None else weight.dtype
    return grad_input.astype(input.dtype), grad_weight.astype(wdtype), grad_bias.astype(wdtype)


def _kernel_batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps, recorded,
                       stat_dtype):
    """(out, save_mean, save_invstd) of cuDNN's and MIOpen's batch norm: the saved statistics one
    per channel in training and empty outside it, in the dtype `recorded` gives (else the meta
    kernel's: `stat_dtype` in training, the weight's outside it). These kernels also update the
    running statistics in place, which their schemas do not declare, so no graph sees it: they
    are left as they are."""
    if recorded is None:
        recorded = (None, ((input.shape[1],), stat_dtype) if training else ((0,), weight.dtype))
    return _batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps, recorded)[:3]


def _group_norm(input, weight, bias, n, c, group, eps):
    """(out, mean[N, group], rstd[N, group]) in compute precision."""
    compute = opmath_type(input.dtype)
    # The group size spelled out: with an empty batch, -1 cannot be inferred.
    x = input.astype(compute).reshape(n, group, c // group * math.prod(input.shape[2:]))
    mean, var = _moments(x, (2,))
    rstd = lax.rsqrt(var + eps)
    out = ((x - mean) * rstd).reshape(input.shape)
    if weight is not None:
        out = out * _channel(weight, input.ndim, compute)
    if bias is not None:
        out = out + _channel(bias, input.ndim, compute)
    return out, mean[..., 0], rstd[..., 0]


def _layer_norm(input, normalized_shape, weight, bias, eps):
    """(out, mean, rstd) in compute precision; stats keep the normalised dims as size 1."""
    compute = opmath_type(input.dtype)
    axes = tuple(range(input.ndim - len(normalized_shape), input.ndim))
    x = input.astype(compute)
    mean, var = _moments(x, axes)
    rstd = lax.rsqrt(var + eps)
    out = (x - mean) * rstd
    if weight is not None:
        out = out * weight.astype(compute)
    if bias is not None:
        out = out + bias.astype(compute)
    return out, mean, rstd


@aten("_batch_norm_no_update.default", recorded=True)
def aten__batch_norm_no_update(input, weight, bias, running_mean, running_var, momentum, eps, *, recorded=None):
    """_batch_norm_no_update(Tensor input, Tensor? weight, Tensor? bias, Tensor? running_mean, Tensor? running_var, float momentum, float eps) -> (Tensor, Tensor, Tensor, Tensor)"""
    training = running_mean is None or running_var is None
    out, mean, invstd, _, _ = _batch_norm(
        input, weight, bias, running_mean, running_var, training, momentum, eps, recorded
    )
    return out, mean, invstd, _reserve(recorded)


@aten("_batch_norm_with_update_functional.default", recorded=True)
def aten__batch_norm_with_update_functional(
    input, weight, bias, running_mean, running_var, momentum, eps, *, recorded=None
):
    """_batch_norm_with_update_functional(Tensor input, Tensor? weight, Tensor? bias, Tensor running_mean, Tensor running_var, float momentum, float eps) -> (Tensor, Tensor, Tensor, Tensor, Tensor running_mean_out, Tensor running_var_out)"""
    out, mean, invstd, new_mean, new_var = _batch_norm(
        input, weight, bias, running_mean, running_var, True, momentum, eps, recorded
    )
    return out, mean, invstd, _reserve(recorded), new_mean, new_var


@aten("_fused_rms_norm.default")
def aten__fused_rms_norm(input, normalized_shape, weight, eps):
    """_fused_rms_norm(Tensor input, int[] normalized_shape, Tensor? weight, float? eps) -> (Tensor, Tensor)"""
    compute = opmath_type(input.dtype)
    if eps is None:
        eps = float(jnp.finfo(compute).eps)  # the opmath type's, as PyTorch's kernels take it
    axes = tuple(range(input.ndim - len(normalized_shape), input.ndim))
    x = input.astype(compute)
    rstd = lax.rsqrt(jnp.mean(jnp.square(x), axis=axes, keepdims=True) + eps)
    out = x * rstd
    if weight is not None:
        out = out * weight.astype(compute)
    return out.astype(input.dtype), rstd


@aten("_fused_rms_norm_backward.default")
def aten__fused_rms_norm_backward(grad_out, input, normalized_shape, rstd, weight, output_mask):
    """_fused_rms_norm_backward(Tensor grad_out, Tensor input, int[] normalized_shape, Tensor rstd, Tensor? weight, bool[2] output_mask) -> (Tensor, Tensor)"""
    compute = opmath_type(input.dtype)
    outer = input.ndim - len(normalized_shape)
    axes = tuple(range(outer, input.ndim))
    x = input.astype(compute)
    g = grad_out.astype(compute)
    rstd = rstd.astype(compute).reshape(input.shape[:outer] + (1,) * len(normalized_shape))
    xhat = x * rstd
    gx = g if weight is None else g * weight.astype(compute)
    grad_input = grad_weight = None
    if output_mask[0]:
        grad_input = ((gx - xhat * jnp.mean(gx * xhat, axis=axes, keepdims=True)) * rstd).astype(input.dtype)
    if output_mask[1] and weight is not None:
        # The meta kernel (PyTorch's decomposition) gives the weight's gradient the input's dtype.
        grad_weight = jnp.sum(g * xhat, axis=tuple(range(outer))).astype(input.dtype)
    return grad_input, grad_weight


@aten("_native_batch_norm_legit.default", "native_batch_norm.default", recorded=True)
def aten__native_batch_norm_legit(
    input, weight, bias, running_mean, running_var, training, momentum, eps, *, recorded=None
):
    """_native_batch_norm_legit(Tensor input, Tensor? weight, Tensor? bias, Tensor(a!) running_mean, Tensor(b!) running_var, bool training, float momentum, float eps) -> (Tensor, Tensor, Tensor)"""
    return _batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps, recorded)[:3]


@aten("_native_batch_norm_legit_functional.default", recorded=True)
def aten__native_batch_norm_legit_functional(
    input, weight, bias, running_mean, running_var, training, momentum, eps, *, recorded=None
):
    """_native_batch_norm_legit_functional(Tensor input, Tensor? weight, Tensor? bias, Tensor running_mean, Tensor running_var, bool training, float momentum, float eps) -> (Tensor, Tensor, Tensor, Tensor running_mean_out, Tensor running_var_out)"""
    return _batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps, recorded)


@aten("_native_batch_norm_legit.no_stats", recorded=True)
def aten__native_batch_norm_legit_no_stats(input, weight, bias, training, momentum, eps, *, recorded=None):
    """_native_batch_norm_legit.no_stats(Tensor input, Tensor? weight, Tensor? bias, bool training, float momentum, float eps) -> (Tensor, Tensor, Tensor)"""
    return _batch_norm(input, weight, bias, None, None, True, momentum, eps, recorded)[:3]


@aten("_native_batch_norm_legit_no_training.default", recorded=True)
def aten__native_batch_norm_legit_no_training(
    input, weight, bias, running_mean, running_var, momentum, eps, *, recorded=None
):
    """_native_batch_norm_legit_no_training(Tensor input, Tensor? weight, Tensor? bias, Tensor running_mean, Tensor running_var, float momentum, float eps) -> (Tensor, Tensor, Tensor)"""
    return _batch_norm(input, weight, bias, running_mean, running_var, False, momentum, eps, recorded)[:3]


@aten("_weight_norm.default")
def aten__weight_norm(v, g, dim=0):
    """_weight_norm(Tensor v, Tensor g, int dim=0) -> Tensor; v * g / ||v||, the norm over every
    dim but `dim` (over all of v when dim is -1, as PyTorch's norm_except_dim takes it)."""
    compute = opmath_type(v.dtype)
    x = v.astype(compute)
    if dim == -1:
        norm = jnp.sqrt(jnp.sum(x * x))
    else:
        dim = dim % max(v.ndim, 1)
        axes = tuple(a for a in range(v.ndim) if a != dim)
        norm = jnp.sqrt(jnp.sum(x * x, axis=axes, keepdims=True))
    return (x * (g.astype(compute) / norm)).astype(jnp.result_type(v, g))


@aten("batch_norm.default")
def aten_batch_norm(
    input, weight, bias, running_mean, running_var, training, momentum, eps, cudnn_enabled
):
    """batch_norm(Tensor input, Tensor? weight, Tensor? bias, Tensor? running_mean, Tensor? running_var, bool training, float momentum, float eps, bool cudnn_enabled) -> Tensor"""
    training = training or running_mean is None or running_var is None
    return _batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps)[0]


@aten("cudnn_batch_norm.default", recorded=True)
def aten_cudnn_batch_norm(
    input, weight, bias, running_mean, running_var, training, exponential_average_factor, epsilon, *, recorded=None
):
    """cudnn_batch_norm(Tensor input, Tensor weight, Tensor? bias, Tensor? running_mean, Tensor? running_var, bool training, float exponential_average_factor, float epsilon) -> (Tensor, Tensor, Tensor, Tensor)

    (out, save_mean, save_invstd, reserve): cuDNN saves the inverse standard deviation, which its
    backward reads as `save_var`; the reserve space only that backward reads is zeros of the
    recorded size."""
    out, mean, invstd = _kernel_batch_norm(
        input, weight, bias, running_mean, running_var, training, exponential_average_factor, epsilon, recorded,
        opmath_type(input.dtype),
    )
    return out, mean, invstd, _reserve(recorded)


@aten("cudnn_batch_norm_backward.default")
def aten_cudnn_batch_norm_backward(
    input, grad_output, weight, running_mean, running_var, save_mean, save_var, epsilon, reserveSpace
):
    """cudnn_batch_norm_backward(Tensor input, Tensor grad_output, Tensor weight, Tensor? running_mean, Tensor? running_var, Tensor? save_mean, Tensor? save_var, float epsilon, Tensor reserveSpace) -> (Tensor, Tensor, Tensor)

    Always training mode (eval-mode BatchNorm differentiates through `native_batch_norm_backward`);
    `save_var` is the forward's saved inverse standard deviation."""
    return _batch_norm_backward(grad_output, input, weight, save_mean, save_var, epsilon)


@aten("group_norm.default")
def aten_group_norm(input, num_groups, weight=None, bias=None, eps=1e-05, cudnn_enabled=True):
    """group_norm(Tensor input, int num_groups, Tensor? weight=None, Tensor? bias=None, float eps=1.0000000000000001e-05, bool cudnn_enabled=True) -> Tensor"""
    n, c = input.shape[:2]
    return _group_norm(input, weight, bias, n, c, num_groups, eps)[0].astype(input.dtype)


@aten("instance_norm.default")
def aten_instance_norm(
    input, weight, bias, running_mean, running_var, use_input_stats, momentum, eps, cudnn_enabled
):
    """instance_norm(Tensor input, Tensor? weight, Tensor? bias, Tensor? running_mean, Tensor? running_var, bool use_input_stats, float momentum, float eps, bool cudnn_enabled) -> Tensor"""
    if not use_input_stats:
        return _batch_norm(input, weight, bias, running_mean, running_var, False, momentum, eps)[0]
    compute = opmath_type(input.dtype)
    axes = tuple(range(2, input.ndim))
    x = input.astype(compute)
    mean, var = _moments(x, axes)
    out = (x - mean) * lax.rsqrt(var + eps)
    if weight is not None:
        out = out * _channel(weight, input.ndim, compute)
    if bias is not None:
        out = out + _channel(bias, input.ndim, compute)
    return out.astype(input.dtype)


@aten("layer_norm.default")
def aten_layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-05, cudnn_enable=True):
    """layer_norm(Tensor input, SymInt[] normalized_shape, Tensor? weight=None, Tensor? bias=None, float eps=1.0000000000000001e-05, bool cudnn_enable=True) -> Tensor"""
    return _layer_norm(input, normalized_shape, weight, bias, eps)[0].astype(input.dtype)


@aten("miopen_batch_norm.default", recorded=True)
def aten_miopen_batch_norm(
    input, weight, bias, running_mean, running_var, training, exponential_average_factor, epsilon, *, recorded=None
):
    """miopen_batch_norm(Tensor input, Tensor weight, Tensor? bias, Tensor? running_mean, Tensor? running_var, bool training, float exponential_average_factor, float epsilon) -> (Tensor, Tensor, Tensor)

    (out, save_mean, save_invstd), the statistics in the weight's dtype, as MIOpen saves them."""
    return _kernel_batch_norm(
        input, weight, bias, running_mean, running_var, training, exponential_average_factor, epsilon, recorded,
        weight.dtype,
    )


@aten("miopen_batch_norm_backward.default")
def aten_miopen_batch_norm_backward(input, grad_output, weight, running_mean, running_var, save_mean, save_var, epsilon):
    """miopen_batch_norm_backward(Tensor input, Tensor grad_output, Tensor weight, Tensor? running_mean, Tensor? running_var, Tensor? save_mean, Tensor? save_var, float epsilon) -> (Tensor, Tensor, Tensor)

    Training mode, `save_var` the saved inverse standard deviation, as for cuDNN."""
    return _batch_norm_backward(grad_output, input, weight, save_mean, save_var, epsilon)


@aten("native_group_norm.default", recorded=True)
def aten_native_group_norm(input, weight, bias, N, C, HxW, group, eps, *, recorded=None):
    """native_group_norm(Tensor input, Tensor? weight, Tensor? bias, SymInt N, SymInt C, SymInt HxW, int group, float eps) -> (Tensor, Tensor, Tensor)"""
    out, mean, rstd = _group_norm(input, weight, bias, N, C, group, eps)
    stat_dtype = _recorded_stat_dtype(recorded, input, weight, bias)
    return out.astype(input.dtype), mean.astype(stat_dtype), rstd.astype(stat_dtype)


@aten("native_group_norm_backward.default")
def aten_native_group_norm_backward(
    grad_out, input, mean, rstd, weight, N, C, HxW, group, output_mask
):
    """native_group_norm_backward(Tensor grad_out, Tensor input, Tensor mean, Tensor rstd, Tensor? weight, SymInt N, SymInt C, SymInt HxW, int group, bool[3] output_mask) -> (Tensor, Tensor, Tensor)"""
    compute = opmath_type(input.dtype)
    g = grad_out.astype(compute)
    x = input.astype(compute).reshape(N, group, -1)
    xhat = ((x - mean.astype(compute)[..., None]) * rstd.astype(compute)[..., None]).reshape(
        N, C, -1
    )
    g3 = g.reshape(N, C, -1)
    grad_weight = jnp.sum(g3 * xhat, axis=(0, 2))
    grad_bias = jnp.sum(g3, axis=(0, 2))
    gx = g3 if weight is None else g3 * weight.astype(compute)[None, :, None]
    gx, xh = gx.reshape(N, group, -1), xhat.reshape(N, group, -1)
    grad_input = rstd.astype(compute)[..., None] * (
        gx - jnp.mean(gx, axis=2, keepdims=True) - xh * jnp.mean(gx * xh, axis=2, keepdims=True)
    )
    wdtype = input.dtype if weight is None else weight.dtype
    return (
        grad_input.reshape(input.shape).astype(input.dtype) if output_mask[0] else None,
        grad_weight.astype(wdtype) if output_mask[1] else None,
        grad_bias.astype(wdtype) if output_mask[2] else None,
    )


@aten("native_layer_norm.default", recorded=True)
def aten_native_layer_norm(input, normalized_shape, weight, bias, eps, *, recorded=None):
    """native_layer_norm(Tensor input, SymInt[] normalized_shape, Tensor? weight, Tensor? bias, float eps) -> (Tensor, Tensor, Tensor)"""
    out, mean, rstd = _layer_norm(input, normalized_shape, weight, bias, eps)
    stat_dtype = _recorded_stat_dtype(recorded, input, weight, bias)
    return out.astype(input.dtype), mean.astype(stat_dtype), rstd.astype(stat_dtype)


@aten("native_layer_norm_backward.default")
def aten_native_layer_norm_backward(
    grad_out, input, normalized_shape, mean, rstd, weight, bias, output_mask
):
    """native_layer_norm_backward(Tensor grad_out, Tensor input, SymInt[] normalized_shape, Tensor mean, Tensor rstd, Tensor? weight, Tensor? bias, bool[3] output_mask) -> (Tensor, Tensor, Tensor)"""
    compute = opmath_type(input.dtype)
    k = len(normalized_shape)
    axes = tuple(range(input.ndim - k, input.ndim))
    batch_axes = tuple(range(input.ndim - k))
    g = grad_out.astype(compute)
    rstd = rstd.astype(compute)
    xhat = (input.astype(compute) - mean.astype(compute)) * rstd
    gx = g if weight is None else g * weight.astype(compute)
    grad_input = rstd * (
        gx
        - jnp.mean(gx, axis=axes, keepdims=True)
        - xhat * jnp.mean(gx * xhat, axis=axes, keepdims=True)
    )
    grad_weight = jnp.sum(g * xhat, axis=batch_axes)
    grad_bias = jnp.sum(g, axis=batch_axes)
    return (
        grad_input.astype(input.dtype) if output_mask[0] else None,
        grad_weight.astype(weight.dtype) if output_mask[1] and weight is not None else None,
        grad_bias.astype(bias.dtype) if output_mask[2] and bias is not None else None,
    )


@aten("rms_norm.default")
def aten_rms_norm(input, normalized_shape, weight=None, eps=None):
    """rms_norm(Tensor input, SymInt[] normalized_shape, Tensor? weight=None, float? eps=None) -> Tensor"""
    compute = opmath_type(input.dtype)
    if eps is None:
        eps = float(jnp.finfo(compute).eps)  # the opmath type's, as PyTorch's kernels take it
    axes = tuple(range(input.ndim - len(normalized_shape), input.ndim))
    x = input.astype(compute)
    out = (x * lax.rsqrt(jnp.mean(jnp.square(x), axis=axes, keepdims=True) + eps)).astype(
        input.dtype
    )
    if weight is not None:
        dtype = jnp.promote_types(out.dtype, weight.dtype)
        out = (out.astype(compute) * weight.astype(compute)).astype(dtype)
    return out
