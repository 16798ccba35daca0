"""Training a converted model in JAX: a jitted optax step, and its state as one pytree.

    model = jaxport.from_torch(module, (x,), train=True)
    step = jaxport.train.train_step(model, loss_fn, optax.adam(1e-3))
    state = step.init(jax.random.key(0))
    for batch in batches:
        state, metrics = step(state, batch)
    jaxport.train.load_into_torch(module, state)

`loss_fn(outputs, batch)` returns the scalar loss, or `(loss, {name: metric})`.
A batch is `(inputs, *rest)`: the model is called on `inputs` (an array, a tuple
of positional inputs, or a dict of keyword inputs); `inputs=` overrides that.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

import jax
import jax.numpy as jnp
from jax.sharding import Mesh

from .. import versions
from ..backends.model import JaxModel
from ..checkpoints import is_checkpoint_path
from ..errors import InputError
from ..placement import Rule
from ..sharding import follow_params
from .state import TrainState

if TYPE_CHECKING:
    import optax


def _model_inputs(inputs) -> tuple[tuple, dict]:
    if isinstance(inputs, Mapping):
        return (), dict(inputs)
    if isinstance(inputs, (tuple, list)):
        return tuple(inputs), {}
    return (inputs,), {}


def _default_inputs(batch):
    if not isinstance(batch, (tuple, list)) or not batch:
        raise InputError(
            "a batch is (model inputs, *targets) by default; got "
            f"{type(batch).__name__}: pass inputs=lambda batch: ... to train_step"
        )
    return batch[0]


def _loss_and_metrics(result) -> tuple[jax.Array, dict]:
    if isinstance(result, tuple):
        loss, metrics = result
        return loss, dict(metrics)
    return result, {}


@dataclasses.dataclass(frozen=True)
class MixedPrecision:
    """A mixed-precision training policy, as PyTorch's AMP trains: the model computes in low
    precision (convert it with `from_torch(..., train=True, dtype=jnp.float16)` or a
    `jaxport.Precision`), while the state keeps float32 master copies of the trainable weights
    (the model gets them cast to its own parameter dtypes each step, the gradients come back in
    float32) and, for float16, scales the loss so small gradients do not flush to zero.

    Args:
      master: the dtype of the trainable weights in the state (None: the model's own).
      loss_scale: "dynamic" (`torch.amp.GradScaler`'s algorithm: a step whose gradients are not
        all finite is skipped and the scale multiplied by `backoff_factor`; after
        `growth_interval` finite steps in a row it is multiplied by `growth_factor`), a fixed
        scale, or None (bfloat16 needs none).
    """

    master: Any = jnp.float32
    loss_scale: str | float | None = None
    initial_scale: float = 2.0**16
    growth_factor: float = 2.0
    backoff_factor: float = 0.5
    growth_interval: int = 2000

    def __post_init__(self):
        if isinstance(self.loss_scale, str) and self.loss_scale != "dynamic":
            raise InputError(f"MixedPrecision(loss_scale=...) is 'dynamic', a number or None, got {self.loss_scale!r}")


class ScaledState(NamedTuple):
    """The optimizer state under loss scaling: the optimizer's own, the scale, and the count of
    finite steps since it last changed (both saved with checkpoints, as part of `opt_state`)."""

    inner: Any
    scale: jax.Array
    good_steps: jax.Array


class TrainStep:
    """A jitted `step(state, batch) -> (state, metrics)`; `init` builds the first state.

    Made by `train_step`. The step donates the state it is given (its buffers are
    reused for the new one), so keep using the state it returns.
    """

    def __init__(self, model: JaxModel, loss_fn: Callable, optimizer, *, inputs: Callable | None = None,
                 trainable: Callable[[str], bool] | None = None, donate: bool = True,
                 precision: MixedPrecision | None = None):
        self.model = model
        self.precision = precision
        #: the dtype each parameter has in the model: master weights are cast to it for the forward
        self._model_dtypes = {k: getattr(v, "dtype", None) for k, v in model.params.items()}
        self.loss_fn = loss_fn
        self.optimizer = optimizer
        self.inputs = inputs or _default_inputs
        names = set(model.parameter_names)
        if trainable is not None:
            names = {name for name in names if trainable(name)}
        self.trainable_names = frozenset(names)
        self._donate = donate
        self._jitted: dict[Any, Callable] = {}

    def init(self, rng: jax.Array | int = 0, params: Mapping[str, jax.Array] | str | os.PathLike | None = None, *,
             mesh: Mesh | None = None, rules: Iterable[Rule] = ()) -> TrainState:
        """The state before the first step: the model's (or the given) params, a fresh
        optimizer state and the key dropout draws from.

        `params` may be the path of a safetensors checkpoint to start from, read as
        `JaxModel.load_weights` reads one (with `mesh`, each device's share only, placed by
        `rules`) into the state alone: the model's own params are neither read nor copied."""
        if is_checkpoint_path(params):
            params = self.model.weights_from(params, mesh=mesh, rules=rules)  # the state's own arrays
        else:
            if mesh is not None:
                raise InputError("init places params on a mesh as it reads them from a checkpoint; "
                                 "place others with jaxport.sharding.shard")
            params = dict(self.model.params if params is None else params)
            if self._donate:  # steps donate the state they get: never hand them the model's own arrays
                params = {k: jnp.copy(v) if isinstance(v, jax.Array) else v for k, v in params.items()}
        trainable = {k: v for k, v in params.items() if k in self.trainable_names}
        buffers = {k: v for k, v in params.items() if k not in self.trainable_names}
        policy = self.precision
        if policy is not None and policy.master is not None:
            trainable = {k: _cast(v, policy.master) for k, v in trainable.items()}
        opt_state = self.optimizer.init(trainable)
        if policy is not None and policy.loss_scale is not None:
            initial = policy.initial_scale if policy.loss_scale == "dynamic" else float(policy.loss_scale)
            opt_state = ScaledState(opt_state, jnp.asarray(initial, jnp.float32), jnp.zeros((), jnp.int32))
        key = jax.random.key(rng) if isinstance(rng, int) else rng
        state = TrainState(trainable, buffers, opt_state, key, jnp.zeros((), jnp.int32))
        return follow_params(state)  # params jaxport.sharding.shard placed: the rest joins their mesh

    def loss(self, state: TrainState, batch) -> tuple[jax.Array, tuple[dict, dict]]:
        """(loss, (metrics, buffer updates)) for `batch` at `state`, without updating it."""
        return self._objective(state.params, state, batch)

    def _objective(self, params, state: TrainState, batch):
        args, kwargs = _model_inputs(self.inputs(batch))
        rng = jax.random.fold_in(state.rng, state.step)
        if self.precision is not None and self.precision.master is not None:
            params = {k: _cast(v, self._model_dtypes.get(k)) for k, v in params.items()}
        outputs, updates = self.model.apply_with_updates({**state.buffers, **params}, *args, rng=rng, **kwargs)
        loss, metrics = _loss_and_metrics(self.loss_fn(outputs, batch))
        return loss, (metrics, updates)

    def _step(self, state: TrainState, batch) -> tuple[TrainState, dict]:
        import optax  # optional (`jaxport[train]`)

        scaled = isinstance(state.opt_state, ScaledState)
        scale = state.opt_state.scale if scaled else None

        def objective(params):
            loss, aux = self._objective(params, state, batch)
            # the gradient is taken of the scaled loss (in float32), the loss reported unscaled
            return (loss.astype(jnp.float32) * scale if scaled else loss), (loss, aux)

        (_, (loss, (metrics, updates))), grads = jax.value_and_grad(objective, has_aux=True)(state.params)
        # JAX's gradient of a real loss in a complex parameter is the conjugate of PyTorch's (the
        # direction of steepest descent, which optax's rules take): conjugated, complex weights
        # train as in PyTorch.
        grads = jax.tree.map(lambda g: jnp.conj(g) if jnp.iscomplexobj(g) else g, grads)
        opt_state = state.opt_state.inner if scaled else state.opt_state
        if scaled:
            grads = jax.tree.map(lambda g: (g / scale).astype(g.dtype), grads)
        changes, new_opt_state = self.optimizer.update(grads, opt_state, state.params)
        params = optax.apply_updates(state.params, changes)
        buffers = {k: updates.get(k, v) for k, v in state.buffers.items()}
        if scaled:
            params, buffers, new_opt_state, extra = self._unscale(state, grads, params, buffers, new_opt_state)
            metrics = {**metrics, **extra}
        new = TrainState(params, buffers, new_opt_state, state.rng, state.step + 1)
        return new, {"loss": loss, **metrics}

    def _unscale(self, state: TrainState, grads, params, buffers, opt_state):
        """GradScaler's rule: a step with non-finite gradients is skipped (the old params, buffers
        and optimizer state kept) and the scale backed off; after `growth_interval` finite steps
        in a row it grows."""
        policy = self.precision
        finite = jnp.all(jnp.asarray([jnp.all(jnp.isfinite(g)) for g in jax.tree.leaves(grads)]))
        keep = functools.partial(jax.tree.map, lambda new, old: jnp.where(finite, new, old))
        old = state.opt_state
        params, buffers = keep(params, state.params), keep(buffers, state.buffers)
        inner = keep(opt_state, old.inner)
        scale, good = old.scale, old.good_steps
        if policy.loss_scale == "dynamic":
            grown = good + 1 >= policy.growth_interval
            scale = jnp.where(finite, jnp.where(grown, scale * policy.growth_factor, scale),
                              scale * policy.backoff_factor)
            good = jnp.where(finite & ~grown, good + 1, 0)
        return params, buffers, ScaledState(inner, scale, good), {"loss_scale": old.scale, "grads_finite": finite}

    def _compiled(self, state: TrainState) -> Callable:
        # One jit per placement of the state: a sharded state keeps its shardings across steps
        # (out_shardings pins them) instead of leaving XLA to pick new ones.
        shardings = jax.tree.map(lambda a: getattr(a, "sharding", None), state)
        leaves = jax.tree.leaves(shardings, is_leaf=lambda s: s is None)
        key = tuple(leaves)
        if key not in self._jitted:
            sharded = any(s is not None and len(s.device_set) > 1 for s in leaves)
            kwargs = {"out_shardings": (shardings, None)} if sharded else {}
            self._jitted[key] = jax.jit(self._step, donate_argnums=(0,) if self._donate else (), **kwargs)
        return self._jitted[key]

    def __call__(self, state: TrainState, batch) -> tuple[TrainState, dict]:
        return self._compiled(state)(state, batch)


def train_step(model: JaxModel, loss_fn: Callable, optimizer: optax.GradientTransformation, *, inputs: Callable | None = None,
               trainable: Callable[[str], bool] | None = None, donate: bool = True,
               precision: MixedPrecision | None = None) -> TrainStep:
    """A jitted training step for `model` over an optax `optimizer`.

    Args:
      model: a `JaxModel`, usually converted with `train=True`.
      loss_fn: `loss_fn(outputs, batch) -> loss` or `(loss, {name: metric})`.
      optimizer: an `optax.GradientTransformation`.
      inputs: `inputs(batch)` gives the model inputs; by default `batch[0]`.
      trainable: `trainable(name)` picks the parameters to train (default: all of them);
        the rest are held fixed with the buffers.
      donate: reuse the old state's memory for the new one.
      precision: a `MixedPrecision` policy: float32 master weights, loss scaling for float16.
    """
    versions.require("optax")
    if not model.jittable:
        raise InputError(f"{model.name} has ops whose output shape depends on values, so it cannot be jitted "
                         "for training")
    return TrainStep(model, loss_fn, optimizer, inputs=inputs, trainable=trainable, donate=donate,
                     precision=precision)


def _cast(value, dtype):
    """A floating-point array in `dtype` (others, and dtype None, unchanged)."""
    if dtype is None or not hasattr(value, "dtype") or not jnp.issubdtype(value.dtype, jnp.floating):
        return value
    return value.astype(dtype)
