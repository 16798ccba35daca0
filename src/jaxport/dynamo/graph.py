"""`CompiledGraph`: one ATen graph as a jitted JAX function, called the way AOTAutograd calls it."""

from __future__ import annotations

import threading
from typing import Any

import jax
import torch

from ..ir import Program, interpret
from .inputs import WORDS, InputCache, unpacked
from .outputs import OutputPlan, output_kinds, passed_inputs
from .ranges import RangeCheck


class CompiledGraph:
    """One ATen graph as a jitted JAX function, called the way AOTAutograd calls compiled graphs
    (one list of arguments, which it may empty to free them).

    A call does little besides the jitted call itself, each part a piece of its own:

    - `inputs.InputCache`: each tensor argument imported through DLPack once and its array kept
      while it stays valid (the same tensor, address and layout; its version too where the array
      is a copy), held weakly; on CUDA, a fence orders JAX's reads after PyTorch's writes.
    - `ranges.RangeCheck`: int64 values int32 cannot hold (x64 off) are found inside the jitted
      function, and its verdict read once ready, without waiting.
    - `outputs.OutputPlan`: how each output comes back (an input itself, a tensor of its own, a
      size known at trace time), worked out once.
    - Sizes and scalars go to `jax.jit` as one static tuple; a graph that draws random numbers
      takes one seed from PyTorch's CPU generator per call.

    The pieces are set up at the first call, from the arguments themselves (a graph recorded on
    `meta` runs on the tensors it is given; its device is its first tensor off the CPU)."""

    def __init__(self, program: Program, graph_module: torch.fx.GraphModule):
        # On the instance: AOTAutograd wraps the backward's function (functools.wraps copies
        # the instance's attributes, not the class's) and reads this to call it boxed.
        self._boxed_call = True
        self.program = program
        self.output_kinds = output_kinds(graph_module)
        self.random = bool(program.random_nodes())
        self._passed = passed_inputs(graph_module)
        self._bound = False
        # Threads share a compiled graph (Dynamo's cache is the process's): the first call's
        # set-up is one thread's.
        self._lock = threading.Lock()
        # keep_unused: every array argument stays an argument of the compiled program (the
        # CUDA fence does nothing else).
        self._jitted = jax.jit(self._run, static_argnums=(2,), keep_unused=True)

    def _bind(self, args: list) -> None:
        """What every later call reuses, from the first call's arguments."""
        self._count = len(args)
        self._tensor_positions = tuple(i for i, a in enumerate(args) if isinstance(a, torch.Tensor))
        self._scalar_positions = tuple(i for i, a in enumerate(args) if not isinstance(a, torch.Tensor))
        device = next((args[i].device for i in self._tensor_positions if args[i].device.type != "cpu"),
                      torch.device("cpu"))  # a CUDA graph may take CPU scalars
        names = tuple(self.program.user_inputs[i].name for i in self._tensor_positions)
        self._imports = InputCache(self._tensor_positions, names,
                                   tuple(args[i].dtype for i in self._tensor_positions), device)
        self._ranges = RangeCheck(tuple(name for name, kind in zip(names, self._imports.crossings) if kind == WORDS))
        self._plan = OutputPlan(self.output_kinds, self._passed, device)
        self._bound = True

    def _run(self, seed, arrays: list, statics: tuple) -> tuple[list, jax.Array | None]:
        """The jitted function: the program on the arguments, the outputs as the plan says."""
        inputs: list[Any] = [None] * self._count
        for position, value in zip(self._scalar_positions, statics):
            inputs[position] = value
        values, fits = unpacked(self._imports.crossings, arrays)
        for position, value in zip(self._tensor_positions, values):
            inputs[position] = value
        rng = None if seed is None else jax.random.key(seed)
        outputs, _ = interpret(self.program, {}, inputs, rng=rng)
        return self._plan.traced(outputs, arrays, statics), fits

    def __call__(self, args: list) -> list:
        if not self._bound:
            with self._lock:
                if not self._bound:
                    self._bind(args)
        if self._ranges.pending:
            self._ranges.check_pending()
        arrays = self._imports.arrays(args)
        if self._imports.fenced:
            arrays.append(self._imports.fence())
        statics = tuple([args[i] for i in self._scalar_positions]) if self._scalar_positions else ()
        seed = int(torch.randint(2**31 - 1, ()).item()) if self.random else None
        outputs, fits = self._jitted(seed, arrays, statics)
        results = self._plan.to_torch(outputs, args, statics)
        if fits is not None:
            self._ranges.settle(fits)
        return results
