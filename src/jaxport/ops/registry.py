"""The op tables: a decorator that records a lowering, and lookups by name.

A lowering is a plain function over `jax.Array`s and Python values whose
parameters are named as in the op's schema. Registering it changes nothing
about the function, so code generation can copy its source verbatim.

The op families register themselves when `jaxport.ops` is imported, which happens before
this module can be used: importing `jaxport.ops.registry` runs `jaxport/ops/__init__.py` first.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

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
#: ONNX: "Add" (default domain) or "com.microsoft::FusedMatMul" -> {since_version: lowering}.
ONNX_VERSIONS: dict[str, dict[int, Callable]] = {}
#: ONNX lowerings by their program op name, "onnx.Add-14" or "com.microsoft.FusedMatMul-1".
ONNX: dict[str, Callable] = {}
#: ONNX program op name -> positions of the inputs its lowering reads as concrete values
#: (shapes, axes, pads): under `jax.jit` they must not depend on the model's inputs.
ONNX_STATIC_INPUTS: dict[str, tuple[int, ...]] = {}
#: ONNX program op names whose output shape depends on input values (NonZero, Unique).
ONNX_VALUE_DEPENDENT: set[str] = set()


def _register(table: dict[str, Callable], prefix: str, names: tuple[str, ...]) -> Callable[[F], F]:
    def decorator(fn: F) -> F:
        for name in names:
            key = f"{prefix}{name}"
            if key in table:
                raise ValueError(f"{key} is registered twice: {table[key].__name__} and {fn.__name__}")
            table[key] = fn
        return fn

    return decorator


def aten(*overloads: str, random: bool | str = False) -> Callable[[F], F]:
    """Register a lowering for ATen overloads named without the namespace: `@aten("add.Tensor")`.

    `random=True` marks an op that draws random numbers: its lowering takes a
    keyword-only `key` argument, which the interpreter supplies. A string names
    that keyword instead, for ops whose schema already has a `key`.
    """
    if random:
        keyword = "key" if random is True else random
        RANDOM.update({f"aten.{name}": keyword for name in overloads})
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


def lookup(name: str) -> Callable | None:
    """The lowering registered under `name`, or None."""
    return ATEN.get(name) or CUSTOM.get(name) or PYTHON.get(name) or ONNX.get(name)


def random_keyword(name: str) -> str | None:
    """The keyword that op `name`'s lowering takes its `jax.random` key by, or None."""
    return RANDOM.get(name)


def registered_names() -> set[str]:
    return set(ATEN) | set(CUSTOM) | set(PYTHON) | set(ONNX)
