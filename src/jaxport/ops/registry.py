"""The op tables: a decorator that records a lowering, and lookups by name.

A lowering is a plain function over `jax.Array`s and Python values whose
parameters are named as in the op's schema. Registering it changes nothing
about the function, so code generation can copy its source verbatim.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

F = TypeVar("F", bound=Callable)

#: "aten.add.Tensor" -> lowering. Keys are `str(torch.ops.aten.<op>.<overload>)`.
ATEN: dict[str, Callable] = {}
#: "operator.getitem" and friends: Python builtins that appear in exported graphs.
PYTHON: dict[str, Callable] = {}
#: Ops that draw random numbers -> the keyword their lowering takes a `jax.random` key by.
RANDOM: dict[str, str] = {}


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


def prims(*overloads: str) -> Callable[[F], F]:
    """Register a lowering for PyTorch primitives that decompositions leave: `@prims("convert_element_type.default")`."""
    return _register(ATEN, "prims.", overloads)


def python(*names: str) -> Callable[[F], F]:
    """Register a lowering for a Python builtin that appears in graphs: `@python("operator.add")`."""
    return _register(PYTHON, "", names)


def lookup(name: str) -> Callable | None:
    """The lowering registered under `name`, or None."""
    _load_libraries()
    return ATEN.get(name) or PYTHON.get(name)


def random_keyword(name: str) -> str | None:
    """The keyword that op `name`'s lowering takes its `jax.random` key by, or None."""
    _load_libraries()
    return RANDOM.get(name)


def registered_names() -> set[str]:
    _load_libraries()
    return set(ATEN) | set(PYTHON)


_loaded = False


def _load_libraries() -> None:
    # Importing the op modules fills the tables; done lazily so `registry` itself has no cycle.
    global _loaded
    if not _loaded:
        from . import aten as _aten  # noqa: F401
        from . import python_builtins as _python  # noqa: F401

        _loaded = True
