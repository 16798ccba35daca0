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

import functools
import sys
import threading
import warnings
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import torch
from torch._dynamo.backends.common import aot_autograd
from torch._functorch.aot_autograd import make_boxed_func
from torch._subclasses.fake_tensor import unset_fake_temporarily

from . import dlpack, dtypes
from .errors import InputError, UnsupportedOpsError
from .frontends.torch_export import graph_program, missing_decompositions
from .ir import Program, interpret

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


#: How a tensor argument crosses to JAX, by its dtype (`_crossing`): PLAIN as it is; BOOL as its
#: bytes (uint8, which every jaxlib's DLPack takes), made bool inside the jitted function; WORDS
#: (int64 with JAX's x64 mode off) as its two int32 words, the low one taken inside the jitted
#: function and the high one checked there to be the low one's sign (the value fits int32);
#: NARROWED (float64, uint64, complex128 with x64 off) copied, narrowed and checked by
#: `dlpack.to_jax`, on every call.
PLAIN, BOOL, WORDS, NARROWED = "plain", "bool", "words", "narrowed"


def _crossing(dtype: torch.dtype) -> str:
    if dtype == torch.bool:
        return BOOL
    exact = dtypes.numpy_dtype(dtype)
    if dtypes.narrow_dtype(exact) == exact:
        return PLAIN
    if dtype == torch.int64 and sys.byteorder == "little":  # the low word first
        return WORDS
    return NARROWED


class CompiledGraph:
    """One ATen graph as a jitted JAX function, called the way AOTAutograd calls compiled graphs
    (one list of arguments, which it may empty to free them).

    A call does little besides the jitted call itself:

    - Each tensor argument is imported through DLPack once and its array kept while the argument
      is the same tensor object with the same data pointer, shape, strides and dtype (parameters
      and buffers, an input passed again); a rebinding (`p.data = ...`, `.to()`) changes the
      pointer and imports again. An array that shares the tensor's memory needs nothing more: a
      later in-place write (`p.add_`, an optimizer's step, `load_state_dict`, AOTAutograd writing
      BatchNorm's statistics back, even `p.data.add_`, which bypasses the version counter) shows
      through it. An import that had to copy (a buffer XLA cannot take as it lies, such as
      weights loaded at unaligned offsets; a non-contiguous tensor; another device; float64
      narrowed) is kept while the tensor's version counter is unchanged too, so every in-place
      write but one through `.data` (which PyTorch's autograd does not see either) imports
      again. The cache holds each tensor weakly and drops its array when the tensor dies, so it
      never keeps a model's memory alive.
    - Nothing waits to read tensor values on the host: bool and int64 cross by DLPack as their
      bytes and words, and int64 values int32 cannot hold (JAX's x64 mode off) are found inside
      the jitted function. Its verdict is read once it is ready, without waiting: at the end of
      the call where the outputs were already awaited (the CPU: handing them to PyTorch waits for
      them), else at the graph's next call; an out-of-range value raises `InputError` then. Only
      float64, uint64 and complex128 with x64 off are still narrowed and range-checked on the host
      (`dlpack.to_jax`) on every call, and a graph that draws random numbers takes one seed from
      PyTorch's CPU generator per call.
    - Sizes and scalars go to `jax.jit` as one static tuple; the positions of tensors and
      scalars, how each crosses, the graph's device and how each output comes back are worked out
      at the first call (from the arguments themselves: a graph recorded on `meta` runs on the
      tensors it is given).
    - Outputs keep no memory of the inputs': an output the graph returns straight from its inputs
      (AOTAutograd's saved parameters) is that input tensor, as Inductor returns it; any other
      output the trace finds to be an input's array or one returned before is copied inside the
      jitted function, so no check runs per call.

    On CUDA the arrays kept alias memory that PyTorch may write on its own stream between calls:
    each call imports one fresh one-element tensor (DLPack's stream handshake makes JAX's work
    wait for what PyTorch queued before it), and `keep_unused` makes the compiled program take
    it, so JAX never reads a kept array before PyTorch's earlier writes land. Outputs cross back
    with DLPack's handshake the other way (PyTorch's stream waits for them), which also orders
    PyTorch's later writes after JAX's reads."""

    def __init__(self, program: Program, graph_module: torch.fx.GraphModule):
        # On the instance: AOTAutograd wraps the backward's function (functools.wraps copies
        # the instance's attributes, not the class's) and reads this to call it boxed.
        self._boxed_call = True
        self.program = program
        self.output_kinds = _output_kinds(graph_module)
        self.random = bool(program.random_nodes())
        placeholders = [n for n in graph_module.graph.nodes if n.op == "placeholder"]
        output = next(n for n in graph_module.graph.nodes if n.op == "output")
        index = {node: i for i, node in enumerate(placeholders)}
        #: {output index: argument index} for outputs that are the graph's inputs themselves.
        self._passed = {k: index[v] for k, v in enumerate(output.args[0]) if isinstance(v, torch.fx.Node) and v in index}
        self._bound = False
        self._pending: list[jax.Array] = []
        # Threads share a compiled graph (Dynamo's cache is the process's): the first call's set-up
        # and the pending range checks are each one thread's at a time.
        self._lock = threading.Lock()
        #: {static scalars: {output index: value}}: size outputs the trace knew as numbers.
        self._static_outputs: dict[tuple, dict[int, Any]] = {}
        # keep_unused: every array argument stays an argument of the compiled program (the
        # CUDA fence does nothing else).
        self._jitted = jax.jit(self._run, static_argnums=(2,), keep_unused=True)

    def _bind(self, args: list) -> None:
        """What every later call reuses, from the first call's arguments."""
        self._count = len(args)
        self._tensor_positions = tuple(i for i, a in enumerate(args) if isinstance(a, torch.Tensor))
        self._scalar_positions = tuple(i for i, a in enumerate(args) if not isinstance(a, torch.Tensor))
        self._dtypes = tuple(args[i].dtype for i in self._tensor_positions)
        self._crossings = tuple(_crossing(dtype) for dtype in self._dtypes)
        self._checked = tuple(slot for slot, crossing in enumerate(self._crossings) if crossing == WORDS)
        self._imports = _Imports([None] * len(self._tensor_positions))
        # The graph's device: its first tensor off the CPU (a CUDA graph may take CPU scalars).
        self._device = next((args[i].device for i in self._tensor_positions if args[i].device.type != "cpu"),
                            torch.device("cpu"))
        self._jax_device = dlpack.jax_device(self._device)
        self._fence = self._device.type == "cuda" and self._jax_device is not None
        plan = []
        for k, kind in enumerate(self.output_kinds):
            if k in self._passed:
                plan.append((_INPUT, self._passed[k]))
            elif kind is None:
                plan.append((_NONE, None))
            elif kind in (int, float, bool):
                plan.append((_SCALAR, kind))
            else:
                dtype, device = kind
                plan.append((_TENSOR, (dtype, self._device if device.type == "meta" else device)))
        self._plan = tuple(plan)
        self._has_scalars = any(mode == _SCALAR for mode, _ in plan)
        self._bound = True

    def _run(self, seed, arrays: list, statics: tuple) -> tuple[list, jax.Array | None]:
        inputs: list[Any] = [None] * self._count
        for position, value in zip(self._scalar_positions, statics):
            inputs[position] = value
        flags = []
        for position, crossing, array in zip(self._tensor_positions, self._crossings, arrays):
            if crossing == BOOL:
                array = array != 0
            elif crossing == WORDS:
                low, high = array[..., 0], array[..., 1]
                flags.append(jnp.all(high == jax.lax.shift_right_arithmetic(low, jnp.int32(31))))
                array = low
            inputs[position] = array
        rng = None if seed is None else jax.random.key(seed)
        outputs, _ = interpret(self.program, {}, inputs, rng=rng)
        static: dict[int, Any] = {}
        results: list = []
        seen = {id(a) for a in arrays}
        for k, ((mode, detail), value) in enumerate(zip(self._plan, outputs)):
            if mode in (_INPUT, _NONE):
                results.append(None)
            elif mode == _SCALAR:
                if isinstance(value, jax.core.Tracer):
                    results.append(value)
                else:  # a size the trace knows: handed back without a device read
                    static[k] = value
                    results.append(None)
            else:
                value = jnp.asarray(value)
                if id(value) in seen:  # an input's array, or one returned before: a buffer of its own
                    value = jnp.array(value, copy=True)
                seen.add(id(value))
                if detail[0] == torch.bool:  # crosses back as bytes, viewed as bool by PyTorch
                    value = value.astype(jnp.bool_).astype(jnp.uint8)
                results.append(value)
        self._static_outputs[statics] = static
        return results, (jnp.stack(flags) if flags else None)

    def __call__(self, args: list) -> list:
        if not self._bound:
            with self._lock:
                if not self._bound:
                    self._bind(args)
        if self._pending:
            self._check_pending()
        imports = self._imports
        arrays = []
        for slot, position in enumerate(self._tensor_positions):
            tensor = args[position]
            entry = imports[slot]
            # The same tensor at the same address and version as when its array was kept: its
            # layout cannot have changed (every in-place op, metadata ones too, bumps the version).
            if (entry is not None and entry[3] is not _UNVERSIONED and entry[3] == tensor._version
                    and entry[0]() is tensor and entry[1][0] == tensor.data_ptr()):
                arrays.append(entry[2])
            else:
                arrays.append(self._written_or_new(slot, tensor))
        if self._fence:
            arrays.append(self._fence_array())
        statics = tuple([args[i] for i in self._scalar_positions]) if self._scalar_positions else ()
        seed = int(torch.randint(2**31 - 1, ()).item()) if self.random else None
        outputs, flags = self._jitted(seed, arrays, statics)
        static = self._static_outputs[statics] if self._has_scalars else None
        results = []
        for k, ((mode, detail), value) in enumerate(zip(self._plan, outputs)):
            if mode == _TENSOR:
                dtype, device = detail
                tensor = dlpack.to_torch(value)
                if dtype == torch.bool:
                    tensor = tensor.view(torch.bool)
                elif tensor.dtype != dtype:  # JAX holds int64 as int32 with x64 off
                    tensor = tensor.to(dtype)
                if tensor.device != device:  # JAX without that device (a CPU jaxlib beside CUDA)
                    tensor = tensor.to(device)
                results.append(tensor)
            elif mode == _INPUT:
                results.append(args[detail])
            elif mode == _SCALAR:
                results.append(detail(static[k] if k in static else value))
            else:
                results.append(None)
        if flags is not None:
            if flags.is_ready():
                self._raise_if_out_of_range(flags)
            else:
                with self._lock:
                    self._pending.append(flags)
        return results

    def _written_or_new(self, slot: int, tensor: torch.Tensor) -> jax.Array:
        """The kept array of a tensor written in place since (an optimizer's step), where the
        array shares its memory and the layout held, its version noted; else a new import."""
        entry = self._imports[slot]
        if (entry is not None and entry[4] and entry[0]() is tensor
                and entry[1] == (tensor.data_ptr(), tensor.shape, tensor.stride(), tensor.dtype)):
            if entry[3] is not _UNVERSIONED:
                self._imports[slot] = (*entry[:3], tensor._version, True)
            return entry[2]
        return self._import(slot, tensor)

    def _import(self, slot: int, tensor: torch.Tensor) -> jax.Array:
        """`tensor` as the array the jitted function takes in its slot, kept for the next call:
        for as long as the tensor keeps its memory and layout where the array shares them, and
        its version too where the array is a copy."""
        name = self.program.user_inputs[self._tensor_positions[slot]].name
        if tensor.dtype != self._dtypes[slot]:
            raise InputError(f"graph input {name!r} is {tensor.dtype}; the graph was compiled for "
                             f"{self._dtypes[slot]}")
        # Before reading it: a write meanwhile imports again next call. An inference tensor has
        # no version counter: its shared array is kept while its address and layout hold (writes
        # show through it), a copy of it is never kept.
        version = _UNVERSIONED if tensor.is_inference() else tensor._version
        crossing = self._crossings[slot]
        shared = False
        if crossing == NARROWED:
            array = self._placed(dlpack.to_jax(tensor, what=f"graph input {name!r}", error=InputError))
        else:
            view = tensor.detach()
            contiguous = view.is_contiguous()
            if not contiguous:
                view = view.contiguous()
            if crossing == BOOL:
                view = view.view(torch.uint8)
            elif crossing == WORDS:
                view = view.unsqueeze(-1).view(torch.int32)
            if view.numel() == 0:  # no values to share or go stale: made on the device
                array, shared = jnp.zeros(view.shape, dtypes.numpy_dtype(view.dtype), device=self._jax_device), True
            else:
                array = dlpack.share(view) if contiguous and view.device == self._device else None
                shared = array is not None
                if not shared:  # unaligned, non-contiguous, another device, JAX without the device
                    array = self._placed(dlpack.to_jax(view))
        ref = weakref.ref(tensor, functools.partial(_forget, weakref.ref(self._imports), slot))
        key = (tensor.data_ptr(), tensor.shape, tensor.stride(), tensor.dtype)
        self._imports[slot] = (ref, key, array, version, shared)
        return array

    def _placed(self, array: jax.Array) -> jax.Array:
        if self._jax_device is not None and array.devices() != {self._jax_device}:
            array = jax.device_put(array, self._jax_device)
        return array

    def _fence_array(self) -> jax.Array:
        """A fresh one-element import on the graph's GPU: JAX's program waits for PyTorch's
        stream as of now (see the class's docstring)."""
        fence = torch.empty(1, device=self._device)
        array = dlpack.share(fence)
        return array if array is not None else self._placed(dlpack.to_jax(fence))

    def _check_pending(self) -> None:
        ready: list[jax.Array] = []
        with self._lock:
            pending, self._pending = self._pending, []
            for flags in pending:
                (ready if flags.is_ready() else self._pending).append(flags)
        for flags in ready:
            self._raise_if_out_of_range(flags)

    def _raise_if_out_of_range(self, flags: jax.Array) -> None:
        fits = np.asarray(flags)
        if fits.all():
            return
        names = [self.program.user_inputs[self._tensor_positions[slot]].name
                 for slot, ok in zip(self._checked, fits) if not ok]
        raise InputError(f"graph input(s) {', '.join(map(repr, names))} hold int64 values outside int32's "
                         f"range, and JAX stores int64 as int32 with its x64 mode off: {dtypes.X64_HINT}")


#: The version a kept import of an inference tensor (which has no version counter) records.
_UNVERSIONED = object()

#: What each output of a `CompiledGraph` is: one of its inputs, None, a size or scalar, a tensor.
_INPUT, _NONE, _SCALAR, _TENSOR = range(4)


class _Imports(list):
    """A `CompiledGraph`'s kept imports, one per tensor argument: (weak reference to the tensor,
    (data pointer, shape, strides, dtype), array, the tensor's version where the array is a copy
    else None), or None. A list of its own so that the references' callbacks can hold it
    weakly."""


def _forget(imports_ref: weakref.ref, slot: int, ref: weakref.ref) -> None:
    """A kept tensor died: drop its array (and the memory it holds), unless the slot moved on."""
    imports = imports_ref()
    if imports is not None and imports[slot] is not None and imports[slot][0] is ref:
        imports[slot] = None
