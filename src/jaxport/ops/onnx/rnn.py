"""ONNX recurrent layers: GRU, LSTM, RNN.

All three share one driver: the input projection of every step is one matmul, the
recurrence is a `lax.scan` per direction. `sequence_lens` masks the steps past each batch
entry's length (their outputs are 0 and the state stops changing), and the reverse
direction runs each entry backwards from its own last step, as ONNX Runtime does.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from ..registry import onnx

# name -> (function of (x, alpha, beta), default alpha, default beta); None: not used.
_ACTIVATIONS = {
    "relu": (lambda x, a, b: jax.nn.relu(x), None, None),
    "tanh": (lambda x, a, b: jnp.tanh(x), None, None),
    "sigmoid": (lambda x, a, b: jax.nn.sigmoid(x), None, None),
    "affine": (lambda x, a, b: a * x + b, 1.0, 0.0),
    "leakyrelu": (lambda x, a, b: jnp.where(x >= 0, x, a * x), 0.01, None),
    "thresholdedrelu": (lambda x, a, b: jnp.where(x > a, x, jnp.zeros_like(x)), 1.0, None),
    "scaledtanh": (lambda x, a, b: a * jnp.tanh(b * x), 1.0, 1.0),
    "hardsigmoid": (lambda x, a, b: jnp.clip(a * x + b, 0, 1), 0.2, 0.5),
    "elu": (lambda x, a, b: jnp.where(x >= 0, x, a * jnp.expm1(x)), 1.0, None),
    "softsign": (lambda x, a, b: x / (1 + jnp.abs(x)), None, None),
    "softplus": (lambda x, a, b: jax.nn.softplus(x), None, None),
}


def _activations(names, alphas, betas, defaults: tuple[str, ...], num_directions: int):
    """Per direction, the list of activation functions; alpha/beta values are taken in order
    by the activations that use them."""
    names = list(names or defaults * num_directions)
    if len(names) == len(defaults) and num_directions == 2:
        names = names * 2
    alphas, betas = list(alphas or ()), list(betas or ())
    functions = []
    for name in names:
        fn, alpha, beta = _ACTIVATIONS[name.lower()]
        if alpha is not None and alphas:
            alpha = alphas.pop(0)
        if beta is not None and betas:
            beta = betas.pop(0)
        functions.append(lambda x, fn=fn, alpha=alpha, beta=beta: fn(x, alpha, beta))
    k = len(defaults)
    return [functions[d * k:(d + 1) * k] for d in range(num_directions)]


def _recurrent(cell, X, W, R, B, sequence_lens, initials, *, gates, hidden_size, direction,
               layout, activations, clip, extras=None):
    """Run `cell` over X in each direction; returns (Y, *final states) in ONNX's layout.

    cell(x_projected, states, R, Rb, activations, clip, extra) -> new states (h first).
    """
    if layout:
        X = jnp.swapaxes(X, 0, 1)
        initials = [None if s is None else jnp.swapaxes(s, 0, 1) for s in initials]
    steps, batch = X.shape[0], X.shape[1]
    num_directions = W.shape[0]
    hidden = hidden_size or R.shape[-1]
    dtype = X.dtype
    if B is None:
        B = jnp.zeros((num_directions, 2 * gates * hidden), dtype)
    time = jnp.arange(steps)[:, None]
    if sequence_lens is None:
        lengths = None
        valid = jnp.ones((steps, batch), bool)
    else:
        lengths = jnp.asarray(sequence_lens).astype(time.dtype)[None, :]
        valid = time < lengths
    ys, finals = [], []
    for d in range(num_directions):
        reverse = direction == "reverse" or (direction == "bidirectional" and d == 1)
        projected = jnp.einsum("tbi,gi->tbg", X, W[d]) + B[d, : gates * hidden]
        order = None
        if reverse:
            if lengths is None:
                order = jnp.broadcast_to(jnp.arange(steps)[::-1, None], (steps, batch))
            else:
                order = jnp.where(valid, lengths - 1 - time, time)
            projected = jnp.take_along_axis(projected, order[:, :, None], axis=0)
        states = tuple(
            jnp.zeros((batch, hidden), dtype) if s is None else jnp.asarray(s[d]) for s in initials
        )
        extra = None if extras is None else extras[d]

        def step(carry, inputs, d=d, extra=extra):
            x, ok = inputs
            new = cell(x, carry, R[d], B[d, gates * hidden:], activations[d], clip, extra)
            ok = ok[:, None]
            kept = tuple(jnp.where(ok, n, old) for n, old in zip(new, carry))
            return kept, jnp.where(ok, new[0], jnp.zeros_like(new[0]))

        final, y = lax.scan(step, states, (projected, valid))
        if order is not None:
            y = jnp.take_along_axis(y, order[:, :, None], axis=0)
        ys.append(y)
        finals.append(final)
    Y = jnp.stack(ys, axis=1)  # [steps, directions, batch, hidden]
    outs = [jnp.stack([f[i] for f in finals]) for i in range(len(initials))]
    if layout:
        Y = jnp.transpose(Y, (2, 0, 1, 3))
        outs = [jnp.swapaxes(o, 0, 1) for o in outs]
    return (Y, *outs)


def _clip(x, clip):
    return x if clip is None else jnp.clip(x, -clip, clip)


def _gru_cell(x, states, R, Rb, acts, clip, linear_before_reset):
    (h,) = states
    f, g = acts
    hidden = h.shape[-1]
    Rz, Rr, Rh = R[:hidden], R[hidden:2 * hidden], R[2 * hidden:]
    Rbz, Rbr, Rbh = Rb[:hidden], Rb[hidden:2 * hidden], Rb[2 * hidden:]
    xz, xr, xh = x[:, :hidden], x[:, hidden:2 * hidden], x[:, 2 * hidden:]
    z = f(_clip(xz + h @ Rz.T + Rbz, clip))
    r = f(_clip(xr + h @ Rr.T + Rbr, clip))
    if linear_before_reset:
        candidate = g(_clip(xh + r * (h @ Rh.T + Rbh), clip))
    else:
        candidate = g(_clip(xh + (r * h) @ Rh.T + Rbh, clip))
    return ((1 - z) * candidate + z * h,)


@onnx("GRU", since=1)
def gru(X, W, R, B=None, sequence_lens=None, initial_h=None, *, hidden_size=None,
        activations=None, activation_alpha=None, activation_beta=None, clip=None,
        direction="forward", linear_before_reset=0, layout=0, output_sequence=0):
    """GRU(T X, T W, T R, T B?, T1 sequence_lens?, T initial_h?) -> (T Y, T Y_h); gates z, r, h."""
    acts = _activations(activations, activation_alpha, activation_beta, ("Sigmoid", "Tanh"), W.shape[0])

    def cell(x, states, R, Rb, acts, clip, extra):
        return _gru_cell(x, states, R, Rb, acts, clip, linear_before_reset)

    return _recurrent(cell, X, W, R, B, sequence_lens, [initial_h], gates=3, hidden_size=hidden_size,
                      direction=direction, layout=layout, activations=acts, clip=clip)


def _lstm_cell(x, states, R, Rb, acts, clip, extra):
    h, c = states
    f, g, act_h = acts
    peephole, input_forget = extra
    hidden = h.shape[-1]
    gates = x + h @ R.T + Rb
    i, o, fg, cand = (gates[:, k * hidden:(k + 1) * hidden] for k in range(4))
    if peephole is not None:
        pi, po, pf = peephole[:hidden], peephole[hidden:2 * hidden], peephole[2 * hidden:]
        i = i + pi * c
        fg = fg + pf * c
    i = f(_clip(i, clip))
    fg = 1 - i if input_forget else f(_clip(fg, clip))
    c_new = fg * c + i * g(_clip(cand, clip))
    if peephole is not None:
        o = o + po * c_new
    o = f(_clip(o, clip))
    return o * act_h(c_new), c_new


@onnx("LSTM", since=1)
def lstm(X, W, R, B=None, sequence_lens=None, initial_h=None, initial_c=None, P=None, *,
         hidden_size=None, activations=None, activation_alpha=None, activation_beta=None,
         clip=None, direction="forward", input_forget=0, layout=0, output_sequence=0):
    """LSTM(T X, T W, T R, T B?, T1 sequence_lens?, T initial_h?, T initial_c?, T P?)
    -> (T Y, T Y_h, T Y_c); gates i, o, f, c; peepholes P = (i, o, f)."""
    num_directions = W.shape[0]
    acts = _activations(activations, activation_alpha, activation_beta, ("Sigmoid", "Tanh", "Tanh"),
                        num_directions)
    extras = [(None if P is None else P[d], input_forget) for d in range(num_directions)]
    return _recurrent(_lstm_cell, X, W, R, B, sequence_lens, [initial_h, initial_c], gates=4,
                      hidden_size=hidden_size, direction=direction, layout=layout, activations=acts,
                      clip=clip, extras=extras)


def _rnn_cell(x, states, R, Rb, acts, clip, extra):
    (h,) = states
    return (acts[0](_clip(x + h @ R.T + Rb, clip)),)


@onnx("RNN", since=1)
def rnn(X, W, R, B=None, sequence_lens=None, initial_h=None, *, hidden_size=None,
        activations=None, activation_alpha=None, activation_beta=None, clip=None,
        direction="forward", layout=0, output_sequence=0):
    """RNN(T X, T W, T R, T B?, T1 sequence_lens?, T initial_h?) -> (T Y, T Y_h)."""
    acts = _activations(activations, activation_alpha, activation_beta, ("Tanh",), W.shape[0])
    return _recurrent(_rnn_cell, X, W, R, B, sequence_lens, [initial_h], gates=1,
                      hidden_size=hidden_size, direction=direction, layout=layout, activations=acts,
                      clip=clip)
