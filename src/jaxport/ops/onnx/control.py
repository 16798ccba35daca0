"""ONNX control flow: If, Loop, Scan.

Subgraph attributes arrive as functions of the subgraph's inputs returning its list of
outputs. With concrete operands (a model run op by op, or a condition computed from
shapes) the loops run in Python and take exactly ONNX's semantics, whatever the output
shapes; under `jax.jit` they become `lax.cond`, `lax.while_loop` and `lax.scan`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ..registry import onnx
from ._helpers import index_dtype


def _concrete(*values) -> bool:
    leaves = jax.tree_util.tree_leaves(values)
    return not any(isinstance(v, jax.core.Tracer) for v in leaves)


def _stack(values: list, like):
    """Stack a Loop's per-iteration scan outputs (none ran: an empty array shaped like one)."""
    if values:
        return jnp.stack([jnp.asarray(v) for v in values])
    return jnp.zeros((0, *jnp.shape(like)), jnp.result_type(like))


@onnx("If", since=1)
def if_(cond, *, then_branch, else_branch):
    """If(B cond) -> V... ; then_branch, else_branch: graphs with no inputs."""
    if _concrete(cond):
        chosen = then_branch if bool(np.asarray(cond).reshape(-1)[0]) else else_branch
        return tuple(chosen())
    return tuple(lax.cond(jnp.reshape(cond, (-1,))[0], lambda: tuple(then_branch()),
                          lambda: tuple(else_branch())))


@onnx("Loop", since=1)
def loop(max_trip_count=None, cond=None, *initial, body):
    """Loop(I max_trip_count?, B cond?, V... v_initial) -> (V... v_final, scan outputs...).

    body(iteration_num, condition, *loop_carried) -> (condition, *loop_carried, *scan_outputs).
    """
    carried = list(initial)
    if _concrete(max_trip_count, cond, *initial):
        return _loop_in_python(max_trip_count, cond, carried, body)
    trip_limit = None if max_trip_count is None else jnp.reshape(max_trip_count, ())
    keep_going = jnp.asarray(True) if cond is None else jnp.reshape(cond, ()).astype(bool)
    # Probe the body once to learn how many scan outputs it has and what they look like.
    probe = jax.eval_shape(lambda c: body(jnp.asarray(0, index_dtype()), jnp.asarray(True), *c), carried)
    n_scan = len(probe) - 1 - len(carried)
    if n_scan == 0:
        return tuple(_while_loop(trip_limit, keep_going, carried, body))
    if trip_limit is None or not _concrete(trip_limit):
        raise jax.errors.ConcretizationTypeError(
            trip_limit, "Loop with scan outputs needs a max_trip_count known at trace time"
        )
    return tuple(_scanned_loop(int(trip_limit), keep_going, carried, body, n_scan))


def _loop_in_python(max_trip_count, cond, carried, body):
    limit = None if max_trip_count is None else int(np.asarray(max_trip_count).reshape(()))
    keep_going = True if cond is None else bool(np.asarray(cond).reshape(()))
    scans: list[list] | None = None
    i = 0
    while keep_going and (limit is None or i < limit):
        outputs = body(jnp.asarray(i, index_dtype()), jnp.asarray(keep_going), *carried)
        keep_going = bool(np.asarray(outputs[0]).reshape(()))
        carried = list(outputs[1:1 + len(carried)])
        step_scans = outputs[1 + len(carried):]
        if scans is None:
            scans = [[] for _ in step_scans]
        for store, value in zip(scans, step_scans):
            store.append(value)
        i += 1
    if scans is None:  # no iteration ran: the scan outputs' element shapes come from the body
        probe = jax.eval_shape(lambda c: body(jnp.asarray(0, index_dtype()), jnp.asarray(True), *c), carried)
        likes = [jnp.zeros(p.shape, p.dtype) for p in probe[1 + len(carried):]]
        return (*carried, *(_stack([], like) for like in likes))
    return (*carried, *(_stack(store, None) for store in scans))


def _while_loop(trip_limit, keep_going, carried, body):
    def condition(state):
        i, going, _ = state
        return going if trip_limit is None else going & (i < trip_limit)

    def step(state):
        i, going, values = state
        outputs = body(i, going, *values)
        new_values = [jnp.asarray(v).astype(jnp.result_type(old)) for v, old in zip(outputs[1:], values)]
        return i + 1, jnp.reshape(outputs[0], ()).astype(bool), new_values

    carried = [jnp.asarray(v) for v in carried]
    _, _, final = lax.while_loop(condition, step, (jnp.asarray(0, index_dtype()), keep_going, carried))
    return final


def _scanned_loop(trips: int, keep_going, carried, body, n_scan: int):
    def step(state, i):
        going, values = state
        outputs = body(i, jnp.asarray(True), *values)
        if not _concrete(outputs[0]) or not bool(np.asarray(outputs[0]).reshape(())):
            # The loop could stop early, so its scan outputs' length depends on values.
            raise jax.errors.ConcretizationTypeError(
                outputs[0], "Loop with scan outputs and a data-dependent condition"
            )
        new_values = [jnp.asarray(v).astype(jnp.result_type(old)) for v, old in zip(outputs[1:], values)]
        return (going, new_values), [jnp.asarray(v) for v in outputs[1 + len(values):]]

    if not _concrete(keep_going) or not bool(np.asarray(keep_going)):
        raise jax.errors.ConcretizationTypeError(keep_going, "Loop with scan outputs and a data-dependent condition")
    carried = [jnp.asarray(v) for v in carried]
    (_, final), stacked = lax.scan(step, (keep_going, carried), jnp.arange(trips, dtype=index_dtype()))
    return (*final, *stacked)


def _scan(initial, scan_inputs, body, scan_input_axes, scan_input_directions, scan_output_axes,
          scan_output_directions):
    """ONNX Scan (opset 9+) over `scan_inputs`, carrying `initial` through `body`."""
    n_in = len(scan_inputs)
    in_axes = list(scan_input_axes or (0,) * n_in)
    in_dirs = list(scan_input_directions or (0,) * n_in)
    xs = []
    for x, axis, direction in zip(scan_inputs, in_axes, in_dirs):
        x = jnp.moveaxis(jnp.asarray(x), axis, 0)
        xs.append(x[::-1] if direction else x)

    def step(states, slices):
        outputs = body(*states, *slices)
        new_states = [jnp.asarray(v).astype(jnp.result_type(old)) for v, old in zip(outputs, states)]
        return new_states, [jnp.asarray(v) for v in outputs[len(states):]]

    final, stacked = lax.scan(step, [jnp.asarray(v) for v in initial], xs)
    n_out = len(stacked)
    out_axes = list(scan_output_axes or (0,) * n_out)
    out_dirs = list(scan_output_directions or (0,) * n_out)
    outputs = []
    for y, axis, direction in zip(stacked, out_axes, out_dirs):
        y = y[::-1] if direction else y
        outputs.append(jnp.moveaxis(y, 0, axis if axis >= 0 else axis + y.ndim))
    return (*final, *outputs)


@onnx("Scan", since=8)
def scan_8(sequence_lens, *initial_and_scan, body, num_scan_inputs, directions=None):
    """Scan-8(I sequence_lens?, V... initial_state_and_scan_inputs): batch axis 0, scan axis 1."""
    if sequence_lens is not None:
        raise NotImplementedError("Scan-8 with sequence_lens")
    n_state = len(initial_and_scan) - num_scan_inputs
    initial, scan_inputs = initial_and_scan[:n_state], initial_and_scan[n_state:]

    def one(*args):
        return _scan(args[:n_state], args[n_state:], body, None, directions, None, None)

    return tuple(jax.vmap(one)(*initial, *scan_inputs))


@onnx("Scan", since=9)
def scan(*initial_and_scan, body, num_scan_inputs, scan_input_axes=None, scan_input_directions=None,
         scan_output_axes=None, scan_output_directions=None):
    """Scan(V... initial_state_and_scan_inputs) -> (V... final_state, scan outputs...)."""
    n_state = len(initial_and_scan) - num_scan_inputs
    initial, scan_inputs = initial_and_scan[:n_state], initial_and_scan[n_state:]
    return _scan(initial, scan_inputs, body, scan_input_axes, scan_input_directions, scan_output_axes,
                 scan_output_directions)
