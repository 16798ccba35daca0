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

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp

from ..backends.model import JaxModel
from ..errors import InputError
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


class TrainStep:
    """A jitted `step(state, batch) -> (state, metrics)`; `init` builds the first state.

    Made by `train_step`. The step donates the state it is given (its buffers are
    reused for the new one), so keep using the state it returns.
    """

    def __init__(self, model: JaxModel, loss_fn: Callable, optimizer, *, inputs: Callable | None = None,
                 trainable: Callable[[str], bool] | None = None, donate: bool = True):
        self.model = model
        self.loss_fn = loss_fn
        self.optimizer = optimizer
        self.inputs = inputs or _default_inputs
        names = set(model.parameter_names)
        if trainable is not None:
            names = {name for name in names if trainable(name)}
        self.trainable_names = frozenset(names)
        self._donate = donate
        self._jitted: dict[Any, Callable] = {}

    def init(self, rng: jax.Array | int = 0, params: Mapping[str, jax.Array] | None = None) -> TrainState:
        """The state before the first step: the model's (or the given) params, a fresh
        optimizer state and the key dropout draws from."""
        params = dict(self.model.params if params is None else params)
        if self._donate:  # steps donate the state they get: never hand them the model's own arrays
            params = {k: jnp.copy(v) if isinstance(v, jax.Array) else v for k, v in params.items()}
        trainable = {k: v for k, v in params.items() if k in self.trainable_names}
        buffers = {k: v for k, v in params.items() if k not in self.trainable_names}
        key = jax.random.key(rng) if isinstance(rng, int) else rng
        state = TrainState(trainable, buffers, self.optimizer.init(trainable), key, jnp.zeros((), jnp.int32))
        return follow_params(state)  # params jaxport.sharding.shard placed: the rest joins their mesh

    def loss(self, state: TrainState, batch) -> tuple[jax.Array, tuple[dict, dict]]:
        """(loss, (metrics, buffer updates)) for `batch` at `state`, without updating it."""
        return self._objective(state.params, state, batch)

    def _objective(self, params, state: TrainState, batch):
        args, kwargs = _model_inputs(self.inputs(batch))
        rng = jax.random.fold_in(state.rng, state.step)
        outputs, updates = self.model.apply_with_updates({**state.buffers, **params}, *args, rng=rng, **kwargs)
        loss, metrics = _loss_and_metrics(self.loss_fn(outputs, batch))
        return loss, (metrics, updates)

    def _step(self, state: TrainState, batch) -> tuple[TrainState, dict]:
        import optax  # optional (`jaxport[train]`)

        (loss, (metrics, updates)), grads = jax.value_and_grad(self._objective, has_aux=True)(
            state.params, state, batch
        )
        changes, opt_state = self.optimizer.update(grads, state.opt_state, state.params)
        params = optax.apply_updates(state.params, changes)
        buffers = {k: updates.get(k, v) for k, v in state.buffers.items()}
        new = TrainState(params, buffers, opt_state, state.rng, state.step + 1)
        return new, {"loss": loss, **metrics}

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
               trainable: Callable[[str], bool] | None = None, donate: bool = True) -> TrainStep:
    """A jitted training step for `model` over an optax `optimizer`.

    Args:
      model: a `JaxModel`, usually converted with `train=True`.
      loss_fn: `loss_fn(outputs, batch) -> loss` or `(loss, {name: metric})`.
      optimizer: an `optax.GradientTransformation`.
      inputs: `inputs(batch)` gives the model inputs; by default `batch[0]`.
      trainable: `trainable(name)` picks the parameters to train (default: all of them);
        the rest are held fixed with the buffers.
      donate: reuse the old state's memory for the new one.
    """
    if not model.jittable:
        raise InputError(f"{model.name} has ops whose output shape depends on values, so it cannot be jitted "
                         "for training")
    return TrainStep(model, loss_fn, optimizer, inputs=inputs, trainable=trainable, donate=donate)
