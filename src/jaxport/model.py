"""`JaxModel`: a converted model's parameters as a pytree plus a pure `apply`."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from . import _narrowing
from .errors import InputError, ModelFileError
from .program import Input, Program, interpret


def _as_jax(x, what: str):
    """Torch tensors and NumPy arrays become JAX arrays; Python scalars stay as they are. Values
    that JAX's 64-bit narrowing (x64 off) would change by more than rounding are an `InputError`."""
    if isinstance(x, jax.Array):
        return x
    if isinstance(x, (np.ndarray, np.generic)):
        _narrowing.check_array(x, what, InputError)
        return jnp.asarray(x) if isinstance(x, np.ndarray) else x
    if type(x).__module__.startswith("torch"):
        from ._torch_utils import to_jax

        return to_jax(x, what=what, error=InputError)
    return x


def _as_param(x, name: str):
    """A weight as a JAX array; a value JAX's 64-bit narrowing would change by more than rounding
    is a `ModelFileError`."""
    if isinstance(x, np.ndarray):
        _narrowing.check_array(x, f"weight '{name}'", ModelFileError)
        return jnp.asarray(x)
    return x


def _check_input(x, spec: Input, hint: str = "") -> None:
    if spec.spec is None or not hasattr(x, "shape"):
        return
    want = spec.spec
    shape = tuple(x.shape)
    if not want.admits(shape):
        fixed = want.shape is not None and None not in want.shape
        raise InputError(
            f"input '{spec.name}' has shape {shape}, but the model expects {want.describe()}"
            + (f" ({hint})" if fixed and hint else "")
        )
    expected = np.dtype(jax.dtypes.canonicalize_dtype(want.dtype))
    if np.dtype(x.dtype) != expected:
        raise InputError(
            f"input '{spec.name}' has dtype {np.dtype(x.dtype).name}, but the model expects "
            f"{np.dtype(want.dtype).name}"
        )


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

    def __init__(
        self,
        program: Program,
        params: dict[str, jax.Array],
        *,
        flatten_inputs: Callable[[tuple, dict], list],
        build_outputs: Callable[[list], Any],
        parameter_names: Sequence[str] = (),
        buffer_names: Sequence[str] = (),
        tied: Mapping[str, str] | None = None,
        name: str = "model",
        fixed_shape_hint: str = "",
        training: bool = False,
    ):
        self.program = program
        if any(isinstance(v, np.ndarray) for v in params.values()):
            params = {k: _as_param(v, k) for k, v in params.items()}
        self.params = params
        self.parameter_names = tuple(parameter_names)
        self.buffer_names = tuple(buffer_names)
        self.tied = dict(tied or {})
        self.name = name
        self.training = training
        #: Nodes that draw random numbers: in a training-mode model they need `rng=`.
        self.random_nodes = program.random_nodes()
        #: What to do about an input whose fixed shape does not match (frontend-specific).
        self.fixed_shape_hint = fixed_shape_hint
        self._flatten_inputs = flatten_inputs
        self._build_outputs = build_outputs
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
            x = _as_jax(x, what=f"input '{spec.name}'")
            _check_input(x, spec, self.fixed_shape_hint)
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
        leaves = [_as_jax(x, f"input '{spec.name}'") for x, spec in zip(leaves, self.program.user_inputs)]
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
