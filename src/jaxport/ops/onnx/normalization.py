"""ONNX normalizations: BatchNormalization, LayerNormalization, GroupNormalization, LRN, ...

Statistics are taken in float32 for float16/bfloat16 inputs (ONNX's `stash_type` 1) and in
the input's own precision for float32/float64; results come back in the input's dtype.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ..registry import onnx
from ._helpers import normalize_axis


def _compute_dtype(dtype, stash_type=1):
    dtype = np.dtype(dtype)
    if stash_type == 1 and dtype.itemsize < 4:
        return np.dtype(np.float32)
    return dtype


def _channel(v, ndim, compute):
    """A per-channel [C] parameter shaped to broadcast against NC<spatial>."""
    return v.astype(compute).reshape((-1,) + (1,) * (ndim - 2))


def _moments(x, axes):
    mean = jnp.mean(x, axis=axes, keepdims=True)
    var = jnp.mean(jnp.square(x - mean), axis=axes, keepdims=True)
    return mean, var


@onnx("BatchNormalization", since=1)
def batch_normalization_1(X, scale, B, mean, var, *, consumed_inputs=None, epsilon=1e-5,
                          is_test=0, momentum=0.9, spatial=1, output_count=1):
    """BatchNormalization-1/6/7/9(T X, T scale, T B, T mean, T var) -> (T Y, T mean, T var,
    T saved_mean, T saved_var); epsilon, is_test, momentum, spatial. One named output is
    inference; more (without is_test) train on the batch's statistics."""
    compute = _compute_dtype(X.dtype)
    x = X.astype(compute)
    if spatial:
        params = [_channel(v, X.ndim, compute) for v in (scale, B, mean, var)]
        axes = (0,) + tuple(range(2, X.ndim))
    else:
        # Per-activation statistics: parameters shaped like one sample, [C, D1, ...].
        params = [v.astype(compute).reshape(X.shape[1:]) for v in (scale, B, mean, var)]
        axes = (0,)
    s, b, m, v = params
    if output_count == 1 or is_test:
        Y = (x - m) / jnp.sqrt(v + epsilon) * s + b
        return Y.astype(X.dtype), mean, var, mean, var
    batch_mean, batch_var = _moments(x, axes)
    Y = (x - batch_mean) / jnp.sqrt(batch_var + epsilon) * s + b
    running_mean = m * momentum + batch_mean * (1 - momentum)
    running_var = v * momentum + batch_var * (1 - momentum)
    stats = (running_mean, running_var, batch_mean, batch_var)
    return (Y.astype(X.dtype),) + tuple(t.reshape(mean.shape).astype(X.dtype) for t in stats)


@onnx("BatchNormalization", since=14)
def batch_normalization(X, scale, B, input_mean, input_var, *, epsilon=1e-5, momentum=0.9,
                        training_mode=0):
    """BatchNormalization(T X, T1 scale, T1 B, T2 input_mean, T2 input_var) -> (T Y,
    T2 running_mean, T2 running_var); epsilon, momentum, training_mode."""
    compute = _compute_dtype(X.dtype)
    x = X.astype(compute)
    s, b, m, v = (_channel(t, X.ndim, compute) for t in (scale, B, input_mean, input_var))
    if not training_mode:
        Y = (x - m) / jnp.sqrt(v + epsilon) * s + b
        return Y.astype(X.dtype), input_mean, input_var
    batch_mean, batch_var = _moments(x, (0,) + tuple(range(2, X.ndim)))
    Y = (x - batch_mean) / jnp.sqrt(batch_var + epsilon) * s + b
    running_mean = (m * momentum + batch_mean * (1 - momentum)).reshape(-1)
    running_var = (v * momentum + batch_var * (1 - momentum)).reshape(-1)
    return (Y.astype(X.dtype), running_mean.astype(input_mean.dtype),
            running_var.astype(input_var.dtype))


@onnx("Dropout", since=1)
def dropout_1(data, *, consumed_inputs=None, is_test=0, ratio=0.5):
    """Dropout-1/6/7(T data) -> (T output, T mask); ratio, is_test. Inference: the identity
    and a mask of ones."""
    return data, jnp.ones(jnp.shape(data), data.dtype)


@onnx("Dropout", since=10)
def dropout_10(data, *, ratio=0.5):
    """Dropout-10(T data) -> (T output, bool mask); ratio. Inference: the identity and an
    all-true mask."""
    return data, jnp.ones(jnp.shape(data), jnp.bool_)


@onnx("Dropout", since=12, random=True)
def dropout(data, ratio=None, training_mode=None, *, seed=None, key=None):
    """Dropout(T data, T1? ratio, bool? training_mode) -> (T output, bool mask); seed.
    Draws a keep-mask with probability 1 - ratio and scales the kept values by
    1 / (1 - ratio) when training_mode is true; else the identity and an all-true mask."""
    if training_mode is None:
        return data, jnp.ones(jnp.shape(data), jnp.bool_)
    if seed is not None:
        key = jax.random.key(seed)
    elif key is None:
        key = jax.random.key(0)
    compute = _compute_dtype(data.dtype)
    ratio = jnp.asarray(0.5 if ratio is None else ratio).astype(compute).reshape(())
    training = jnp.asarray(training_mode).astype(jnp.bool_).reshape(())
    keep = jax.random.uniform(key, jnp.shape(data), compute) >= ratio
    mask = keep | ~training
    scale = jnp.where(training, 1 / (1 - ratio), jnp.ones((), compute))
    output = jnp.where(mask, data.astype(compute) * scale, jnp.zeros((), compute))
    return output.astype(data.dtype), mask


def _group_norm(X, scale, bias, num_groups, epsilon, compute, per_group):
    n, c = X.shape[:2]
    x = X.astype(compute).reshape((n, num_groups, -1))
    mean, var = _moments(x, (2,))
    y = ((x - mean) / jnp.sqrt(var + epsilon)).reshape(X.shape)
    scale, bias = scale.astype(compute), bias.astype(compute)
    if per_group:
        scale, bias = jnp.repeat(scale, c // num_groups), jnp.repeat(bias, c // num_groups)
    y = y * _channel(scale, X.ndim, compute) + _channel(bias, X.ndim, compute)
    return y.astype(X.dtype)


@onnx("GroupNormalization", since=18)
def group_normalization_18(X, scale, bias, *, epsilon=1e-5, num_groups=1):
    """GroupNormalization-18(T X, T scale, T bias) -> T Y; epsilon, num_groups. scale and
    bias hold one value per group."""
    return _group_norm(X, scale, bias, num_groups, epsilon, _compute_dtype(X.dtype), True)


@onnx("GroupNormalization", since=21)
def group_normalization(X, scale, bias, *, epsilon=1e-5, num_groups=1, stash_type=1):
    """GroupNormalization(T X, T scale, T bias) -> T Y; epsilon, num_groups, stash_type.
    scale and bias hold one value per channel."""
    compute = _compute_dtype(X.dtype, stash_type)
    return _group_norm(X, scale, bias, num_groups, epsilon, compute, False)


@onnx("InstanceNormalization", since=1)
def instance_normalization(input, scale, B, *, consumed_inputs=None, epsilon=1e-5):
    """InstanceNormalization(T input, T scale, T B) -> T output; epsilon."""
    compute = _compute_dtype(input.dtype)
    x = input.astype(compute)
    mean, var = _moments(x, tuple(range(2, input.ndim)))
    y = (x - mean) / jnp.sqrt(var + epsilon)
    y = y * _channel(scale, input.ndim, compute) + _channel(B, input.ndim, compute)
    return y.astype(input.dtype)


@onnx("LayerNormalization", since=17)
def layer_normalization(X, Scale, B=None, *, axis=-1, epsilon=1e-5, stash_type=1):
    """LayerNormalization(T X, T Scale, T? B) -> (T Y, U Mean, U InvStdDev); axis, epsilon,
    stash_type. Mean and InvStdDev keep the normalized dims as size 1."""
    compute = _compute_dtype(X.dtype, stash_type)
    stash = compute if stash_type == 1 else np.dtype(X.dtype)
    axes = tuple(range(normalize_axis(axis, X.ndim), X.ndim))
    x = X.astype(compute)
    mean, var = _moments(x, axes)
    inv_std = lax.rsqrt(var + epsilon)
    Y = (x - mean) * inv_std * Scale.astype(compute)
    if B is not None:
        Y = Y + B.astype(compute)
    return Y.astype(X.dtype), mean.astype(stash), inv_std.astype(stash)


@onnx("LpNormalization", since=1)
def lp_normalization(input, *, axis=-1, p=2):
    """LpNormalization(T input) -> T output; axis, p (1 or 2): input over its p-norm along
    axis; an all-zero slice becomes 0.0 (-0.0 included, as in onnxruntime)."""
    compute = _compute_dtype(input.dtype)
    x = input.astype(compute)
    if p == 1:
        norm = jnp.sum(jnp.abs(x), axis=axis, keepdims=True)
    else:
        norm = jnp.sqrt(jnp.sum(jnp.square(x), axis=axis, keepdims=True))
    zero = jnp.zeros((), compute)
    return jnp.where(norm == 0, zero, x / jnp.where(norm == 0, jnp.ones((), compute), norm)).astype(input.dtype)


@onnx("LRN", since=1)
def lrn(X, *, alpha=1e-4, beta=0.75, bias=1.0, size=1):
    """LRN(T X) -> T Y; alpha, beta, bias, size: X over (bias + alpha / size * the sum of
    squares across `size` neighbouring channels) ** beta."""
    compute = _compute_dtype(X.dtype)
    x = X.astype(compute)
    window = (1, size) + (1,) * (X.ndim - 2)
    pads = [(0, 0), ((size - 1) // 2, size // 2)] + [(0, 0)] * (X.ndim - 2)
    square_sum = lax.reduce_window(jnp.square(x), np.array(0, compute), lax.add, window,
                                   (1,) * X.ndim, pads)
    return (x / (bias + alpha / size * square_sum) ** beta).astype(X.dtype)


@onnx("MeanVarianceNormalization", since=9)
def mean_variance_normalization(X, *, axes=(0, 2, 3)):
    """MeanVarianceNormalization(T X) -> T Y; axes: (X - mean) / (std + 1e-9) over axes."""
    compute = _compute_dtype(X.dtype)
    x = X.astype(compute)
    axes = tuple(normalize_axis(a, X.ndim) for a in axes)
    mean, var = _moments(x, axes)
    return ((x - mean) / (jnp.sqrt(var) + 1e-9)).astype(X.dtype)


@onnx("RMSNormalization", since=23)
def rms_normalization(X, scale, *, axis=-1, epsilon=1e-5, stash_type=1):
    """RMSNormalization(T X, V scale) -> V Y; axis, epsilon, stash_type: X over the root
    mean square of the dims from axis on, times scale."""
    compute = _compute_dtype(X.dtype, stash_type)
    axes = tuple(range(normalize_axis(axis, X.ndim), X.ndim))
    x = X.astype(compute)
    ms = jnp.mean(jnp.square(x), axis=axes, keepdims=True)
    Y = x * lax.rsqrt(ms + epsilon) * scale.astype(compute)
    return Y.astype(scale.dtype)
