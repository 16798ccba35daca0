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

import numpy as np

from ..errors import InputError, OpUse, UnsupportedOpsError
from ..ops import registry


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
    #: The node of the source graph's top level it was translated from (torch graphs): itself,
    #: for most; for a node inside an inlined higher-order op's body, the op's node; for a node
    #: jaxport adds (a view write's write-back, a split `arange`), the node it serves. "" where the
    #: frontend records none (ONNX, whose nodes' own names are `module_path`).
    origin: str = ""

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
    #: The `jaxport.lowerings` scopes in force when the frontend made this program: it is always
    #: run under them, so a model keeps the lowerings it was converted with.
    lowerings: tuple = field(default_factory=registry.lowerings_in_force)

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
        with registry.applying(self.lowerings):
            return [node.use() for node in self.walk() if registry.lookup(node.op) is None]

    def custom_lowerings(self) -> dict[str, str]:
        """{op: where its lowering comes from} for the ops whose lowering is not jaxport's own
        (`jaxport.register_lowering`, or a `jaxport.lowerings` scope the program was made in)."""
        with registry.applying(self.lowerings):
            found = {node.op: registry.provenance(node.op) for node in self.walk()}
        return {op: where for op, where in sorted(found.items()) if where}

    def check_supported(self) -> None:
        missing = self.unsupported()
        if missing:
            raise UnsupportedOpsError(missing)


#: Arguments that switch a random op's draws off when they are 0 / False.
_DRAW_SWITCHES = {"dropout_p": 0, "p": 0, "train": False}


def _draws(node: Node) -> bool:
    """Whether a random op's own arguments leave it drawing (dropout_p=0.0 does not)."""
    fn = registry.lookup(node.op)
    if fn is None:
        return True
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


@dataclass(frozen=True)
class Translation:
    """What a frontend makes of a model: its program, its weights, and how the model's own
    inputs and outputs map onto the program's flat ones. `backends.model.JaxModel` is built
    from it, in one place, whatever the frontend."""

    program: Program
    #: {state_dict or initializer name: JAX or NumPy array}; NumPy arrays are checked against
    #: JAX's 64-bit narrowing when the JaxModel is made.
    params: Mapping[str, Any]
    #: (args, kwargs) as the model is called -> the program's flat user inputs, with clear errors.
    flatten_inputs: Callable[[tuple, dict], list]
    #: the program's flat outputs -> the structure the model returns.
    build_outputs: Callable[[list], Any]
    parameter_names: Sequence[str] = ()
    buffer_names: Sequence[str] = ()
    #: alias state_dict name -> the name of the tensor it shares (stored once).
    tied: Mapping[str, str] = field(default_factory=dict)
    #: buffers the module computes rather than stores (non-persistent: in no checkpoint).
    computed_buffers: Sequence[str] = ()
    name: str = "model"
    #: what to do about an input whose fixed shape does not match (frontend-specific advice).
    fixed_shape_hint: str = ""
    #: converted in training mode: BatchNorm's batch statistics, dropout that needs `rng=`.
    training: bool = False
    #: names of the flat outputs, where the format has them (ONNX graph outputs).
    output_names: Sequence[str] | None = None


def references(value: Any) -> list[str]:
    """The environment's value names `value` reads (node arguments, keyword arguments, outputs,
    updates), in order and each once: its `Ref`s and its subgraphs' captures, nested in lists,
    tuples and dicts."""
    names: list[str] = []

    def visit(item: Any) -> None:
        if isinstance(item, Ref):
            names.append(item.name)
        elif isinstance(item, Subgraph):
            names.extend(item.captures)
        elif isinstance(item, (list, tuple)):
            for v in item:
                visit(v)
        elif isinstance(item, Mapping):
            for v in item.values():
                visit(v)

    visit(value)
    return list(dict.fromkeys(names))


def flatten_by_name(names: Sequence[str]) -> Callable[[tuple, dict], list]:
    """Inputs given by position, then by name, as a flat list in `names` order: how models whose
    inputs are named graph inputs (ONNX, a reloaded export) take them."""
    names = list(names)

    def flatten(args: tuple, kwargs: dict) -> list:
        if len(args) > len(names):
            raise InputError(f"the model takes {len(names)} input(s) ({', '.join(names)}); got {len(args)}")
        values = dict(zip(names, args))
        for key, value in kwargs.items():
            if key not in names:
                raise InputError(f"the model has no input '{key}'; its inputs are {', '.join(names)}")
            if key in values:
                raise InputError(f"input '{key}' given twice")
            values[key] = value
        missing = [n for n in names if n not in values]
        if missing:
            raise InputError(f"missing input(s): {', '.join(missing)} (the model takes {', '.join(names)})")
        return [values[n] for n in names]

    return flatten
