"""Placing a converted model's parameters on a device mesh by name: data parallel, FSDP, tensor parallel.

    mesh = jaxport.sharding.device_mesh(data=2, model=4)             # or jax.make_mesh(...)
    rules = jaxport.sharding.fsdp(min_size=2**16) + jaxport.sharding.tensor_parallel()
    state = jaxport.sharding.shard(step.init(0), mesh, rules)       # params, buffers and optax state placed
    for batch in batches:
        state, metrics = step(state, jaxport.sharding.shard_batch(batch, mesh))

jaxport's parameters are flat dicts keyed by PyTorch `state_dict` names, so placement is
by name: `rules` is an ordered list of `(regex, spec)`. A `PartitionSpec` spec places
the parameters whose name the regex matches (`re.search`); the first matching one
wins and a parameter none matches is replicated. A `ShardLargest` spec (what `fsdp()`
makes) then shards one more dimension of the matching parameters, on top of that
placement, which is what lets `fsdp() + tensor_parallel()` mean 2-D sharding in
either order. Once the parameters are placed, `jax.jit` (and `jaxport.train.train_step`)
propagate the placement through the whole computation: XLA inserts the collectives.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

import jax
import numpy as np
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec

from .backends.model import JaxModel
from .placement import (
    FSDP_MIN_SIZE,
    AnyMesh,
    Rule,
    Rules,
    ShardingError,
    ShardLargest,
    auto_axes,
    axes_of,
    partition_spec,
    validate,
)

P = PartitionSpec
T = TypeVar("T")
S = TypeVar("S")

# -- presets ------------------------------------------------------------------------------------

def data_parallel() -> Rules:
    """No rules: every parameter replicated. Pair it with `shard_batch(batch, mesh, "data")`."""
    return Rules()


def fsdp(axis: str = "data", min_size: int = FSDP_MIN_SIZE, pattern: str = ".*") -> Rules:
    """Fully sharded data parallel: each parameter (matching `pattern`) of at least
    `min_size` elements split along its largest dimension divisible by `axis`'s size.

    Its rule refines whatever placement the other rules give, so it combines with
    `tensor_parallel()` in either order. The batch goes over the same `axis`.
    """
    return Rules([(pattern, ShardLargest(axis, min_size))])


def _column(axis: str, weight_in_out: bool) -> tuple[PartitionSpec, PartitionSpec]:
    """Weight and bias specs of a layer whose output features are split over `axis`."""
    return (P(None, axis) if weight_in_out else P(axis, None)), P(axis)


def _row(axis: str, weight_in_out: bool) -> PartitionSpec:
    """The weight spec of a layer whose input features are split over `axis` (bias replicated)."""
    return P(axis, None) if weight_in_out else P(None, axis)


def tensor_parallel(axis: str = "model", embeddings: str = "replicate") -> Rules:
    """Megatron-style tensor parallelism for transformer blocks, by module name.

    The first layer of each pair is column-parallel (its output features split over
    `axis`), the second row-parallel (its input features split), so a block needs one
    all-reduce per pair. Covered names:

    - GPT-2 (HF `Conv1D`, weights stored (in, out)): `attn.c_attn`, `mlp.c_fc` column;
      `attn.c_proj`, `mlp.c_proj` row.
    - Llama, Mistral, Qwen (`nn.Linear`, (out, in)): `q_proj`, `k_proj`, `v_proj`,
      `gate_proj`, `up_proj` column; `o_proj`, `down_proj` row.
    - BERT: `attention.self.query/key/value`, `intermediate.dense` column;
      `attention.output.dense`, `output.dense` row.

    `embeddings="replicate"` (the default) keeps token embeddings and the LM head whole:
    vocabularies often are not divisible by the axis (GPT-2's 50257 is odd) and they are
    a few percent of a large model's weights; add `fsdp()` to split them over the data
    axis. `embeddings="vocab"` shards them by vocabulary entry over `axis`.
    """
    if embeddings not in ("replicate", "vocab"):
        raise ShardingError(f"embeddings must be 'replicate' or 'vocab'; got {embeddings!r}")
    conv_col, conv_col_bias = _column(axis, weight_in_out=True)
    lin_col, lin_col_bias = _column(axis, weight_in_out=False)
    rules: list[Rule] = [
        # GPT-2
        (r"(^|\.)(attn\.c_attn|mlp\.c_fc)\.weight$", conv_col),
        (r"(^|\.)(attn\.c_attn|mlp\.c_fc)\.bias$", conv_col_bias),
        (r"(^|\.)(attn|mlp)\.c_proj\.weight$", _row(axis, weight_in_out=True)),
        # Llama family
        (r"(^|\.)(q_proj|k_proj|v_proj|gate_proj|up_proj)\.weight$", lin_col),
        (r"(^|\.)(q_proj|k_proj|v_proj|gate_proj|up_proj)\.bias$", lin_col_bias),
        (r"(^|\.)(o_proj|down_proj)\.weight$", _row(axis, weight_in_out=False)),
        # BERT
        (r"(^|\.)(attention\.self\.(query|key|value)|intermediate\.dense)\.weight$", lin_col),
        (r"(^|\.)(attention\.self\.(query|key|value)|intermediate\.dense)\.bias$", lin_col_bias),
        (r"(^|\.)output\.dense\.weight$", _row(axis, weight_in_out=False)),
    ]
    if embeddings == "vocab":
        rules.append((r"(^|\.)(wte|embed_tokens|word_embeddings|lm_head)\.weight$", P(axis, None)))
    return Rules(rules)


# -- resolving rules ------------------------------------------------------------------------------

def device_mesh(devices: Any = None, **axes: int) -> Mesh:
    """A mesh with `Auto` axes of the given sizes over `devices` (default: every device of
    every process), e.g. `device_mesh(data=2, model=4)`. One size may be -1: what the others
    leave. Axis order is keyword order; put the axis whose collectives are heaviest (the
    tensor-parallel one) last, where `jax.make_mesh` puts the closest devices."""
    devices = jax.devices() if devices is None else list(devices)
    sizes = dict(axes)
    unknown = [name for name, size in sizes.items() if size == -1]
    if len(unknown) > 1:
        raise ShardingError(f"only one mesh axis may have size -1; got {unknown}")
    known = int(np.prod([size for size in sizes.values() if size != -1]))
    if unknown:
        if len(devices) % known:
            raise ShardingError(f"{len(devices)} devices do not split into axes {sizes}")
        sizes[unknown[0]] = len(devices) // known
    if int(np.prod(list(sizes.values()))) != len(devices):
        raise ShardingError(f"mesh axes {sizes} need {int(np.prod(list(sizes.values())))} devices; "
                            f"there are {len(devices)}")
    return jax.make_mesh(tuple(sizes.values()), tuple(sizes), axis_types=(AxisType.Auto,) * len(sizes),
                         devices=devices)


def _named_shardings(arrays: Mapping[str, Any], mesh: AnyMesh, rules: Rules) -> dict[str, NamedSharding]:
    return {name: NamedSharding(mesh, partition_spec(name, tuple(a.shape), rules, mesh))
            for name, a in arrays.items()}


def _optimizer_shardings(opt_state, params: Mapping[str, Any], param_shardings: Mapping[str, NamedSharding],
                         mesh: AnyMesh):
    """Optax state mirrors the params by path (`mu['h.0.attn.c_attn.weight']`): a leaf under a
    parameter's name and of its shape takes its sharding; anything else (Adam's step count,
    factored statistics) is replicated."""
    replicated = NamedSharding(mesh, P())

    def sharding(path, leaf):
        for key in reversed(path):
            name = getattr(key, "key", None)
            if isinstance(name, str) and name in params:
                if tuple(leaf.shape) == tuple(params[name].shape):
                    return param_shardings[name]
                break
        return replicated

    return jax.tree_util.tree_map_with_path(sharding, opt_state)


def _is_training_state(target: Any) -> bool:
    """Whether `target` is a training state: a dataclass holding `params`, `buffers` and
    `opt_state` (`jaxport.train.TrainState`). Its placement is known from those fields alone, so
    this module need not import the training code that uses it."""
    return (dataclasses.is_dataclass(target) and not isinstance(target, type)
            and all(hasattr(target, name) for name in ("params", "buffers", "opt_state")))


def _state_placement(state: S, mesh: AnyMesh, params: Mapping[str, NamedSharding],
                     buffers: Mapping[str, NamedSharding]) -> S:
    """A training state's placement: `params` and `buffers` as given, the optimizer state like the
    parameter each entry belongs to, every other field (the RNG key, the step) replicated."""
    replicated = NamedSharding(mesh, P())
    fields = {f.name: replicated for f in dataclasses.fields(state)}
    fields.update(params=params, buffers=buffers,
                  opt_state=_optimizer_shardings(state.opt_state, state.params, params, mesh))
    return dataclasses.replace(state, **fields)


def shardings(target: T, mesh: AnyMesh, rules: Iterable[Rule] = ()) -> Any:
    """Where `shard` would place `target`, without placing it: for `jax.jit`'s
    `in_shardings`/`out_shardings` in your own jitted functions, or to check a plan:

        placement = jaxport.sharding.shardings(model, mesh, rules)
        evaluate = jax.jit(model.apply, in_shardings=(placement, NamedSharding(mesh, P("data"))))
        jaxport.sharding.describe(jaxport.sharding.shardings(jax.eval_shape(step.init, 0), mesh, rules))

    `target` is a `{name: array}` dict (arrays or `jax.ShapeDtypeStruct`s), a `JaxModel`
    (its `params`) or a `TrainState`; the result mirrors it with `NamedSharding` leaves.
    The mesh's axes are made `Auto` (see `auto_axes`); pass arrays placed with these shardings.
    """
    rules = Rules(rules)
    mesh = auto_axes(mesh)
    validate(rules, mesh)
    if isinstance(target, JaxModel):
        return _named_shardings(target.params, mesh, rules)
    if _is_training_state(target):
        params = _named_shardings(target.params, mesh, rules)
        return _state_placement(target, mesh, params, _named_shardings(target.buffers, mesh, rules))
    if isinstance(target, Mapping):
        return _named_shardings(target, mesh, rules)
    raise ShardingError(f"shard() takes a JaxModel, a TrainState or a {{name: array}} dict; got "
                        f"{type(target).__name__}")


# -- placing ---------------------------------------------------------------------------------------

def _is_key(x) -> bool:
    return jax.dtypes.issubdtype(getattr(x, "dtype", None), jax.dtypes.prng_key)


def _place(x, sharding: NamedSharding):
    """A copy of `x` on `sharding`, never sharing `x`'s memory: the training step donates
    its state, which would otherwise delete the model's own arrays. Across processes every
    process holds the whole value (the same seed built the same model) and builds just its
    own devices' shards from it."""
    if sharding.is_fully_addressable or (isinstance(x, jax.Array) and not x.is_fully_addressable):
        return jax.device_put(x, sharding, may_alias=False)
    if _is_key(x):
        impl = jax.random.key_impl(x)
        return jax.random.wrap_key_data(_place(jax.random.key_data(x), sharding), impl=impl)
    host = np.asarray(x)
    return jax.make_array_from_callback(host.shape, sharding, lambda index: host[index])


def shard(target: T, mesh: Mesh, rules: Iterable[Rule] = ()) -> T:
    """`target`'s arrays placed on `mesh` by name-pattern `rules`.

    `target` is a `{name: array}` dict, a `JaxModel` (its `params` are replaced in place,
    so the unsharded copies can be freed; the model is returned) or a `TrainState`
    (params and buffers by rule, optax state like the parameter it belongs to, the RNG
    key and step count replicated). `rules` is an ordered list of `(regex, spec)`, or a
    preset: `data_parallel()`, `fsdp()`, `tensor_parallel()`, and sums of them.

    A rule whose axis the mesh lacks, or that would split a dimension the axis does not
    divide, raises `ShardingError` naming the parameter: a silent fallback to replication
    would only surface later as running out of memory.
    """
    placement = shardings(target, mesh, rules)
    if isinstance(target, JaxModel):
        target.params = {k: _place(v, placement[k]) for k, v in target.params.items()}
        return target
    if _is_training_state(target):
        return jax.tree.map(_place, target, placement)
    return {k: _place(v, placement[k]) for k, v in target.items()}


def _mesh_of(params: Mapping[str, Any]) -> Mesh | None:
    for a in params.values():
        sharding = getattr(a, "sharding", None) if not isinstance(a, jax.core.Tracer) else None
        if isinstance(sharding, NamedSharding) and len(sharding.device_set) > 1:
            return sharding.mesh
    return None


def follow_params(state: S) -> S:
    """`state` with what is not yet on its sharded params' mesh placed there.

    `TrainStep.init` calls it: after `shard(model, ...)` the params are on a mesh but the
    step count, the key and optax's counters start on one device, and one jit cannot
    take both. Optimizer entries shaped like a parameter follow it; the rest is replicated.
    A state whose params are not sharded is returned as it is.
    """
    mesh = _mesh_of(state.params)
    if mesh is None or isinstance(state.step, jax.core.Tracer):  # under jit, out_shardings place it
        return state

    def on_mesh(a) -> NamedSharding:
        sharding = getattr(a, "sharding", None)
        if isinstance(sharding, NamedSharding) and sharding.mesh == mesh:
            return sharding
        return NamedSharding(mesh, P())

    def current(arrays: Mapping[str, Any]) -> dict[str, NamedSharding]:
        return {k: on_mesh(a) for k, a in arrays.items()}

    placement = _state_placement(state, mesh, current(state.params), current(state.buffers))
    return jax.tree.map(lambda x, where: x if getattr(x, "sharding", None) == where else _place(x, where),
                        state, placement)


def _local_shard_count(sharding: NamedSharding, total: int) -> int:
    """How many of the `total` row blocks `sharding` splits an array into this process holds."""
    indices = sharding.addressable_devices_indices_map((total,)).values()
    return len({index[0].indices(total)[:2] for index in indices})


def shard_batch(batch: T, mesh: Mesh, axis: str | tuple[str, ...] = "data") -> T:
    """`batch` (a pytree of arrays) split along its first dimension over mesh `axis`.

    Each process passes its own part of the global batch (`jaxport.distributed.local_rows`
    says which rows); in a single-process run that is the whole batch. Scalars are
    replicated. Arrays already placed across processes are returned as they are.
    """
    mesh = auto_axes(mesh)
    names = axis if isinstance(axis, tuple) else (axis,)
    missing = [a for a in names if a not in mesh.axis_names]
    if missing:
        raise ShardingError(f"the batch axis {missing[0]!r} is not a mesh axis {tuple(mesh.axis_names)}")
    split = NamedSharding(mesh, P(axis))
    replicated = NamedSharding(mesh, P())
    total = int(np.prod([mesh.shape[a] for a in names]))

    def place(path, leaf):
        if isinstance(leaf, jax.Array) and not leaf.is_fully_addressable:
            return leaf
        local = np.asarray(leaf)
        if local.ndim == 0:
            return _place(local, replicated)
        blocks = _local_shard_count(split, total)
        if local.shape[0] % blocks:
            raise ShardingError(
                f"batch entry {jax.tree_util.keystr(path) or 'batch'} has {local.shape[0]} rows on this "
                f"process, not divisible by the {blocks} shards of mesh axis {axis!r} it feeds"
            )
        return jax.make_array_from_process_local_data(split, local)

    return jax.tree_util.tree_map_with_path(place, batch)


def describe(target: Any) -> dict[str, str]:
    """`{name: spec}` of the sharded entries of placed params (a dict, a `JaxModel`'s, a
    `TrainState`'s, or `shardings(...)`'s result): a quick check that the rules matched
    what you meant. Replicated entries are left out."""
    params = target.params if isinstance(target, JaxModel) or _is_training_state(target) else target

    def spec(v):
        sharding = v if isinstance(v, NamedSharding) else getattr(v, "sharding", None)
        return sharding.spec if isinstance(sharding, NamedSharding) else P()

    return {k: str(spec(v)) for k, v in params.items() if axes_of(spec(v))}



__all__ = ["FSDP_MIN_SIZE", "Rules", "ShardLargest", "ShardingError", "auto_axes", "data_parallel", "describe",
           "device_mesh", "follow_params", "fsdp", "partition_spec", "shard", "shard_batch", "shardings",
           "tensor_parallel"]
