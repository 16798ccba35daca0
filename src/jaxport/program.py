"""The one small program representation every frontend produces and every backend reads.

A `Program` is a straight-line list of `Node`s over named values. Parameters,
buffers and constants are explicit inputs; buffer mutations are explicit
outputs; so interpreting a program is a pure function of its inputs.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .errors import InputError, JaxportError, LoweringError, OpUse, UnsupportedOpsError
from .ops import registry


@dataclass(frozen=True)
class Ref:
    """A reference to the value named `name` in the program's environment."""

    name: str


@dataclass(frozen=True)
class TensorSpec:
    """Shape (None for a symbolic dim) and exact source dtype of a tensor value."""

    shape: tuple[int | None, ...] | None  # None: rank unknown
    dtype: np.dtype

    def admits(self, shape: tuple[int, ...]) -> bool:
        """Whether a concrete shape fits this spec (a None dim fits any size)."""
        if self.shape is None:
            return True
        return len(shape) == len(self.shape) and all(e is None or e == s for e, s in zip(self.shape, shape))

    def describe(self) -> str:
        if self.shape is None:
            return f"{np.dtype(self.dtype).name}[...]"
        dims = ", ".join("?" if d is None else str(d) for d in self.shape)
        return f"{np.dtype(self.dtype).name}[{dims}]"


@dataclass(frozen=True)
class Node:
    """One op application. `expected` is the source graph's TensorSpec (or tuple of them).

    `value_dependent_shape` marks ops whose output shape depends on tensor
    values (nonzero, unique, masked_select, ...): XLA needs static shapes, so
    a program with such a node runs op by op but not under `jax.jit`.
    """

    name: str
    op: str
    args: tuple = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    expected: Any = None
    module_path: str = ""
    source: str = ""
    value_dependent_shape: bool = False
    #: For a node with several results bound to names of their own (ONNX): the names, in
    #: order, "" for a result nobody reads. `name` then only identifies the node.
    outputs: tuple[str, ...] = ()

    def use(self) -> OpUse:
        return OpUse(self.op, self.name, self.module_path, self.source)

    def subgraphs(self):
        """(argument position or keyword, Subgraph) for each subgraph the node runs."""
        for key, value in [*enumerate(self.args), *self.kwargs.items()]:
            for sub in value if isinstance(value, (tuple, list)) else (value,):
                if isinstance(sub, Subgraph):
                    yield key, sub

    def where(self) -> str:
        return self.use().describe()


@dataclass(frozen=True)
class Input:
    """A user input: the value it binds, the name users know it by, and its spec.

    `dims` names the source's size symbol of each dynamic dim it knows one for ({dim: symbol});
    dims of different inputs with the same symbol are the same size (see `Program.dim_ranges`).
    """

    value: str
    name: str
    spec: TensorSpec | None
    dims: dict[int, str] = field(default_factory=dict, hash=False)


@dataclass(frozen=True)
class Subgraph:
    """A program passed to an op as a function (ONNX's If branches, Loop and Scan bodies).

    The op calls it with the subgraph's own inputs; the values it reads from the enclosing
    program (`captures`, names there) are appended to them, so its `user_inputs` are its
    own inputs followed by one input per capture.
    """

    program: Program
    captures: tuple[str, ...] = ()


@dataclass
class Program:
    """Inputs (state, constants, user inputs) -> nodes -> outputs (+ buffer updates)."""

    state_inputs: list[tuple[str, str]]  # (value name, state_dict name)
    constants: dict[str, Any]  # value name -> array
    user_inputs: list[Input]
    nodes: list[Node]
    outputs: list[Any]  # Ref or constant Python value, flat
    buffer_updates: dict[str, Ref] = field(default_factory=dict)  # state_dict name -> new value
    input_updates: dict[str, Ref] = field(default_factory=dict)  # user input name -> new value
    # size symbol (Input.dims) -> (min, max) the source allows; max None when unbounded
    dim_ranges: dict[str, tuple[int, int | None]] = field(default_factory=dict)
    # jax.default_matmul_precision for the float32 products and convolutions that do not name
    # their own, as the source computes them ("float32": full precision, where JAX's default is
    # TF32 on NVIDIA GPUs); None (a subgraph's) keeps the caller's
    matmul_precision: str | None = None

    def walk(self):
        """Every node, those of subgraphs included (after the node that owns them)."""
        for node in self.nodes:
            yield node
            for _, sub in node.subgraphs():
                yield from sub.program.walk()

    def ops(self) -> dict[str, int]:
        """Histogram of the ops this program uses, subgraphs included."""
        counts: dict[str, int] = {}
        for node in self.walk():
            counts[node.op] = counts.get(node.op, 0) + 1
        return counts

    def value_dependent_nodes(self) -> list[Node]:
        """Nodes whose output shape depends on tensor values, so the program cannot be jitted."""
        return [node for node in self.walk() if node.value_dependent_shape]

    def random_nodes(self) -> list[Node]:
        """Nodes that draw random numbers (dropout in training mode, torch.rand, ...); ops that
        only might (attention or dropout with probability 0, dropout with train=False) do not."""
        return [node for node in self.walk() if registry.random_keyword(node.op) and _draws(node)]

    def unsupported(self) -> list[OpUse]:
        names = registry.registered_names()
        return [node.use() for node in self.walk() if node.op not in names]

    def check_supported(self) -> None:
        missing = self.unsupported()
        if missing:
            raise UnsupportedOpsError(missing)


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


#: Arguments that switch a random op's draws off when they are 0 / False.
_DRAW_SWITCHES = {"dropout_p": 0, "p": 0, "train": False}


def _draws(node: Node) -> bool:
    """Whether a random op's own arguments leave it drawing (dropout_p=0.0 does not)."""
    fn = registry.lookup(node.op)
    try:
        bound = inspect.signature(fn).bind_partial(*node.args, **node.kwargs)
    except (TypeError, ValueError):
        return True
    bound.apply_defaults()
    return not any(
        name in bound.arguments and not isinstance(bound.arguments[name], Ref)
        and bound.arguments[name] == off
        for name, off in _DRAW_SWITCHES.items()
    )


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
    if program.matmul_precision is None:
        return _interpret(program, state, inputs, strict, rng, lookup, observe)
    # A trace-time setting: the products traced here keep it, in jax.jit's program too.
    with jax.default_matmul_precision(program.matmul_precision):
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
            raise LoweringError(f"{node.op} failed ({node.where()}): {type(e).__name__}: {e}") from e
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
