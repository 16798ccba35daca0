"""ONNX linear algebra: MatMul, MatMulInteger, Gemm, Einsum, Det, and the optimizer steps of
the ai.onnx.preview.training domain (Adagrad, Adam, Momentum).

Products of float16/bfloat16 accumulate in float32 and round once at the end; other dtypes
accumulate in their own type. Results keep the input dtype, as ONNX's type constraints say.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ..registry import onnx


def _accumulator(dtype):
    """The dtype a product of `dtype` operands accumulates in."""
    if dtype in (jnp.float16, jnp.bfloat16):
        return np.dtype(np.float32)
    return np.dtype(dtype)


def _float_scalar(value, like):
    """A scalar input (learning rate, step count) in the dtype of the tensor it scales."""
    return jnp.asarray(value).reshape(()).astype(like.dtype)


@onnx("Adagrad", since=1, domain="ai.onnx.preview.training")
def adagrad(R, T, *inputs, decay_factor=0.0, epsilon=1e-6, norm_coefficient=0.0):
    """Adagrad(T1 R, T2 T, T3 inputs...) -> T3 outputs...; inputs X..., G..., H...;
    outputs X_new..., H_new...; decay_factor, epsilon, norm_coefficient."""
    n = len(inputs) // 3
    xs, gs, hs = inputs[:n], inputs[n:2 * n], inputs[2 * n:]
    new_xs, new_hs = [], []
    for x, g, h in zip(xs, gs, hs):
        r = _float_scalar(R, x) / (1 + _float_scalar(T, x) * decay_factor)
        g = norm_coefficient * x + g
        h = h + g * g
        new_xs.append(x - r * g / (jnp.sqrt(h) + epsilon))
        new_hs.append(h)
    return (*new_xs, *new_hs)


@onnx("Adam", since=1, domain="ai.onnx.preview.training")
def adam(R, T, *inputs, alpha=0.9, beta=0.999, epsilon=1e-6, norm_coefficient=0.0,
         norm_coefficient_post=0.0):
    """Adam(T1 R, T2 T, T3 inputs...) -> T3 outputs...; inputs X..., G..., V..., H...;
    outputs X_new..., V_new..., H_new...; alpha, beta, epsilon, norm_coefficient(_post)."""
    n = len(inputs) // 4
    xs, gs, vs, hs = (inputs[i * n:(i + 1) * n] for i in range(4))
    new_xs, new_vs, new_hs = [], [], []
    for x, g, v, h in zip(xs, gs, vs, hs):
        r, t = _float_scalar(R, x), _float_scalar(T, x)
        g = norm_coefficient * x + g
        v = alpha * v + (1 - alpha) * g
        h = beta * h + (1 - beta) * g * g
        # Bias correction from the first step on; at T == 0 it would divide by zero.
        a, b = jnp.asarray(alpha, x.dtype), jnp.asarray(beta, x.dtype)
        corrected = r * jnp.sqrt(1 - b**t) / (1 - a**t)
        r = jnp.where(t > 0, corrected, r)
        x = x - r * v / (jnp.sqrt(h) + epsilon)
        new_xs.append((1 - norm_coefficient_post) * x)
        new_vs.append(v)
        new_hs.append(h)
    return (*new_xs, *new_vs, *new_hs)


@onnx("Det", since=11)
def det(X):
    """Det(T X) -> T Y; determinant of the trailing square matrices."""
    X = jnp.asarray(X)
    return jnp.linalg.det(X.astype(_accumulator(X.dtype))).astype(X.dtype)


@onnx("Einsum", since=12)
def einsum(*Inputs, equation):
    """Einsum(T Inputs...) -> T Output; equation."""
    dtype = jnp.asarray(Inputs[0]).dtype
    # Upcast the operands rather than pass preferred_element_type, which einsum's
    # one-operand (pure reduction) path mixes with the input dtype.
    compute = _accumulator(dtype)
    out = jnp.einsum(equation.replace(" ", ""), *(jnp.asarray(x).astype(compute) for x in Inputs))
    return out.astype(dtype)


@onnx("Gemm", since=1)
def gemm(A, B, C=None, *, alpha=1.0, beta=1.0, transA=0, transB=0, broadcast=0):
    """Gemm(T A, T B, T C?) -> T Y = alpha * A' B' + beta * C; transA, transB; C required
    before 11; `broadcast` (before 7) only allowed what NumPy broadcasting does anyway."""
    A, B = jnp.asarray(A), jnp.asarray(B)
    dtype = A.dtype
    if transA:
        A = A.T
    if transB:
        B = B.T
    compute = _accumulator(dtype)
    y = jnp.matmul(A, B, preferred_element_type=compute)
    fractional = not (float(alpha).is_integer() and float(beta).is_integer())
    if fractional and not jnp.issubdtype(compute, jnp.inexact):
        # Integer Gemm with fractional scales: scale in float, truncate once at the end.
        compute = jax.dtypes.canonicalize_dtype(np.float64)
        y = y.astype(compute)
    if alpha != 1:
        y = y * jnp.asarray(alpha, compute)
    if C is not None and beta != 0:
        c = jnp.asarray(C).astype(compute)
        y = y + (c if beta == 1 else c * jnp.asarray(beta, compute))
    return y.astype(dtype)


@onnx("MatMul", since=1)
def mat_mul(A, B):
    """MatMul(T A, T B) -> T Y; NumPy matmul semantics (1-D operands, batch broadcasting)."""
    dtype = jnp.asarray(A).dtype
    return jnp.matmul(A, B, preferred_element_type=_accumulator(dtype)).astype(dtype)


@onnx("MatMulInteger", since=10)
def mat_mul_integer(A, B, a_zero_point=None, b_zero_point=None):
    """MatMulInteger(T1 A, T2 B, T1 a_zero_point?, T2 b_zero_point?) -> int32 Y; zero points
    scalar or per row of A ([M]) / per column of B ([N])."""
    a = jnp.asarray(A).astype(jnp.int32)
    b = jnp.asarray(B).astype(jnp.int32)
    if a_zero_point is not None:
        zero = jnp.asarray(a_zero_point).astype(jnp.int32)
        if zero.ndim == 1 and a.ndim >= 2:
            zero = zero.reshape(-1, 1)  # one per row of A
        elif zero.size == 1:
            zero = zero.reshape(())
        a = a - zero
    if b_zero_point is not None:
        b = b - jnp.asarray(b_zero_point).astype(jnp.int32)
    return jnp.matmul(a, b, preferred_element_type=jnp.int32)


@onnx("Momentum", since=1, domain="ai.onnx.preview.training")
def momentum(R, T, *inputs, alpha, beta, mode, norm_coefficient):
    """Momentum(T1 R, T2 T, T3 inputs...) -> T3 outputs...; inputs X..., G..., V...;
    outputs X_new..., V_new...; alpha, beta, mode ("standard" or "nesterov"), norm_coefficient."""
    n = len(inputs) // 3
    xs, gs, vs = inputs[:n], inputs[n:2 * n], inputs[2 * n:]
    new_xs, new_vs = [], []
    for x, g, v in zip(xs, gs, vs):
        r, t = _float_scalar(R, x), _float_scalar(T, x)
        g = norm_coefficient * x + g
        # The first step (T == 0) takes the whole gradient.
        scale = jnp.where(t > 0, jnp.asarray(beta, x.dtype), jnp.asarray(1, x.dtype))
        v = alpha * v + scale * g
        step = g + alpha * v if mode == "nesterov" else v
        new_xs.append(x - r * step)
        new_vs.append(v)
    return (*new_xs, *new_vs)
