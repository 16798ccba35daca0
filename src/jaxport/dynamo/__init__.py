"""`torch.compile(model, backend="jaxport")`: each graph Dynamo captures runs as one jitted JAX
function.

Dynamo hands the backend a Python-level FX graph; AOTAutograd traces it into ATen forward and
backward graphs (functionalized: parameters, buffers and tangents are plain inputs, buffer
updates such as BatchNorm's running statistics are extra outputs that AOTAutograd writes back
into the module's tensors). Each ATen graph is walked into a jaxport `Program` by the torch.export
frontend's translator and run by `ir.interpret` under `jax.jit`; tensors cross through DLPack.
Ops jaxport has no lowering for are decomposed with PyTorch's decompositions for just those ops
(`frontends.torch_export.missing_decompositions`), the same policy `from_torch` follows.

The entry point `torch_dynamo_backends: jaxport = jaxport.dynamo:backend` (pyproject.toml) lets
`torch.compile` find the backend by name without anyone importing jaxport first.

Sizes: under `dynamic=True` Dynamo and AOTAutograd trace one symbolic graph for every size, and
jaxport translates it once; its size inputs (SymInts) reach `jax.jit` as static arguments, and
JAX needs concrete shapes, so XLA compiles once per distinct set of sizes (cached by `jax.jit`),
without Dynamo recompiling.

The modules: `graph` (`CompiledGraph`: one graph's call), `inputs` (its tensor arguments as
arrays, the imports kept between calls), `outputs` (how each output comes back), `ranges` (the
int64 range check, read without waiting).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch._dynamo.backends.common import aot_autograd
from torch._functorch.aot_autograd import make_boxed_func
from torch._subclasses.fake_tensor import unset_fake_temporarily

from .. import dlpack  # noqa: F401 - jaxport.dynamo.dlpack: the tensor exchange every piece calls
from ..errors import UnsupportedOpsError
from ..frontends.torch_export import graph_program, missing_decompositions
from .graph import CompiledGraph
from .inputs import BOOL, NARROWED, PLAIN, WORDS

#: What `options=` may hold: name -> (allowed values, meaning). `mode=` takes only "default":
#: Inductor's modes tune Inductor's kernels and CUDA graphs, which XLA does not have.
OPTIONS: dict[str, tuple[tuple, str]] = {
    "fallback": ((False, True), "run graphs holding ops jaxport cannot lower eagerly (warning once, "
                                "naming the ops) instead of raising UnsupportedOpsError"),
}
MODES = ("default",)

__all__ = ["BOOL", "MODES", "NARROWED", "OPTIONS", "PLAIN", "WORDS", "CompiledGraph", "Settings", "backend",
           "counters", "settings"]


@dataclass(frozen=True)
class Settings:
    """The backend's settings, read from `torch.compile`'s `mode=` and `options=`."""

    fallback: bool = False


def settings(mode: str | None = None, options: dict | None = None) -> Settings:
    """`mode=`/`options=` checked: anything this backend does not know is refused, by name."""
    if mode not in (None, *MODES):
        raise ValueError(f"backend 'jaxport' takes mode='default' only, not {mode!r} "
                         "(Inductor's modes tune its own kernels; XLA has none of them)")
    options = dict(options or {})
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise ValueError(f"backend 'jaxport' has no option(s) {', '.join(map(repr, unknown))}; "
                         f"it takes {', '.join(map(repr, OPTIONS))}")
    for name, value in options.items():
        allowed, _ = OPTIONS[name]
        if value not in allowed:
            raise ValueError(f"backend 'jaxport' option {name!r} takes {allowed}, not {value!r}")
    return Settings(**options)


def backend(graph_module: torch.fx.GraphModule, example_inputs: Sequence[Any], *,
            mode: str | None = None, options: dict | None = None) -> Callable:
    """The Dynamo backend: `torch.compile(model, backend="jaxport")`, or this function itself as
    `backend=`. Forward and backward graphs are both lowered (through AOTAutograd)."""
    chosen = settings(mode, options)
    compile_graph = _graph_compiler(chosen)
    return aot_autograd(
        fw_compiler=compile_graph, bw_compiler=compile_graph, decompositions=missing_decompositions(),
    )(graph_module, example_inputs)


#: How many ATen graphs jaxport has compiled and how many it left to PyTorch (`fallback`), for
#: tests and for users who want to know whether their model ran on JAX.
counters = {"graphs": 0, "fallbacks": 0}
_warned: set[frozenset] = set()


def _graph_compiler(chosen: Settings) -> Callable:
    def compile_graph(graph_module: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Callable:
        # AOTAutograd calls compilers inside its fake mode; the graph's constants (a model's
        # buffers it closes over, such as an empty cache's tensors) are real and read as such
        with unset_fake_temporarily():
            program = graph_program(graph_module)
        missing = program.unsupported()
        if missing:
            if not chosen.fallback:
                raise UnsupportedOpsError(missing)
            _warn_fallback(missing)
            counters["fallbacks"] += 1
            return make_boxed_func(graph_module.forward)
        counters["graphs"] += 1
        return CompiledGraph(program, graph_module)

    return compile_graph


def _warn_fallback(missing) -> None:
    ops = frozenset(use.op for use in missing)
    if ops in _warned:
        return
    _warned.add(ops)
    warnings.warn(f"jaxport has no lowering for {', '.join(sorted(ops))}; this graph runs eagerly "
                  "in PyTorch (options={'fallback': True})", stacklevel=2)
