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
    return jnp.zeros((0, *like.shape), like.dtype)


def _same_structure(a, b) -> bool:
    """Whether two lists of values (arrays, sequences, empty optionals) have equal types."""
    a_leaves, a_tree = jax.tree_util.tree_flatten(list(a), is_leaf=lambda v: v is None)
    b_leaves, b_tree = jax.tree_util.tree_flatten(list(b), is_leaf=lambda v: v is None)
    return a_tree == b_tree and all(
        (x is None) == (y is None)
        and (x is None or (tuple(x.shape), np.dtype(x.dtype)) == (tuple(y.shape), np.dtype(y.dtype)))
        for x, y in zip(a_leaves, b_leaves)
    )


def _traced_once(fn, *args):
    """`fn` traced once, abstractly, into a jaxpr: (a function of the same arguments that
    evaluates that jaxpr, the shapes and dtypes of `fn`'s results). Calling it traces nothing
    again, so control flow nested n deep costs time linear in n, where tracing each branch or
    body a second time (to learn its output types, then to build the `lax` op) would double the
    time with each level."""
    closed, shapes = jax.make_jaxpr(fn, return_shape=True)(*args)
    tree = jax.tree_util.tree_structure(shapes)

    def run(*values):
        flat = jax.tree_util.tree_leaves(values)
        return jax.tree_util.tree_unflatten(tree, jax.core.eval_jaxpr(closed.jaxpr, closed.consts, *flat))

    return run, shapes


@onnx("If", since=1, static=(0,))
def if_(cond, *, then_branch, else_branch):
    """If(B cond) -> V... ; then_branch, else_branch: graphs with no inputs.

    The condition is declared static because ONNX lets the branches differ in shape and
    type (a sequence or an empty optional on one side), which only a concrete choice can
    give; traced by a caller's own `jax.jit`, equal-typed branches become `lax.cond`. Each
    branch is traced once (`_traced_once`), however deep Ifs nest.
    """
    if _concrete(cond):
        chosen = then_branch if bool(np.asarray(cond).reshape(-1)[0]) else else_branch
        return tuple(chosen())
    run_then, then_shapes = _traced_once(lambda: tuple(then_branch()))
    run_else, else_shapes = _traced_once(lambda: tuple(else_branch()))
    if not _same_structure(then_shapes, else_shapes):
        raise jax.errors.ConcretizationTypeError(
            cond, "If whose branches differ in shape or type needs a condition known at trace time"
        )
    return tuple(lax.cond(jnp.reshape(cond, (-1,))[0], run_then, run_else))


@onnx("Loop", since=1, static=(0,))
def loop(M=None, cond=None, *v_initial, body):
    """Loop(I M?, B cond?, V... v_initial) -> (V... v_final, scan outputs...).

    body(iteration_num, condition, *loop_carried) -> (condition, *loop_carried, *scan_outputs).
    The trip count is static: it decides the scan outputs' length. With concrete operands,
    or a carried state whose shape or type changes (a growing sequence), the loop runs in
    Python; otherwise the body is traced once (`_traced_body`) and becomes `lax.while_loop`
    (no scan outputs) or `lax.scan`.
    """
    carried = list(v_initial)
    traced = None if _concrete(M, cond, *carried) else _traced_body(body, carried)
    if traced is None:
        return _loop_in_python(M, cond, carried, body)
    run, shapes, stays_true = traced
    n_scan = len(shapes) - 1 - len(carried)
    # Concrete operands stay NumPy, so traced code can still read them.
    xp_m, xp_c = (np if _concrete(v) else jnp for v in (M, cond))
    trip_limit = None if M is None else xp_m.reshape(M, ())
    keep_going = np.asarray(True) if cond is None else xp_c.reshape(cond, ()).astype(bool)
    if n_scan == 0:
        return tuple(_while_loop(trip_limit, keep_going, carried, run))
    if _concrete(keep_going) and not bool(keep_going):  # no iteration: empty scan outputs
        return (*carried, *(jnp.zeros((0, *s.shape), s.dtype) for s in shapes[1 + len(carried):]))
    if trip_limit is None or not _concrete(trip_limit):
        raise jax.errors.ConcretizationTypeError(
            trip_limit, "Loop with scan outputs needs a trip count known at trace time"
        )
    if not _concrete(keep_going) or not bool(np.asarray(keep_going)) or not stays_true:
        # The loop could stop early, so its scan outputs' length depends on values.
        raise jax.errors.ConcretizationTypeError(keep_going, "Loop with scan outputs and a data-dependent condition")
    return tuple(_scanned_loop(int(trip_limit), carried, run))


def _traced_body(body, carried):
    """The Loop body traced once, on an abstract iteration number and loop-carried values, its
    condition input True (the body only runs while it is): (a function of (iteration_num,
    *loop_carried) evaluating it, its results' shapes and dtypes, whether its condition result
    is True at trace time), or None where `lax` loops cannot run it: carried values or scan
    outputs that are not tensors, a state that changes shape or type, or a body that needs
    concrete values (an op reading the iteration number statically)."""
    if any(v is None or isinstance(v, list) for v in carried):
        return None
    stays_true = []

    def step(i, *values):
        outputs = body(i, np.asarray(True), *values)  # NumPy: stays concrete while traced
        stays_true.append(_concrete(outputs[0]) and bool(np.asarray(outputs[0]).reshape(())))
        return outputs

    try:
        run, shapes = _traced_once(step, jax.ShapeDtypeStruct((), index_dtype()), *carried)
    except Exception:  # noqa: BLE001 - the Python loop then unrolls it, or reports the error
        return None
    outputs = list(shapes[1:])
    if any(v is None or isinstance(v, list) for v in outputs):
        return None
    if not _same_structure(outputs[: len(carried)], carried):
        return None
    return run, shapes, bool(stays_true and stays_true[0])


def _loop_in_python(M, cond, carried, body):
    limit = None if M is None else int(np.asarray(M).reshape(()))
    keep_going = True if cond is None else bool(np.asarray(cond).reshape(()))
    scans: list[list] | None = None
    i = 0
    while keep_going and (limit is None or i < limit):
        # NumPy values stay concrete under jax.jit, for body ops that read them statically.
        outputs = body(np.asarray(i, index_dtype()), np.asarray(keep_going), *carried)
        keep_going = bool(np.asarray(outputs[0]).reshape(()))
        carried = list(outputs[1:1 + len(carried)])
        step_scans = outputs[1 + len(carried):]
        if scans is None:
            scans = [[] for _ in step_scans]
        for store, value in zip(scans, step_scans):
            store.append(value)
        i += 1
    if scans is None:  # no iteration ran: the scan outputs' element shapes come from the body
        probe = jax.eval_shape(
            lambda c: body(jnp.asarray(0, index_dtype()), jnp.asarray(True), *c), carried
        )
        return (*carried, *(_stack([], like) for like in probe[1 + len(carried):]))
    return (*carried, *(_stack(store, None) for store in scans))


def _while_loop(trip_limit, keep_going, carried, run):
    def condition(state):
        i, going, _ = state
        return going if trip_limit is None else going & (i < trip_limit)

    def step(state):
        i, _, values = state
        outputs = run(i, *values)
        new_values = [jnp.asarray(v).astype(jnp.result_type(old)) for v, old in zip(outputs[1:], values)]
        return i + 1, jnp.reshape(outputs[0], ()).astype(bool), new_values

    carried = [jnp.asarray(v) for v in carried]
    state = (jnp.asarray(0, index_dtype()), keep_going, carried)
    _, _, final = lax.while_loop(condition, step, state)
    return final


def _scanned_loop(trips: int, carried, run):
    """A Loop that runs all `trips` iterations (its condition stays True), stacking its scan
    outputs."""

    def step(values, i):
        outputs = run(i, *values)
        new_values = [jnp.asarray(v).astype(jnp.result_type(old)) for v, old in zip(outputs[1:], values)]
        return new_values, [jnp.asarray(v) for v in outputs[1 + len(values):]]

    carried = [jnp.asarray(v) for v in carried]
    final, stacked = lax.scan(step, carried, jnp.arange(trips, dtype=index_dtype()))
    return (*final, *stacked)


def _scan(initial, scan_inputs, body, scan_input_axes, scan_input_directions, scan_output_axes,
          scan_output_directions, length=None):
    """ONNX Scan over `scan_inputs`, carrying `initial` through `body`. `length` (Scan-8's
    sequence_lens, one batch entry): the steps past it keep the state and output zeros, and
    reversed inputs and outputs run backwards from the entry's own last step."""
    n_in = len(scan_inputs)
    in_axes = list(scan_input_axes or (0,) * n_in)
    in_dirs = list(scan_input_directions or (0,) * n_in)
    xs = [jnp.moveaxis(jnp.asarray(x), axis, 0) for x, axis in zip(scan_inputs, in_axes)]
    steps = xs[0].shape[0] if xs else 0
    time = jnp.arange(steps)
    if length is None:
        valid, backwards = None, time[::-1]
    else:
        length = jnp.reshape(length, ()).astype(time.dtype)
        valid = time < length
        backwards = jnp.where(valid, length - 1 - time, time)
    xs = [x[backwards] if direction else x for x, direction in zip(xs, in_dirs)]

    def step(states, inputs):
        slices, ok = inputs
        outputs = body(*states, *slices)
        new_states = [jnp.asarray(v).astype(jnp.result_type(old)) for v, old in zip(outputs, states)]
        ys = [jnp.asarray(v) for v in outputs[len(states):]]
        if ok is not None:
            new_states = [jnp.where(ok, new, old) for new, old in zip(new_states, states)]
            ys = [jnp.where(ok, y, jnp.zeros_like(y)) for y in ys]
        return new_states, ys

    initial = [jnp.asarray(v) for v in initial]
    try:
        final, stacked = lax.scan(step, initial, (xs, valid))
    except Exception:  # noqa: BLE001 - a body that reads values statically (run op by op)
        if not steps or not _concrete(initial, xs, valid):
            raise
        final, stacked = _scan_in_python(step, initial, xs, valid, steps)
    n_out = len(stacked)
    out_axes = list(scan_output_axes or (0,) * n_out)
    out_dirs = list(scan_output_directions or (0,) * n_out)
    outputs = []
    for y, axis, direction in zip(stacked, out_axes, out_dirs):
        y = y[backwards] if direction else y
        outputs.append(jnp.moveaxis(y, 0, axis if axis >= 0 else axis + y.ndim))
    return (*final, *outputs)


def _scan_in_python(step, states, xs, valid, steps: int):
    per_step = []
    for t in range(steps):
        states, ys = step(states, ([x[t] for x in xs], None if valid is None else valid[t]))
        per_step.append(ys)
    return states, [jnp.stack(column) for column in zip(*per_step)]


@onnx("Scan", since=8)
def scan_8(sequence_lens, *initial_and_scan, body, num_scan_inputs, directions=None):
    """Scan-8(I sequence_lens?, V... initial_state_and_scan_inputs): batch axis 0, scan axis 1;
    each batch entry runs `sequence_lens` steps (all of them by default)."""
    n_state = len(initial_and_scan) - num_scan_inputs
    initial, scan_inputs = initial_and_scan[:n_state], initial_and_scan[n_state:]

    def one(length, *args):
        return _scan(args[:n_state], args[n_state:], body, None, directions, None, None, length)

    if sequence_lens is None:
        return tuple(jax.vmap(lambda *args: one(None, *args))(*initial, *scan_inputs))
    return tuple(jax.vmap(one)(jnp.asarray(sequence_lens), *initial, *scan_inputs))


@onnx("Scan", since=9)
def scan(*initial_and_scan, body, num_scan_inputs, scan_input_axes=None, scan_input_directions=None,
         scan_output_axes=None, scan_output_directions=None):
    """Scan(V... initial_state_and_scan_inputs) -> (V... final_state, scan outputs...)."""
    n_state = len(initial_and_scan) - num_scan_inputs
    initial, scan_inputs = initial_and_scan[:n_state], initial_and_scan[n_state:]
    return _scan(initial, scan_inputs, body, scan_input_axes, scan_input_directions, scan_output_axes,
                 scan_output_directions)
