"""`JaxModel`: a converted model's parameters as a pytree plus a pure `apply`."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding

from .. import cache
from ..errors import InputError
from ..ir import Translation, interpret
from ..placement import Rule, Rules, auto_axes, partition_spec, validate
from ..progress import progress
from .inputs import as_jax, as_weight, check_input, is_abstract
from .weights import weights_of


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

    A model converted from a module on the `meta` device has no weight values yet:
    `params` holds a `jax.ShapeDtypeStruct` for each, `apply` runs on weights given to
    it, and `load_weights` gives the model its own.
    """

    def __init__(self, translation: Translation):
        program = self.program = translation.program
        weights = translation.params.items()
        self.params = {k: as_weight(v, k) for k, v in progress(weights, total=len(weights),
                                                               what=f"{translation.name}: taking weights")}
        self.parameter_names = tuple(translation.parameter_names)
        self.buffer_names = tuple(translation.buffer_names)
        self.tied = dict(translation.tied)
        #: Buffers the module computes rather than stores (non-persistent ones: a rotary embedding's
        #: `inv_freq`), in no checkpoint: `load_weights` keeps their values when its source lacks them.
        self.computed_buffers = frozenset(translation.computed_buffers)
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
        # A program folding weights as constants (an ONNX model's initializers kept as constants)
        # is not written to the persistent compilation cache.
        self._folds_weights = sum(getattr(value, "nbytes", 0) for value in program.constants.values()
                                  ) > cache.FOLDED_BYTES
        self.strict = False

    @property
    def missing_weights(self) -> tuple[str, ...]:
        """Names of the weights without values (a model converted on the `meta` device)."""
        return tuple(name for name, value in self.params.items() if is_abstract(value))

    def load_weights(self, weights: Any, *, strict: bool = True, prefix: str = "", mesh: Mesh | None = None,
                     rules: Iterable[Rule] = ()) -> JaxModel:
        """Give the model its weights, from

        - a `{name: tensor or array}` mapping (a `state_dict`, NumPy or JAX arrays),
        - an `nn.Module` (its parameters and all its buffers, non-persistent ones too), or
        - the path of a safetensors checkpoint: a `.safetensors` file, or a Hugging Face checkpoint
          directory (`model.safetensors.index.json` and its shards, or one `model.safetensors`),
          read tensor by tensor (`jaxport.checkpoints`); a pickled checkpoint (`.bin`, `.pt`) is
          refused, since loading it would run its code.

        Each weight must have the shape and dtype the model was converted with (torch tensors, on
        any device, cross by DLPack); every name, shape and dtype is checked before any weight is
        read (a checkpoint's from its headers). A tied name may stand for the weight it shares,
        and a buffer the module computes rather than stores (a non-persistent one, such as a rotary
        embedding's `inv_freq`) keeps the value it has when the source lacks it. `strict=True`
        also refuses names the model does not have. `prefix` is put before every name of
        `weights` (a wrapper's names are its inner module's under a prefix).

        With `mesh`, each weight is placed on it by `rules` (as `jaxport.sharding.shard` places
        them) as it is read; from a checkpoint, only each device's slice is read, and in a run of
        several processes only this process's devices' slices. Replaces `params`; returns the model
        (`weights_from` gives the weights without replacing them).

            model = jaxport.from_torch(module.to("meta"), args_on_meta)   # no weight copied
            model.load_weights("checkpoint/")                             # or a state_dict
        """
        self.params = self.weights_from(weights, strict=strict, prefix=prefix, mesh=mesh, rules=rules)
        return self

    def weights_from(self, weights: Any, *, strict: bool = True, prefix: str = "", mesh: Mesh | None = None,
                     rules: Iterable[Rule] = ()) -> dict[str, jax.Array]:
        """The weights `load_weights` would give the model, checked as it checks them, as a new
        `params` dict, without replacing the model's (a training state's own, say)."""
        source = weights_of(weights, prefix)
        placements = self._placements(mesh, rules)
        aliases = {kept: alias for alias, kept in self.tied.items()}
        chosen, kept, missing, problems = {}, {}, [], []
        for name, current in self.params.items():
            key = name if name in source else aliases.get(name)
            if key not in source:
                if name in self.computed_buffers and not is_abstract(current):
                    kept[name] = current
                else:
                    missing.append(name)
                continue
            weight = source[key]
            if weight.shape != tuple(current.shape) or weight.dtype != np.dtype(current.dtype):
                problems.append(f"weight '{key}' is {weight.dtype.name}{list(weight.shape)}, the model's "
                                f"{np.dtype(current.dtype).name}{list(current.shape)}")
                continue
            chosen[name] = weight
        problems = [f"no weight '{name}'" for name in missing] + problems
        if strict:
            known = set(self.params) | set(self.tied)
            problems += [f"unknown weight '{name}'" for name in source if name not in known]
        if problems:
            shown = "; ".join(problems[:5]) + (f"; and {len(problems) - 5} more" if len(problems) > 5 else "")
            hint = (" (buffers a state_dict leaves out, such as non-persistent ones, come with the module itself: "
                    "pass the nn.Module)") if isinstance(weights, Mapping) and set(missing) & set(self.buffer_names) else ""
            raise InputError(f"{self.name}: load_weights: {shown}{hint}")
        loaded = {}
        for name, weight in progress(chosen.items(), total=len(chosen), what=f"{self.name}: loading weights"):
            loaded[name] = weight.read(placements.get(name))
        for name, value in kept.items():
            loaded[name] = value if name not in placements else jax.device_put(value, placements[name])
        return {name: loaded[name] for name in self.params}

    def _placements(self, mesh: Mesh | None, rules: Iterable[Rule]) -> dict[str, NamedSharding]:
        """{weight name: its sharding on `mesh` by `rules`} (nothing without a mesh)."""
        if mesh is None:
            if tuple(rules):
                raise InputError(f"{self.name}: load_weights got sharding rules but no mesh")
            return {}
        rules = Rules(rules)
        mesh = auto_axes(mesh)
        validate(rules, mesh)
        return {name: NamedSharding(mesh, partition_spec(name, tuple(value.shape), rules, mesh))
                for name, value in self.params.items()}

    def _require_weights(self) -> None:
        missing = self.missing_weights
        if missing:
            raise InputError(
                f"{self.name} has no values for {len(missing)} weight(s) ('{missing[0]}', ...): it was "
                "converted on the meta device. Give it weights with model.load_weights(state_dict) "
                "or call model.apply(params, ...)")

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
        for name, value in params.items():
            if is_abstract(value):
                raise InputError(f"weight '{name}' has no values (a jax.ShapeDtypeStruct): the model was "
                                 "converted on the meta device; pass real weights, or use model.load_weights")
        inputs = []
        for x, spec in zip(leaves, self.program.user_inputs):
            x = as_jax(x, what=f"input '{spec.name}'")
            check_input(x, spec, self.fixed_shape_hint, self.program.dim_ranges)
            inputs.append(x)
        return interpret(self.program, params, inputs, strict=self.strict, rng=rng)

    def __call__(self, *args, rng: jax.Array | None = None, **kwargs) -> Any:
        self._require_weights()
        if self._folds_weights:
            with cache.uncached():
                return self._call(functools.partial(self._jitted, self.params), args, kwargs, rng)
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

    def frozen(self, *, persistent_cache: bool = False) -> Callable[..., Any]:
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

        Its programs are not written to JAX's persistent compilation cache, which would keep a
        copy of the weights on disk, unless `persistent_cache=True` (see `jaxport.cache`).
        """
        self._require_weights()
        run = functools.partial(self._run, dict(self.params))
        if self.jittable:
            run = jax.jit(run)
        writes = contextlib.nullcontext if persistent_cache else cache.uncached

        def call(*args, rng: jax.Array | None = None, **kwargs) -> Any:
            with writes():
                return self._call(run, args, kwargs, rng)

        return call

    def __repr__(self) -> str:
        n = sum(int(np.prod(p.shape)) for p in self.params.values())
        mode = ", training mode" if self.training else ""
        return (
            f"JaxModel({self.name}: {len(self.program.nodes)} ops, {len(self.params)} tensors, "
            f"{n:,} values{mode})"
        )
