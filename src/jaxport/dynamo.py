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
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import jax
import torch
from torch._dynamo.backends.common import aot_autograd
from torch._functorch.aot_autograd import make_boxed_func
from torch._subclasses.fake_tensor import unset_fake_temporarily

from . import dlpack
from .errors import UnsupportedOpsError
from .frontends.torch_export import graph_program, missing_decompositions
from .ir import Program, interpret
from .ops import registry

#: What `options=` may hold: name -> (allowed values, meaning). `mode=` takes only "default":
#: Inductor's modes tune Inductor's kernels and CUDA graphs, which XLA does not have.
OPTIONS: dict[str, tuple[tuple, str]] = {
    "fallback": ((False, True), "run graphs holding ops jaxport cannot lower eagerly (warning once, "
                                "naming the ops) instead of raising UnsupportedOpsError"),
}
MODES = ("default",)


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
    if _trains(example_inputs) and not _fused_attention_backward_lowered():
        graph_module = _math_attention(graph_module)
    return aot_autograd(
        fw_compiler=compile_graph, bw_compiler=compile_graph, decompositions=missing_decompositions(),
    )(graph_module, example_inputs)


def _trains(example_inputs: Sequence[Any]) -> bool:
    """Whether AOTAutograd will trace a backward graph for these inputs (as it decides)."""
    return torch.is_grad_enabled() and any(
        isinstance(x, torch.Tensor) and x.requires_grad for x in example_inputs)


#: The backward kernels of PyTorch's fused attention (one per kernel its
#: `scaled_dot_product_attention` may pick on CPU or GPU).
_FUSED_ATTENTION_BACKWARDS = (
    "aten._scaled_dot_product_flash_attention_for_cpu_backward.default",
    "aten._scaled_dot_product_flash_attention_backward.default",
    "aten._scaled_dot_product_efficient_attention_backward.default",
    "aten._scaled_dot_product_cudnn_attention_backward.default",
)


def _fused_attention_backward_lowered() -> bool:
    names = registry.registered_names()
    return all(name in names for name in _FUSED_ATTENTION_BACKWARDS)


_SDPA = (torch._C._nn.scaled_dot_product_attention, torch.nn.functional.scaled_dot_product_attention)


def _math_attention(graph_module: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """Dynamo's graph with `scaled_dot_product_attention` calls made PyTorch's math formulation.

    PyTorch runs the op as a fused kernel whose backward is a kernel of its own, which jaxport
    does not lower and no decomposition table covers; decomposition tables apply below autograd,
    too late to change which backward autograd records. Rewritten here, above it, the backward
    is made of the products and softmax jaxport lowers. Inference graphs keep the whole op."""
    rewritten = False
    for node in graph_module.graph.nodes:
        if node.op == "call_function" and node.target in _SDPA:
            node.target = _attention_as_math
            rewritten = True
    if rewritten:
        graph_module.recompile()
    return graph_module


def _attention_as_math(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                       enable_gqa=False):
    """`scaled_dot_product_attention`'s signature over its math formulation (which also returns
    the attention weights). The math kernel adds its mask: a boolean one (True: attend) is made
    additive first, as the public op does before it picks a kernel."""
    if attn_mask is not None and attn_mask.dtype == torch.bool:
        attn_mask = torch.where(attn_mask, 0.0, float("-inf")).to(query.dtype)
    return torch.ops.aten._scaled_dot_product_attention_math.default(
        query, key, value, attn_mask, dropout_p, is_causal, scale=scale, enable_gqa=enable_gqa)[0]


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
        return CompiledGraph(program, _output_kinds(graph_module))

    return compile_graph


def _warn_fallback(missing) -> None:
    ops = frozenset(use.op for use in missing)
    if ops in _warned:
        return
    _warned.add(ops)
    warnings.warn(f"jaxport has no lowering for {', '.join(sorted(ops))}; this graph runs eagerly "
                  "in PyTorch (options={'fallback': True})", stacklevel=2)


def _output_kinds(graph_module: torch.fx.GraphModule) -> list:
    """What each output of the graph is: (dtype, device) for a tensor (JAX may hold it narrower,
    int32 for int64 when x64 is off, or elsewhere), `int`/`float`/`bool` for a size or scalar, None for None."""
    output = next(n for n in graph_module.graph.nodes if n.op == "output")
    kinds = []
    for value in output.args[0]:
        val = value.meta.get("val") if isinstance(value, torch.fx.Node) else value
        if isinstance(val, torch.Tensor):
            kinds.append((val.dtype, val.device))
        elif isinstance(val, (torch.SymInt, int)) and not isinstance(val, bool):
            kinds.append(int)
        elif isinstance(val, (torch.SymFloat, float)):
            kinds.append(float)
        elif isinstance(val, (torch.SymBool, bool)):
            kinds.append(bool)
        else:
            kinds.append(None)
    return kinds


class CompiledGraph:
    """One ATen graph as a jitted JAX function, called the way AOTAutograd calls compiled graphs
    (one list of arguments, which it may empty to free them)."""

    def __init__(self, program: Program, output_kinds: list):
        # On the instance: AOTAutograd wraps the backward's function (functools.wraps copies
        # the instance's attributes, not the class's) and reads this to call it boxed.
        self._boxed_call = True
        self.program = program
        self.output_kinds = output_kinds
        self.random = bool(program.random_nodes())
        # Sizes and scalars are static: JAX traces with concrete shapes, so a size is a number.
        self._jitted = jax.jit(self._run, static_argnums=(2, 3))

    def _run(self, rng, tensors: dict[int, Any], scalars: _Static, count: int) -> list:
        inputs = [tensors[i] if i in tensors else scalars.values[i] for i in range(count)]
        outputs, _ = interpret(self.program, {}, inputs, rng=rng)
        return outputs

    def __call__(self, args: list) -> list:
        tensors = {i: dlpack.to_jax(a, what=f"input {i}") for i, a in enumerate(args)
                   if isinstance(a, torch.Tensor)}
        scalars = {i: a for i, a in enumerate(args) if not isinstance(a, torch.Tensor)}
        inputs = [a for a in args if isinstance(a, torch.Tensor)]
        rng = jax.random.key(int(torch.randint(2**31 - 1, ()).item())) if self.random else None
        outputs = self._jitted(rng, tensors, _Static(scalars), len(args))
        results = [_to_torch(value, kind) for value, kind in zip(outputs, self.output_kinds)]
        return _unshared(results, inputs)


class _Static:
    """A dict of Python values made hashable, so `jax.jit` can take it as a static argument."""

    def __init__(self, values: dict):
        self.values = values
        self._key = tuple(sorted((k, type(v), v) for k, v in values.items()))

    def __hash__(self) -> int:
        return hash(self._key)

    def __eq__(self, other) -> bool:
        return isinstance(other, _Static) and self._key == other._key


def _to_torch(value, kind):
    if kind is None or value is None:
        return value
    if kind in (int, float, bool):
        return kind(value)
    dtype, device = kind
    tensor = dlpack.to_torch(value)
    if tensor.device != device:
        tensor = tensor.to(device)  # JAX without that device (a CPU jaxlib beside CUDA tensors)
    return tensor if tensor.dtype == dtype else tensor.to(dtype)


def _unshared(outputs: list, inputs: list[torch.Tensor]) -> list:
    """Outputs with memory of their own. XLA hands back an input it returns unchanged (`clone`
    is the identity in JAX) as the same buffer, and one array returned twice as one buffer; over
    DLPack those would alias tensors PyTorch believes independent, and an in-place write to one
    would change the other."""
    seen = {t.untyped_storage().data_ptr() for t in inputs if t.numel()}
    fresh = []
    for value in outputs:
        if isinstance(value, torch.Tensor) and value.numel():
            pointer = value.untyped_storage().data_ptr()
            if pointer in seen:
                value = value.clone()
            seen.add(value.untyped_storage().data_ptr())
        fresh.append(value)
    return fresh
