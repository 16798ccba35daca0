"""Checkpoints of a `TrainState`, and trained weights back into the PyTorch module.

A checkpoint is a directory:
  weights.safetensors    params and buffers by `state_dict` name (PyTorch reads it with
                         `safetensors.torch.load_file`)
  optimizer.safetensors  the optax state's arrays, keyed by their path in its pytree
  state.json             step, the RNG key's data, and the names above, to check a restore
  manifest.json          each file's size and sha256, written last (`jaxport.files`)

The files are written into a staging directory and the whole set takes the place of the previous
checkpoint in one step, so a reader (or a run restarted after a kill mid-save) finds the previous
checkpoint or the new one, never a mix or a half-written file; a full disk is one error and keeps
the previous checkpoint. `load_checkpoint` checks every file against the manifest first: a
missing, truncated or altered file is one `InputError` naming it. Checkpoints from before the
manifest (jaxport 0.2.0) still load, unchecked, with a `jaxport.files.UnverifiedFilesWarning`.

The optax state's structure is not stored: `load_checkpoint(path, like)` takes a
state of the same structure (e.g. `step.init()`) and fills it, placing every array
where the matching array of `like` lives, so a sharded run restores sharded.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping

import jax
import jax.numpy as jnp
import numpy as np
import torch
from jax.experimental import multihost_utils

from .. import versions
from ..backends.serialization import parse_safetensors
from ..dlpack import to_torch
from ..errors import InputError
from ..files import open_directory, write_directory
from .state import TrainState

_WEIGHTS = "weights.safetensors"
_OPTIMIZER = "optimizer.safetensors"
_STATE = "state.json"
_FORMAT = 1


def _host(array) -> np.ndarray:
    """The whole array on this host (gathered across processes when it is sharded over them)."""
    if isinstance(array, jax.Array) and not array.is_fully_addressable:
        return np.asarray(multihost_utils.process_allgather(array, tiled=True))
    return np.asarray(array)


def _optimizer_arrays(opt_state) -> dict[str, np.ndarray]:
    leaves = jax.tree_util.tree_flatten_with_path(opt_state)[0]
    return {jax.tree_util.keystr(path): _host(leaf) for path, leaf in leaves}


def save_checkpoint(directory: str | os.PathLike, state: TrainState) -> None:
    """Write `state` to `directory` (created if needed), replacing a checkpoint there as a whole:
    a kill or a full disk part way leaves the previous checkpoint as it was. Other files in
    `directory` are kept. A failed write is a `jaxport.files.WriteError` (an `OSError`).

    In a multi-process run every process must call this (sharded arrays are gathered
    collectively); only process 0 writes.
    """
    versions.require("safetensors")
    from safetensors.numpy import save_file  # optional (`jaxport[train]`)

    weights = {k: _host(v) for k, v in state.model_params().items()}
    optimizer = _optimizer_arrays(state.opt_state)
    rng = _host(jax.random.key_data(state.rng))
    meta = {
        "format": _FORMAT,
        "step": int(_host(state.step)),
        "rng": rng.astype(np.uint32).tolist(),
        "rng_impl": str(jax.random.key_impl(state.rng)),
        "params": sorted(state.params),
        "buffers": sorted(state.buffers),
        "optimizer": sorted(optimizer),
    }
    if jax.process_index() != 0:
        return
    write_directory(directory, {
        _WEIGHTS: lambda path: save_file(weights, path),
        _OPTIMIZER: lambda path: save_file(optimizer, path),
        _STATE: json.dumps(meta, indent=1).encode(),
    }, kind="checkpoint")


def _placed(value: np.ndarray, like, what: str):
    if value.shape != tuple(like.shape) or value.dtype != np.dtype(like.dtype):
        raise InputError(
            f"checkpoint {what} is {value.dtype}{list(value.shape)}, but the state to restore into has "
            f"{np.dtype(like.dtype)}{list(like.shape)}"
        )
    sharding = getattr(like, "sharding", None)
    if sharding is None:
        return jnp.asarray(value)
    return jax.make_array_from_callback(value.shape, sharding, lambda index: value[index])


def _read_meta(path: str, data: bytes) -> dict:
    """state.json's bytes (read from `path`), its fields checked: a corrupt file is one
    `InputError` naming it."""
    try:
        meta = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise InputError(f"{path} is not valid JSON ({e}): the checkpoint is corrupt") from None
    problems = []
    if not isinstance(meta, dict):
        raise InputError(f"{path} holds a {type(meta).__name__}, not a checkpoint's state")
    if type(meta.get("step")) is not int or not 0 <= meta["step"] < 2**31:
        problems.append("'step' (a non-negative integer)")
    rng = meta.get("rng")
    if not isinstance(rng, list) or not rng or not all(type(v) is int and 0 <= v < 2**32 for v in rng):
        problems.append("'rng' (a list of uint32 values)")
    if not isinstance(meta.get("rng_impl", ""), (str, type(None))):
        problems.append("'rng_impl' (a string)")
    if problems:
        raise InputError(f"{path} has no valid {' or '.join(problems)}: the checkpoint is corrupt")
    return meta


def load_checkpoint(directory: str | os.PathLike, like: TrainState) -> TrainState:
    """The state saved in `directory`, in the structure and placement of `like`. Every file is
    checked against the checkpoint's manifest before it is read (see the module docstring)."""
    found = open_directory(directory, (_STATE, _WEIGHTS, _OPTIMIZER), kind="checkpoint", error=InputError)
    directory = found.directory
    path = os.path.join(directory, _STATE)
    if not os.path.exists(path):
        raise InputError(f"{directory} is not a jaxport checkpoint (no {_STATE})")
    meta = _read_meta(path, found.read(_STATE))
    parts = {}
    for name in (_WEIGHTS, _OPTIMIZER):
        if not os.path.isfile(os.path.join(directory, name)):
            raise InputError(f"{directory} is an incomplete jaxport checkpoint: {name} is missing")
        parts[name] = parse_safetensors(found.read(name), os.path.join(directory, name), InputError)
    weights, optimizer = parts[_WEIGHTS], parts[_OPTIMIZER]
    expected = set(like.params) | set(like.buffers)
    if set(weights) != expected:
        missing, extra = sorted(expected - set(weights)), sorted(set(weights) - expected)
        raise InputError(f"checkpoint weights do not match the state: missing {missing}, unexpected {extra}")
    params = {k: _placed(weights[k], v, f"weight '{k}'") for k, v in like.params.items()}
    buffers = {k: _placed(weights[k], v, f"buffer '{k}'") for k, v in like.buffers.items()}

    paths, treedef = jax.tree_util.tree_flatten_with_path(like.opt_state)
    names = [jax.tree_util.keystr(p) for p, _ in paths]
    if set(names) != set(optimizer):
        raise InputError(
            "checkpoint optimizer state has a different structure from the state to restore into "
            f"(saved {len(optimizer)} arrays, expected {len(names)}): was it made with another optimizer?"
        )
    opt_leaves = [_placed(optimizer[n], leaf, f"optimizer entry {n}") for n, (_, leaf) in zip(names, paths)]
    opt_state = jax.tree_util.tree_unflatten(treedef, opt_leaves)

    key_data = np.asarray(meta["rng"], np.uint32)
    try:
        rng = jax.random.wrap_key_data(key_data, impl=meta.get("rng_impl") or None)
    except (ValueError, TypeError, KeyError) as e:
        raise InputError(f"{path}: its RNG key {meta['rng']} of kind {meta.get('rng_impl')!r} is not one JAX "
                         f"can restore ({type(e).__name__}: {e})") from None
    step = jnp.asarray(meta["step"], jnp.int32)
    return TrainState(params, buffers, opt_state, rng, step)


def load_into_torch(module: torch.nn.Module, params: Mapping[str, jax.Array] | TrainState) -> torch.nn.Module:
    """Copy trained values into `module` (a `torch.nn.Module`) by `state_dict` name.

    `params` is a `TrainState` or a `{name: array}` dict such as `JaxModel.params`. Tied
    weights (one tensor under two names, like GPT-2's `lm_head.weight`) are stored once, under
    the first name: the module's other names for the same tensor take that value. Every entry
    of the module's `state_dict` must be found; the module keeps its dtypes and devices.
    """
    values = params.model_params() if isinstance(params, TrainState) else dict(params)
    state = module.state_dict(keep_vars=True)
    first_name: dict[int, str] = {}
    for name, tensor in state.items():
        if name in values:
            first_name.setdefault(id(tensor), name)
    source_name = {name: name if name in values else first_name.get(id(tensor)) for name, tensor in state.items()}
    missing = [name for name, source in source_name.items() if source is None]
    if missing:
        raise InputError(f"no trained value for {len(missing)} state_dict entries: {missing[:10]}")
    with torch.no_grad():
        for name, target in state.items():
            value = values[source_name[name]]
            if isinstance(value, jax.Array) and len(value.sharding.device_set) > 1:
                value = jnp.asarray(_host(value))  # one buffer, so DLPack can hand it over
            source = to_torch(jnp.asarray(value))
            if tuple(source.shape) != tuple(target.shape):
                raise InputError(f"'{name}' is {list(source.shape)} in JAX but {list(target.shape)} in the module")
            target.copy_(source.to(dtype=target.dtype, device=target.device))
    return module
