"""ATen lowerings: the fused LSTM and GRU cells of PyTorch's CUDA kernels (`aten/src/ATen/native/
cuda/RNN.cu`), which `nn.LSTMCell`, `nn.GRUCell` and the unfused RNN layers call on the GPU after
the two gate products, and their backward. They have no CPU kernel.

The cells take the gate pre-activations `input @ w_ih.T` and `hidden @ w_hh.T` ((batch, 4 * hidden)
for LSTM, gates in, forget, cell, out; (batch, 3 * hidden) for GRU, gates reset, update, new),
add the biases and apply the activations in opmath (float32 for float16/bfloat16), as the
kernels do, and return a workspace of what their backward reads: LSTM's four activated gates,
GRU's reset, update and new gates, the previous hidden state and `hidden_gates`' new part plus
its bias (batch, 5 * hidden).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ..registry import aten
from ._promotion import opmath_type


def _summed_bias(grad_gates, has_bias):
    """A bias's gradient: the gates' gradient summed over the batch (accumulated in opmath)."""
    if not has_bias:
        return None
    return jnp.sum(grad_gates.astype(opmath_type(grad_gates.dtype)), axis=0).astype(grad_gates.dtype)


def _with_bias(gates, bias, compute):
    gates = gates.astype(compute)
    return gates if bias is None else gates + bias.astype(compute)


@aten("_thnn_fused_gru_cell.default")
def aten__thnn_fused_gru_cell(input_gates, hidden_gates, hx, input_bias=None, hidden_bias=None):
    """_thnn_fused_gru_cell(Tensor input_gates, Tensor hidden_gates, Tensor hx, Tensor? input_bias=None, Tensor? hidden_bias=None) -> (Tensor, Tensor)"""
    compute = opmath_type(input_gates.dtype)
    ir, ii, in_ = jnp.split(_with_bias(input_gates, input_bias, compute), 3, axis=1)
    hr, hi, hn = jnp.split(_with_bias(hidden_gates, hidden_bias, compute), 3, axis=1)
    h = hx.astype(compute)
    r = jax.nn.sigmoid(ir + hr)
    z = jax.nn.sigmoid(ii + hi)
    n = jnp.tanh(in_ + r * hn)
    hy = n + z * (h - n)
    workspace = jnp.concatenate([r, z, n, h, hn], axis=1).astype(hx.dtype)
    return hy.astype(hx.dtype), workspace


@aten("_thnn_fused_gru_cell_backward.default")
def aten__thnn_fused_gru_cell_backward(grad_hy, workspace, has_bias):
    """_thnn_fused_gru_cell_backward(Tensor grad_hy, Tensor workspace, bool has_bias) -> (Tensor, Tensor, Tensor, Tensor, Tensor)

    (grad_input_gates, grad_hidden_gates, grad_hx, grad_input_bias, grad_hidden_bias); grad_hx is
    the direct path only (through the update gate): the path through `hidden_gates` is the
    caller's product with w_hh."""
    compute = opmath_type(workspace.dtype)
    r, z, n, h, hn = jnp.split(workspace.astype(compute), 5, axis=1)
    go = grad_hy.astype(compute)
    gz = go * (h - n) * (1 - z) * z
    gn = go * (1 - z) * (1 - n * n)
    gr = gn * hn * (1 - r) * r
    grad_input_gates = jnp.concatenate([gr, gz, gn], axis=1).astype(workspace.dtype)
    grad_hidden_gates = jnp.concatenate([gr, gz, gn * r], axis=1).astype(workspace.dtype)
    grad_hx = (go * z).astype(grad_hy.dtype)
    return (grad_input_gates, grad_hidden_gates, grad_hx, _summed_bias(grad_input_gates, has_bias),
            _summed_bias(grad_hidden_gates, has_bias))


@aten("_thnn_fused_lstm_cell.default")
def aten__thnn_fused_lstm_cell(input_gates, hidden_gates, cx, input_bias=None, hidden_bias=None):
    """_thnn_fused_lstm_cell(Tensor input_gates, Tensor hidden_gates, Tensor cx, Tensor? input_bias=None, Tensor? hidden_bias=None) -> (Tensor, Tensor, Tensor)

    (hy, cy, workspace)."""
    compute = opmath_type(input_gates.dtype)
    gates = input_gates.astype(compute) + hidden_gates.astype(compute)
    if input_bias is not None:
        gates = gates + input_bias.astype(compute) + hidden_bias.astype(compute)
    i, f, g, o = jnp.split(gates, 4, axis=1)
    i, f, g, o = jax.nn.sigmoid(i), jax.nn.sigmoid(f), jnp.tanh(g), jax.nn.sigmoid(o)
    cy = f * cx.astype(compute) + i * g
    hy = o * jnp.tanh(cy)
    workspace = jnp.concatenate([i, f, g, o], axis=1).astype(input_gates.dtype)
    return hy.astype(cx.dtype), cy.astype(cx.dtype), workspace


@aten("_thnn_fused_lstm_cell_backward_impl.default")
def aten__thnn_fused_lstm_cell_backward_impl(grad_hy, grad_cy, cx, cy, workspace, has_bias):
    """_thnn_fused_lstm_cell_backward_impl(Tensor? grad_hy, Tensor? grad_cy, Tensor cx, Tensor cy, Tensor workspace, bool has_bias) -> (Tensor, Tensor, Tensor)

    (grad_gates, grad_cx, grad_bias): one gradient for both gate inputs and both biases (they are
    summed), none at all when neither output has a gradient."""
    if grad_hy is None and grad_cy is None:
        return None, None, None
    compute = opmath_type(workspace.dtype)
    i, f, g, o = jnp.split(workspace.astype(compute), 4, axis=1)
    zero = jnp.zeros(cx.shape, compute)
    go = zero if grad_hy is None else grad_hy.astype(compute)
    gc = zero if grad_cy is None else grad_cy.astype(compute)
    tanh_cy = jnp.tanh(cy.astype(compute))
    gcell = go * o * (1 - tanh_cy * tanh_cy) + gc
    grad_gates = jnp.concatenate([
        gcell * g * (1 - i) * i,
        gcell * cx.astype(compute) * (1 - f) * f,
        gcell * i * (1 - g * g),
        go * tanh_cy * (1 - o) * o,
    ], axis=1).astype(workspace.dtype)
    return grad_gates, (gcell * f).astype(cx.dtype), _summed_bias(grad_gates, has_bias)
