"""The op tables: a decorator that records a lowering, and lookups by name.

A lowering is a plain function over `jax.Array`s and Python values whose
parameters are named as in the op's schema. Registering it changes nothing
about the function, so code generation can copy its source verbatim.

The op families register themselves when `jaxport.ops` is imported, which happens before
this module can be used: importing `jaxport.ops.registry` runs `jaxport/ops/__init__.py` first.

Users add lowerings of their own two ways (`jaxport.register_lowering`, `jaxport.lowerings`):
for ops jaxport has no lowering of, for good; and in place of any lowering, built-in or not,
inside a `with` scope. A program records the scopes in force when a frontend made it
(`Program.lowerings`), so a model keeps the lowerings it was converted under wherever and
whenever it is traced.
"""

from __future__ import annotations

import contextlib
import contextvars
import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable)

#: "aten.add.Tensor" -> lowering. Keys are `str(torch.ops.aten.<op>.<overload>)`.
ATEN: dict[str, Callable] = {}
#: Ops other libraries define with `torch.library` in their own namespace -> lowering.
#: Keys are `str(torch.ops.<namespace>.<op>.<overload>)`: "transformers.grouped_mm_fallback.default".
CUSTOM: dict[str, Callable] = {}
#: "operator.getitem" and friends: Python builtins that appear in exported graphs.
PYTHON: dict[str, Callable] = {}
#: Ops that draw random numbers -> the keyword their lowering takes a `jax.random` key by.
RANDOM: dict[str, str] = {}
#: Ops whose outputs' shapes or dtypes depend on the device the graph was recorded on (BatchNorm's
#: saved statistics: empty on CPU, one per channel elsewhere): their lowerings take a keyword-only
#: `recorded`, filled by the torch frontend with what the graph records (see `aten`).
RECORDED: set[str] = set()
#: Convolutions whose float32 precision PyTorch sets per device: their lowerings take a
#: keyword-only `precision`, filled by the torch frontend (see `aten`).
CONVOLUTIONS: set[str] = set()
#: ONNX: "Add" (default domain) or "com.microsoft::FusedMatMul" -> {since_version: lowering}.
ONNX_VERSIONS: dict[str, dict[int, Callable]] = {}
#: ONNX lowerings by their program op name, "onnx.Add-14" or "com.microsoft.FusedMatMul-1".
ONNX: dict[str, Callable] = {}
#: ONNX program op name -> positions of the inputs its lowering reads as concrete values
#: (shapes, axes, pads): under `jax.jit` they must not depend on the model's inputs.
ONNX_STATIC_INPUTS: dict[str, tuple[int, ...]] = {}
#: ONNX program op names whose output shape depends on input values (NonZero, Unique).
ONNX_VALUE_DEPENDENT: set[str] = set()
#: Lowerings users registered with `register_lowering`, for ops jaxport has none of, by op key
#: (see `op_key`): "mylib.my_op" for every overload, "mylib.my_op.default" for one,
#: "com.example.MyOp" for an ONNX op of every opset.
USER: dict[str, Callable] = {}
#: The `lowerings(...)` scopes in force, outermost first: each {op key: lowering}.
_SCOPES: contextvars.ContextVar[tuple[Mapping[str, Callable], ...]] = contextvars.ContextVar(
    "jaxport_lowerings", default=())
#: Op key -> the op as the user wrote it ("mylib::my_op", ("com.example", "MyOp")), for messages.
_SPELLED: dict[str, str] = {}
#: Bumped by every `register_lowering`, so caches of looked-up lowerings can tell they are stale.
_user_version = 0


def _register(table: dict[str, Callable], prefix: str, names: tuple[str, ...]) -> Callable[[F], F]:
    def decorator(fn: F) -> F:
        for name in names:
            key = f"{prefix}{name}"
            if key in table:
                raise ValueError(f"{key} is registered twice: {table[key].__name__} and {fn.__name__}")
            table[key] = fn
        return fn

    return decorator


def aten(*overloads: str, random: bool | str = False, recorded: bool = False,
         convolution: bool = False) -> Callable[[F], F]:
    """Register a lowering for ATen overloads named without the namespace: `@aten("add.Tensor")`.

    `random=True` marks an op that draws random numbers: its lowering takes a
    keyword-only `key` argument, which the interpreter supplies. A string names
    that keyword instead, for ops whose schema already has a `key`.

    `recorded=True` marks an op whose outputs PyTorch shapes by device (CPU kernels one way,
    CUDA's and the meta kernels another): its lowering takes a keyword-only `recorded`, a
    tuple of `(shape, dtype)` per output as the source graph records them (a None dim where
    the size is symbolic), and returns those. It is None where there is no graph to read
    (the eager frontend, a direct call): the lowering then follows PyTorch's CPU kernel.

    `convolution=True` marks a convolution: its lowering takes a keyword-only `precision`, how
    float32 operands are multiplied in JAX's terms ("float32", or "tensorfloat32" as PyTorch's
    CUDA convolutions do by default), filled by the torch frontend from PyTorch's settings.
    """
    if random:
        keyword = "key" if random is True else random
        RANDOM.update({f"aten.{name}": keyword for name in overloads})
    if recorded:
        RECORDED.update(f"aten.{name}" for name in overloads)
    if convolution:
        CONVOLUTIONS.update(f"aten.{name}" for name in overloads)
    return _register(ATEN, "aten.", overloads)


def custom(namespace: str, *overloads: str) -> Callable[[F], F]:
    """Register a lowering for ops a library defines in its own `torch.library` namespace:
    `@custom("transformers", "grouped_mm_fallback.default")`.

    Such ops reach exported graphs (and the eager frontend) whole, as `aten` ops do; the
    lowering is named `<namespace>_<op>` and its docstring is the op's schema.
    """
    if namespace in ("aten", "prims"):
        raise ValueError(f"register {namespace} ops with @{namespace}(...)")
    return _register(CUSTOM, f"{namespace}.", overloads)


def prims(*overloads: str) -> Callable[[F], F]:
    """Register a lowering for PyTorch primitives that decompositions leave: `@prims("convert_element_type.default")`."""
    return _register(ATEN, "prims.", overloads)


def python(*names: str) -> Callable[[F], F]:
    """Register a lowering for a Python builtin that appears in graphs: `@python("operator.add")`."""
    return _register(PYTHON, "", names)


def onnx(
    op_type: str,
    since: int,
    *,
    domain: str = "",
    static: tuple[int, ...] = (),
    value_dependent: bool = False,
    random: bool = False,
) -> Callable[[F], F]:
    """Register the lowering of ONNX op `op_type` from opset `since` on, until a later
    registration of the same op: `@onnx("Add", since=14)`.

    Inputs are positional (a missing optional input is None), attributes are keywords
    named as in the ONNX schema with ONNX's defaults. A lowering with a keyword-only
    `output_count` parameter is told how many outputs the node names (older Split).
    `static` lists the input positions the lowering reads as concrete values (a shape,
    axes): a model whose inputs reach them runs op by op rather than under `jax.jit`, as
    does one using an op marked `value_dependent` (its output shape depends on values).
    `random=True`: the lowering takes a keyword-only `key`, which the interpreter supplies.
    """
    qualified = op_type if domain in ("", "ai.onnx") else f"{domain}::{op_type}"

    def decorator(fn: F) -> F:
        versions = ONNX_VERSIONS.setdefault(qualified, {})
        if since in versions:
            raise ValueError(f"ONNX {qualified} since {since} is registered twice")
        versions[since] = fn
        name = onnx_program_op(op_type, domain, since)
        ONNX[name] = fn
        if static:
            ONNX_STATIC_INPUTS[name] = static
        if value_dependent:
            ONNX_VALUE_DEPENDENT.add(name)
        if random:
            RANDOM[name] = "key"
        return fn

    return decorator


def onnx_program_op(op_type: str, domain: str, version: int | None) -> str:
    """How a program names an ONNX op: "onnx.Add-14"; without a version, an op jaxport lacks."""
    prefix = "onnx" if domain in ("", "ai.onnx") else domain
    return f"{prefix}.{op_type}" + ("" if version is None else f"-{version}")


def onnx_implementation(op_type: str, domain: str, opset: int) -> int | None:
    """The `since` version of the newest lowering of `op_type` not later than `opset`, or None."""
    qualified = op_type if domain in ("", "ai.onnx") else f"{domain}::{op_type}"
    usable = [v for v in ONNX_VERSIONS.get(qualified, ()) if v <= opset]
    return max(usable) if usable else None


def _family(name: str) -> str:
    """The op key that stands for every version of ONNX op `name` ("onnx.Gelu-20" -> "onnx.Gelu")
    or every overload of torch op `name` ("mylib.my_op.default" -> "mylib.my_op")."""
    versioned = re.fullmatch(r"(.+)-\d+", name)
    return versioned.group(1) if versioned else name.rpartition(".")[0]


def _builtin(name: str) -> Callable | None:
    return ATEN.get(name) or CUSTOM.get(name) or PYTHON.get(name) or ONNX.get(name)


def lookup(name: str) -> Callable | None:
    """The lowering of program op `name` ("aten.add.Tensor", "onnx.Add-14"), or None: the
    innermost `lowerings` scope that names it (or its op, every overload or version), else
    jaxport's own, else one from `register_lowering`."""
    scopes = _SCOPES.get()
    if scopes:
        family = _family(name)
        for scope in reversed(scopes):
            fn = scope.get(name) or scope.get(family)
            if fn is not None:
                return fn
    fn = _builtin(name)
    if fn is None and USER:
        fn = USER.get(name) or USER.get(_family(name))
    return fn


def random_keyword(name: str) -> str | None:
    """The keyword that op `name`'s lowering takes its `jax.random` key by, or None."""
    return RANDOM.get(name)


def is_convolution(name: str) -> bool:
    """Whether op `name`'s lowering takes PyTorch's convolution `precision=` (see `aten`)."""
    return name in CONVOLUTIONS


def takes_recorded(name: str) -> bool:
    """Whether op `name`'s lowering takes the outputs its graph records (`recorded=`, see `aten`)."""
    return name in RECORDED


class _Lowered:
    """The op names that have a lowering now, as a container: `name in registered_names()`."""

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and lookup(name) is not None


def registered_names() -> _Lowered:
    """What `in` asks of to learn whether an op has a lowering (users' and scopes' included)."""
    return _Lowered()


# -- users' lowerings ---------------------------------------------------------------------------


def op_key(op: Any) -> str:
    """How the tables name an op a user gives: a torch op as "mylib::my_op" (every overload),
    "mylib::my_op.overload", its `torch.ops` object or a `torch.library.custom_op`; an ONNX op as
    (domain, op_type), "" for the default domain. -> "mylib.my_op", "mylib.my_op.overload",
    "onnx.Gelu", "com.example.MyOp"."""
    if isinstance(op, tuple) and len(op) == 2 and all(isinstance(part, str) for part in op):
        domain, op_type = op
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", op_type):
            raise ValueError(f"ONNX op type {op_type!r} is not an identifier")
        return onnx_program_op(op_type, domain, None)
    qualified = getattr(op, "_qualname", None)  # a torch.library.custom_op
    text = qualified if isinstance(qualified, str) else op if isinstance(op, str) else str(op)
    key = text.replace("::", ".")
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*){1,2}", key):
        raise ValueError(f"{op!r} names no op: write a torch op as 'namespace::op' or 'namespace::op.overload', "
                         "an ONNX op as (domain, op_type)")
    return key


def _builtin_of(key: str) -> Callable | None:
    """jaxport's own lowering of op key `key` (any overload or version of it), or None."""
    fn = _builtin(key)
    if fn is not None:
        return fn
    for table in (ATEN, CUSTOM, PYTHON, ONNX):
        for name, fn in table.items():
            if _family(name) == key:
                return fn
    return None


def register_lowering(op: Any, fn: Callable | None = None) -> Callable:
    """Give jaxport the JAX implementation of an op it has no lowering of; as a decorator:

        @jaxport.register_lowering("mylib::my_op")
        def my_op(x, scale):  # the op's arguments, by its schema's names; jax.Arrays for tensors
            return x * scale

    `from_torch`, `from_onnx` (`register_lowering(("com.example", "MyOp"))`, attributes as
    keywords), the eager frontend, `torch.compile(backend="jaxport")` and `emit` all use it.
    Registering the same op again replaces the earlier registration; an op jaxport lowers itself
    is refused: replace it inside `with jaxport.lowerings({...}):` instead.
    """
    key = op_key(op)

    def register(function: Callable) -> Callable:
        global _user_version
        if not callable(function):
            raise TypeError(f"register_lowering({op!r}) needs a function, not {type(function).__name__}")
        builtin = _builtin_of(key)
        if builtin is not None:
            raise ValueError(f"{key} has a lowering of jaxport's own ({builtin.__module__}.{builtin.__qualname__}); "
                             f"to use {_describe_function(function)} instead, convert inside "
                             f"`with jaxport.lowerings({{{op!r}: ...}}):`")
        USER[key] = function
        _SPELLED[key] = repr(op) if isinstance(op, (str, tuple)) else repr(key)
        _user_version += 1
        return function

    return register if fn is None else register(fn)


def user_version() -> int:
    """A number that changes whenever `register_lowering` changes what `lookup` finds."""
    return _user_version


@contextlib.contextmanager
def lowerings(overrides: Mapping[Any, Callable]) -> Iterator[None]:
    """Within the scope, `overrides` ({op: JAX implementation}, ops as `register_lowering` takes
    them) replace whatever lowering those ops have, jaxport's own included. Models converted in
    the scope keep them (`Program.lowerings`); the eager frontend uses them while it runs."""
    scope = {}
    for op, function in overrides.items():
        if not callable(function):
            raise TypeError(f"jaxport.lowerings: the lowering given for {op!r} is a {type(function).__name__}, "
                            "not a function")
        key = op_key(op)
        scope[key] = function
        _SPELLED.setdefault(key, repr(op) if isinstance(op, (str, tuple)) else repr(key))
    token = _SCOPES.set((*_SCOPES.get(), scope))
    try:
        yield
    finally:
        _SCOPES.reset(token)


def lowerings_in_force() -> tuple[Mapping[str, Callable], ...]:
    """The `lowerings` scopes in force now, outermost first (what a new program records)."""
    return _SCOPES.get()


@contextlib.contextmanager
def applying(scopes: tuple[Mapping[str, Callable], ...]) -> Iterator[None]:
    """Look lowerings up under exactly `scopes` (a program's recorded ones) for a while."""
    if scopes is _SCOPES.get():
        yield
        return
    token = _SCOPES.set(scopes)
    try:
        yield
    finally:
        _SCOPES.reset(token)


def _describe_function(fn: Callable) -> str:
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"


def provenance(name: str) -> str | None:
    """Where a program op's lowering comes from when it is not jaxport's own: which
    `lowerings` scope or `register_lowering` supplied it, and what it replaces; None for
    jaxport's own (and for ops without a lowering)."""
    family = _family(name)
    for scope in reversed(_SCOPES.get()):
        for key in (name, family):
            if key in scope:
                replaced = _builtin(name)
                what = f"replacing {_describe_function(replaced)}" if replaced else "an op jaxport lacks"
                return f"{_describe_function(scope[key])} from jaxport.lowerings({_SPELLED.get(key, key)}), {what}"
    if _builtin(name) is None:
        for key in (name, family):
            if key in USER:
                return f"{_describe_function(USER[key])} from jaxport.register_lowering({_SPELLED.get(key, key)})"
    return None
