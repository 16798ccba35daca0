"""How a program runs: `interpret`, the one loop that owns error context.

It evaluates a `Program`'s nodes in order with the registered lowerings, checks each result
against the shape and dtype the source graph recorded, and names the node, its module path and
source line when a lowering fails.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ..errors import InputError, JaxportError, LoweringError, UnsupportedOpsError
from ..ops import registry
from .program import Node, Program, Ref, Subgraph, TensorSpec


def _resolve(value, env, strict: bool = False, rng=None, observe=None):
    if isinstance(value, Ref):
        return env[value.name]
    if isinstance(value, Subgraph):
        return _as_function(value, env, strict, rng, observe)
    if isinstance(value, (list, tuple)):
        return type(value)(_resolve(v, env, strict, rng, observe) for v in value)
    if isinstance(value, dict):
        return {k: _resolve(v, env, strict, rng, observe) for k, v in value.items()}
    if isinstance(value, np.dtype):
        return np.dtype(jax.dtypes.canonicalize_dtype(value))
    return value


def _all_concrete(args, kwargs) -> bool:
    """Whether no argument is a traced value (functions, i.e. subgraphs, count as traced:
    what they compute is not known here, and so do symbolic sizes from `jax.export`: they
    are known only inside the trace, so `arange(<symbolic size>)` must not run outside it)."""
    for leaf in jax.tree_util.tree_leaves((args, kwargs)):
        if isinstance(leaf, jax.core.Tracer) or callable(leaf) or jax.export.is_symbolic_dim(leaf):
            return False
    return True


def _as_function(subgraph: Subgraph, env, strict: bool, rng, observe=None):
    """The subgraph as a function of its own inputs, returning its list of outputs."""
    captured = [env[name] for name in subgraph.captures]

    def run(*inputs):
        outputs, _ = interpret(subgraph.program, {}, [*inputs, *captured], strict=strict, rng=rng,
                               observe=observe)
        return outputs

    return run


def _conform(out, expected, node: Node, strict: bool):
    """Check a lowering's result against the recorded spec; fix dtypes unless strict."""
    if isinstance(expected, TensorSpec):
        if not isinstance(out, (jax.Array, np.ndarray)):
            if np.isscalar(out):
                out = jnp.asarray(out)
            else:
                raise LoweringError(f"{node.op} returned {type(out).__name__}, expected a tensor ({node.where()})")
        shape = tuple(out.shape)
        if not expected.admits(shape):
            raise LoweringError(
                f"{node.op} produced shape {shape} where the source graph records "
                f"{expected.describe()} ({node.where()})"
            )
        want = np.dtype(jax.dtypes.canonicalize_dtype(expected.dtype))
        if out.dtype != want:
            if strict:
                raise LoweringError(
                    f"{node.op} produced {np.dtype(out.dtype).name} where the source graph records "
                    f"{np.dtype(expected.dtype).name} ({node.where()})"
                )
            out = out.astype(want)
        return out
    if isinstance(expected, (tuple, list)) and isinstance(out, (tuple, list)) and len(out) == len(expected):
        return type(out)(_conform(o, e, node, strict) for o, e in zip(out, expected))
    return out


def interpret(
    program: Program,
    state: Mapping[str, Any],
    inputs: Sequence[Any],
    *,
    strict: bool = False,
    rng: jax.Array | None = None,
    lookup: Callable[[str], Callable | None] = registry.lookup,
    observe: Callable[[Program, int, bool, Any], None] | None = None,
) -> tuple[list[Any], dict[str, Any]]:
    """Run `program`; returns (flat outputs, {buffer or input name: updated value}).

    `rng` is the `jax.random` key that random ops draw from (each node folds in
    its own index); without one they use key 0, so results are reproducible.
    `observe(program, index, concrete, result)`, if given, sees every node's lowering
    result before the cast to the recorded dtype, subgraphs' nodes included, and whether
    it ran at trace time (code generation writes down what it saw).

    This loop is the one place that owns error context: a failing lowering is
    reported with its node, module path and source line.
    """
    with contextlib.ExitStack() as stack:
        stack.enter_context(registry.applying(program.lowerings))
        if program.matmul_precision is not None:
            # A trace-time setting: the products traced here keep it, in jax.jit's program too.
            stack.enter_context(jax.default_matmul_precision(program.matmul_precision))
        return _interpret(program, state, inputs, strict, rng, lookup, observe)


def _interpret(program, state, inputs, strict, rng, lookup, observe):
    """`interpret`'s loop, under the program's matmul precision."""
    env: dict[str, Any] = {}
    for value, name in program.state_inputs:
        try:
            env[value] = state[name]
        except KeyError:
            raise InputError(f"params has no entry '{name}'; start from JaxModel.params") from None
    env.update(program.constants)
    for spec, x in zip(program.user_inputs, inputs):
        env[spec.value] = x
    for index, node in enumerate(program.nodes):
        fn = lookup(node.op)
        if fn is None:
            raise UnsupportedOpsError([node.use()])
        node_rng = None
        if rng_keyword := registry.random_keyword(node.op):
            if rng is None:
                rng = jax.random.key(0)
            node_rng = jax.random.fold_in(rng, index)
        # Subgraphs (loop bodies, branches) draw from a key of their own node.
        inner_rng = None if rng is None else jax.random.fold_in(rng, index)
        args = _resolve(node.args, env, strict, inner_rng, observe)
        kwargs = _resolve(node.kwargs, env, strict, inner_rng, observe)
        if rng_keyword:
            kwargs[rng_keyword] = node_rng
        concrete = _all_concrete(args, kwargs)
        try:
            if concrete:
                # Values computed from constants and shapes alone (ONNX's Shape -> Gather ->
                # Concat -> Reshape chains) are evaluated now, even under jax.jit, so ops that
                # need them statically (a reshape's target shape) can read them.
                with jax.ensure_compile_time_eval():
                    out = fn(*args, **kwargs)
            else:
                out = fn(*args, **kwargs)
        except JaxportError:
            raise
        except (jax.errors.JAXTypeError, jax.errors.JAXIndexError) as e:
            if node.value_dependent_shape:
                raise LoweringError(
                    f"{node.op} returns a tensor whose shape depends on tensor values, which "
                    f"jax.jit cannot trace ({node.where()}). Call the JaxModel itself (it runs "
                    "such models op by op) or apply() outside jit, or make the shape static "
                    "in the model (e.g. torch.nonzero_static)."
                ) from e
            raise LoweringError(f"{node.op} cannot run under this JAX transformation ({node.where()}):\n{e}") from e
        except Exception as e:
            supplied = registry.provenance(node.op)
            by = f", lowering {supplied}" if supplied else ""
            raise LoweringError(f"{node.op} failed ({node.where()}{by}): {type(e).__name__}: {e}") from e
        if observe is not None:
            observe(program, index, concrete, out)
        if node.outputs:
            # A tuple is several results; anything else (a list is an ONNX sequence) is one.
            results = out if isinstance(out, tuple) else (out,)
            if len(results) < len(node.outputs):
                raise LoweringError(
                    f"{node.op} returned {len(results)} result(s) where the graph reads "
                    f"{len(node.outputs)} ({node.where()})"
                )
            results = _conform(tuple(results[: len(node.outputs)]), node.expected, node, strict)
            env.update((name, value) for name, value in zip(node.outputs, results) if name)
        else:
            env[node.name] = _conform(out, node.expected, node, strict)
    outputs = [_resolve(o, env) for o in program.outputs]
    updates = {name: _resolve(ref, env) for name, ref in program.buffer_updates.items()}
    updates.update({name: _resolve(ref, env) for name, ref in program.input_updates.items()})
    return outputs, updates
