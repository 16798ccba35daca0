"""ONNX-ML ops (ai.onnx.ml): ArrayFeatureExtractor, Binarizer, LabelEncoder, TreeEnsemble.

Attributes of these ops (key tables, tree structures) are constants, so they are digested in
NumPy once and only the per-sample work is left to JAX: every lowering traces under `jax.jit`.
JAX holds no strings, so the string variants of LabelEncoder cannot be lowered.
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np
from jax import lax

from ..registry import onnx
from ._helpers import index_dtype


@onnx("ArrayFeatureExtractor", since=1, domain="ai.onnx.ml")
def array_feature_extractor(x, y):
    """ArrayFeatureExtractor(T x, int64 y) -> T: select x[..., y]; a 1-D x gives [1, len(y)]."""
    x = jnp.asarray(x)
    picked = jnp.take(x, jnp.asarray(y).reshape(-1), axis=-1)
    # onnxruntime (and so the conformance data) keeps a matrix shape for vector input.
    return picked.reshape(1, -1) if x.ndim == 1 else picked


@onnx("Binarizer", since=1, domain="ai.onnx.ml")
def binarizer(x, *, threshold=0.0):
    """Binarizer(T X) -> T; threshold: 1 where X > threshold, else 0."""
    x = jnp.asarray(x)
    return jnp.where(x > threshold, 1, 0).astype(x.dtype)


def _no_strings(*named):
    for name, value in named:
        if value is None:
            continue
        array = np.asarray(value)
        if array.dtype.kind in "OSU" or (isinstance(value, tuple) and value
                                          and isinstance(value[0], (str, bytes))):
            raise NotImplementedError(
                f"LabelEncoder with string {name}: JAX arrays cannot hold strings")


def _label_encode(x, keys: np.ndarray, values: np.ndarray, default):
    """Map each element of x through the table keys -> values; the last of repeated keys wins
    and a NaN key matches any NaN."""
    x = jnp.asarray(x)
    keys = keys.astype(x.dtype)
    nan_value = None
    table: dict = {}
    for key, value in zip(keys.tolist(), values.tolist(), strict=True):
        if isinstance(key, float) and math.isnan(key):
            nan_value = value
        else:
            table[key] = value
    default = jnp.asarray(default, values.dtype)
    if table:
        sorted_keys = np.array(sorted(table), dtype=keys.dtype)
        sorted_values = np.array([table[k] for k in sorted_keys.tolist()], dtype=values.dtype)
        # A binary search keeps large vocabularies at O(n log k) without a (n, k) comparison.
        pos = jnp.clip(jnp.searchsorted(jnp.asarray(sorted_keys), x), 0, len(sorted_keys) - 1)
        hit = jnp.asarray(sorted_keys)[pos] == x
        out = jnp.where(hit, jnp.asarray(sorted_values)[pos], default)
    else:
        out = jnp.broadcast_to(default, x.shape)
    if nan_value is not None:
        out = jnp.where(jnp.isnan(x), jnp.asarray(nan_value, values.dtype), out)
    return out


@onnx("LabelEncoder", since=2, domain="ai.onnx.ml")
def label_encoder_2(x, *, default_float=-0.0, default_int64=-1, default_string="_Unused",
                    keys_floats=None, keys_int64s=None, keys_strings=None,
                    values_floats=None, values_int64s=None, values_strings=None):
    """LabelEncoder(T1 X) -> T2; keys_*/values_* (floats, int64s, strings), default_*."""
    return label_encoder(
        x, default_float=default_float, default_int64=default_int64,
        default_string=default_string, keys_floats=keys_floats, keys_int64s=keys_int64s,
        keys_strings=keys_strings, values_floats=values_floats, values_int64s=values_int64s,
        values_strings=values_strings)


@onnx("LabelEncoder", since=4, domain="ai.onnx.ml")
def label_encoder(x, *, default_float=-0.0, default_int64=-1, default_string="_Unused",
                  default_tensor=None, keys_floats=None, keys_int64s=None, keys_strings=None,
                  keys_tensor=None, values_floats=None, values_int64s=None,
                  values_strings=None, values_tensor=None):
    """LabelEncoder(T1 X) -> T2; keys_*/values_* (floats, int64s, strings, tensor),
    default_* (float, int64, string, tensor)."""
    _no_strings(("keys", keys_strings), ("values", values_strings), ("keys", keys_tensor),
                ("values", values_tensor))
    if keys_floats is not None:
        keys = np.asarray(keys_floats, np.float32)
    elif keys_int64s is not None:
        keys = np.asarray(keys_int64s, np.int64)
    elif keys_tensor is not None:
        keys = np.asarray(keys_tensor).reshape(-1)
    else:
        raise ValueError("LabelEncoder needs one of keys_floats, keys_int64s, keys_tensor")
    if values_floats is not None:
        values, default = np.asarray(values_floats, np.float32), default_float
    elif values_int64s is not None:
        values, default = np.asarray(values_int64s, index_dtype()), default_int64
    elif values_tensor is not None:
        values = np.asarray(values_tensor).reshape(-1)
        if default_tensor is not None:
            default = np.asarray(default_tensor).reshape(-1)[0]
        else:
            default = -0.0 if values.dtype.kind == "f" else -1
    else:
        raise ValueError("LabelEncoder needs one of values_floats, values_int64s, values_tensor")
    return _label_encode(x, keys, values, default)


# TreeEnsemble node modes: BRANCH_LEQ, LT, GTE, GT, EQ, NEQ, MEMBER.
_MEMBER = 6


def _tree_depth(roots, true_next, false_next, n_nodes: int) -> int:
    """The most branchings from a root to a leaf (slot >= n_nodes) over all trees."""
    depth = 0
    stack = [(int(r), 1) for r in roots]
    while stack:
        slot, level = stack.pop()
        if slot >= n_nodes:
            continue
        if level > n_nodes:
            raise ValueError("TreeEnsemble: the nodes form a cycle")
        depth = max(depth, level)
        stack.append((int(true_next[slot]), level + 1))
        stack.append((int(false_next[slot]), level + 1))
    return depth


def _softmax(scores):
    e = jnp.exp(scores - jnp.max(scores, axis=-1, keepdims=True))
    return e / jnp.sum(e, axis=-1, keepdims=True)


def _post_transform(scores, post_transform: int):
    if post_transform == 1:
        return _softmax(scores)
    if post_transform == 2:
        return 1 / (1 + jnp.exp(-scores))
    if post_transform == 3:
        # Like onnxruntime: zero scores stay zero and take no share of the softmax.
        keep = jnp.abs(scores) > 1e-7
        e = jnp.where(keep, jnp.exp(scores - jnp.max(scores, axis=-1, keepdims=True)), 0)
        return e / jnp.sum(e, axis=-1, keepdims=True)
    if post_transform == 4:
        return math.sqrt(2) * lax.erf_inv(2 * scores - 1)
    return scores


@onnx("TreeEnsemble", since=5, domain="ai.onnx.ml")
def tree_ensemble(x, *, aggregate_function=1, leaf_targetids=None, leaf_weights=None,
                  membership_values=None, n_targets=None, nodes_falseleafs=None,
                  nodes_falsenodeids=None, nodes_featureids=None, nodes_hitrates=None,
                  nodes_missing_value_tracks_true=None, nodes_modes=None, nodes_splits=None,
                  nodes_trueleafs=None, nodes_truenodeids=None, post_transform=0,
                  tree_roots=None):
    """TreeEnsemble(T X) -> T; tree_roots, nodes_* (splits, featureids, modes, true/false
    nodeids and leafs, missing_value_tracks_true, hitrates), leaf_targetids, leaf_weights,
    membership_values, n_targets, aggregate_function, post_transform."""
    x = jnp.asarray(x)
    modes = np.asarray(nodes_modes, np.int64).reshape(-1)
    n_nodes = len(modes)
    splits = np.asarray(nodes_splits).reshape(-1)
    weights = np.asarray(leaf_weights).reshape(-1)
    n_leaves = len(weights)
    # Slots 0..n_nodes-1 are the interior nodes, n_nodes.. the leaves, which loop to themselves
    # so that every sample can walk the same number of steps.
    true_next = np.asarray(nodes_truenodeids, np.int64) + n_nodes * np.asarray(
        nodes_trueleafs, np.int64)
    false_next = np.asarray(nodes_falsenodeids, np.int64) + n_nodes * np.asarray(
        nodes_falseleafs, np.int64)
    leaf_slots = np.arange(n_nodes, n_nodes + n_leaves)
    true_next = np.concatenate([true_next, leaf_slots])
    false_next = np.concatenate([false_next, leaf_slots])
    pad = np.zeros(n_leaves, np.int64)
    features = np.concatenate([np.asarray(nodes_featureids, np.int64), pad])
    all_modes = np.concatenate([modes, pad])
    tracks = (np.zeros(n_nodes, bool) if nodes_missing_value_tracks_true is None
              else np.asarray(nodes_missing_value_tracks_true, bool))
    tracks = np.concatenate([tracks, np.zeros(n_leaves, bool)])

    cmp_dtype = jnp.promote_types(x.dtype, splits.dtype)
    # Each BRANCH_MEMBER node, in node order, takes the next NaN-terminated run of members;
    # rows are padded with NaN, which equals nothing.
    sets = [[] for _ in range(n_nodes + n_leaves)]
    if membership_values is not None:
        runs, run = [], []
        for v in np.asarray(membership_values, np.float64).reshape(-1).tolist():
            if math.isnan(v):
                runs.append(run)
                run = []
            else:
                run.append(v)
        if run:
            runs.append(run)
        member_nodes = np.flatnonzero(modes == _MEMBER)
        if len(runs) < len(member_nodes):
            raise ValueError("TreeEnsemble: fewer membership sets than BRANCH_MEMBER nodes")
        for node, members in zip(member_nodes.tolist(), runs, strict=False):
            sets[node] = members
    width = max(1, max(len(s) for s in sets))
    members = np.full((len(sets), width), np.nan, splits.dtype)
    for i, s in enumerate(sets):
        members[i, :len(s)] = s
    splits = np.concatenate([splits, np.zeros(n_leaves, splits.dtype)])

    roots = np.asarray(tree_roots, np.int64).reshape(-1)
    depth = _tree_depth(roots, true_next, false_next, n_nodes)

    tables = {k: jnp.asarray(v) for k, v in dict(
        true_next=true_next, false_next=false_next, features=features, modes=all_modes,
        tracks=tracks).items()}
    splits_j = jnp.asarray(splits).astype(cmp_dtype)
    members_j = jnp.asarray(members).astype(cmp_dtype)
    xc = x.astype(cmp_dtype)

    def step(_, slot):
        value = jnp.take_along_axis(xc, tables["features"][slot], axis=1)
        split = splits_j[slot]
        mode = tables["modes"][slot]
        outcomes = jnp.stack([value <= split, value < split, value >= split, value > split,
                              value == split, value != split,
                              jnp.any(value[..., None] == members_j[slot], axis=-1)])
        go_true = jnp.take_along_axis(outcomes, mode[None], axis=0)[0]
        go_true = go_true | (tables["tracks"][slot] & jnp.isnan(value))
        return jnp.where(go_true, tables["true_next"][slot], tables["false_next"][slot])

    start = jnp.broadcast_to(jnp.asarray(roots), (x.shape[0], len(roots)))
    slot = lax.fori_loop(0, depth, step, start)
    leaf = slot - n_nodes
    acc_dtype = jnp.promote_types(x.dtype, weights.dtype)
    w = jnp.asarray(weights).astype(acc_dtype)[leaf]
    target = jnp.asarray(np.asarray(leaf_targetids, np.int64))[leaf]
    onehot = target[..., None] == jnp.arange(n_targets)
    if aggregate_function in (0, 1):
        scores = jnp.sum(jnp.where(onehot, w[..., None], 0), axis=1)
        if aggregate_function == 0:
            scores = scores / len(roots)
    elif aggregate_function in (2, 3):
        # A target that no reached leaf feeds scores 0, as in onnxruntime.
        fill = np.inf if aggregate_function == 2 else -np.inf
        picked = jnp.where(onehot, w[..., None], fill)
        scores = jnp.min(picked, axis=1) if aggregate_function == 2 else jnp.max(picked, axis=1)
        scores = jnp.where(jnp.any(onehot, axis=1), scores, 0)
    else:
        raise ValueError(f"TreeEnsemble: unknown aggregate_function {aggregate_function}")
    return _post_transform(scores, post_transform).astype(x.dtype)
