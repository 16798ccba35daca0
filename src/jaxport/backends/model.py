"""`JaxModel`: a converted model's parameters as a pytree plus a pure `apply`."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

import jax
import numpy as np

from ..errors import InputError, ModelFileError
from ..ir import Translation, interpret
from .inputs import as_jax, check_input


class JaxModel:
    """A converted model.

    `params` is a flat `{state_dict name: jax.Array}` of parameters and buffers;
    `apply(params, *args, **kwargs)` is a pure function of them and the inputs,
    so it composes with `jax.jit`, `jax.grad` and `jax.vmap`. Calling the model
    runs a jitted `apply` with its own `params`.

    A model with ops whose output shape depends on tensor values (nonzero,
    unique, masked_select, ...) cannot be traced by `jax.jit`; calling it then
    runs `apply` op by op instead (`jittable` says which), and `jax.jit(apply)`
    raises an error naming the op.

    Tied weights appear once, under their first name; `tied` maps each other
    name to it. `parameter_names` and `buffer_names` say which entries are
    trainable parameters (`split_params` separates them for `jax.grad`).

    A model converted in training mode (`training`) uses batch statistics in
    BatchNorm, returns the updated running statistics from `apply_with_updates`,
    and draws dropout masks from the `rng=` key that `apply` then requires.
    """

    def __init__(self, translation: Translation):
        program = self.program = translation.program
        self.params = {k: as_jax(v, f"weight '{k}'", ModelFileError) for k, v in translation.params.items()}
        self.parameter_names = tuple(translation.parameter_names)
        self.buffer_names = tuple(translation.buffer_names)
        self.tied = dict(translation.tied)
        self.name = translation.name
        self.training = translation.training
        #: Names of the flat outputs, where the source format has them (ONNX graph outputs).
        self.output_names = None if translation.output_names is None else tuple(translation.output_names)
        #: Nodes that draw random numbers: in a training-mode model they need `rng=`.
        self.random_nodes = program.random_nodes()
        #: What to do about an input whose fixed shape does not match (frontend-specific).
        self.fixed_shape_hint = translation.fixed_shape_hint
        self._flatten_inputs = translation.flatten_inputs
        self._build_outputs = translation.build_outputs
        self.jittable = not program.value_dependent_nodes()
        self._jitted = jax.jit(self._run) if self.jittable else self._run
        self.strict = False

    def split_params(self, params: Mapping[str, Any] | None = None) -> tuple[dict, dict]:
        """(trainable parameters, everything else), to differentiate only the former."""
        params = self.params if params is None else params
        names = set(self.parameter_names)
        trainable = {k: v for k, v in params.items() if k in names}
        rest = {k: v for k, v in params.items() if k not in names}
        return trainable, rest

    def apply(self, params: Mapping[str, Any], *args, rng: jax.Array | None = None, **kwargs) -> Any:
        """Run the model on `params` and inputs; returns outputs shaped like PyTorch's.

        `rng` is the `jax.random` key random ops draw from (dropout in training mode);
        each random node folds in its own index, so one key per step is enough.
        """
        outputs, _updates = self.apply_with_updates(params, *args, rng=rng, **kwargs)
        return outputs

    def apply_with_updates(
        self, params: Mapping[str, Any], *args, rng: jax.Array | None = None, **kwargs
    ) -> tuple[Any, dict]:
        """Like `apply`, also returning `{name: new value}` for the buffers (and inputs) the
        model mutates: BatchNorm's running statistics in training mode."""
        self._require_rng(rng)
        flat, updates = self._run(params, self._flatten_inputs(args, kwargs), rng)
        return self._build_outputs(flat), updates

    def _require_rng(self, rng: jax.Array | None) -> None:
        if rng is None and self.training and self.random_nodes:
            # A silent default key would give every training step the same dropout mask.
            first = self.random_nodes[0]
            raise InputError(
                f"{self.name} was converted in training mode and draws random numbers "
                f"({first.op} at {first.where()}; {len(self.random_nodes)} random node(s) in all): "
                "pass rng=jax.random.key(...), a new key each step"
            )

    def _run(self, params: Mapping[str, Any], leaves: list, rng: jax.Array | None) -> tuple[list, dict]:
        """The program on flat inputs: pure, and what `__call__` jits."""
        inputs = []
        for x, spec in zip(leaves, self.program.user_inputs):
            x = as_jax(x, what=f"input '{spec.name}'")
            check_input(x, spec, self.fixed_shape_hint)
            inputs.append(x)
        return interpret(self.program, params, inputs, strict=self.strict, rng=rng)

    def __call__(self, *args, rng: jax.Array | None = None, **kwargs) -> Any:
        return self._call(functools.partial(self._jitted, self.params), args, kwargs, rng)

    def _call(self, run: Callable[[list, jax.Array | None], tuple[list, dict]], args: tuple, kwargs: dict,
              rng: jax.Array | None) -> Any:
        """Calling the model: `run` (flat inputs, rng) -> (flat outputs, updates) on its inputs."""
        self._require_rng(rng)
        # Flattened first, so inputs jax.jit cannot take (a Hugging Face cache object) arrive as arrays.
        leaves = self._flatten_inputs(args, kwargs)
        leaves = [as_jax(x, f"input '{spec.name}'") for x, spec in zip(leaves, self.program.user_inputs)]
        flat, _updates = run(leaves, rng)
        return self._build_outputs(flat)

    def frozen(self) -> Callable[..., Any]:
        """The model as a function of its inputs alone, compiled with its current `params`
        as constants of the program: for inference at full speed.

        XLA then does everything that depends only on the parameters once, when it compiles:
        convolution kernels laid out as its CPU convolutions want them (a transpose of every
        kernel on every call otherwise), weight normalization, anything else computed from
        parameters and buffers alone.
        wav2vec2 at batch 1 on CPU: 65 ms a call through `__call__`, 33 ms frozen. The
        executable holds its own copy of the weights and takes longer to compile, and later
        changes to `params` are not seen: call `frozen()` again. Takes the inputs (and
        `rng=`) as calling the model does.
        """
        run = functools.partial(self._run, dict(self.params))
        if self.jittable:
            run = jax.jit(run)

        def call(*args, rng: jax.Array | None = None, **kwargs) -> Any:
            return self._call(run, args, kwargs, rng)

        return call

    def __repr__(self) -> str:
        n = sum(int(np.prod(p.shape)) for p in self.params.values())
        mode = ", training mode" if self.training else ""
        return (
            f"JaxModel({self.name}: {len(self.program.nodes)} ops, {len(self.params)} tensors, "
            f"{n:,} values{mode})"
        )
