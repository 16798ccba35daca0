"""ATen lowerings: ops that sort elements into bins or segments (histograms, segment reductions).

The number of bins or segments always comes from a static size (an int
argument or an input's shape), so all of these work under `jax.jit`; the bin
or segment of each element is found with `searchsorted` on the edges, which
keeps edge cases (values exactly on an edge, the closed last bin) as PyTorch
has them.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ..registry import aten
from ._promotion import canonical_dim, opmath_type


def _uniform_edges(x, bins: int, value_range):
    """PyTorch's `bins + 1` evenly spaced edges: over `value_range`, else the data's min and max
    (0 and 1 for empty data).

    A degenerate range (min == max) widens by 0.5 on each side, as PyTorch does.
    """
    if value_range is None and x.size == 0:
        value_range = (0.0, 1.0)
    if value_range is None:
        low, high = jnp.min(x), jnp.max(x)
    else:
        low, high = (jnp.asarray(v, x.dtype) for v in value_range)
    same = low == high
    low = jnp.where(same, low - 0.5, low)
    high = jnp.where(same, high + 0.5, high)
    return jnp.linspace(low, high, bins + 1, dtype=x.dtype)


def _bin_index(values, edges):
    """Bin of each value: edges[i] <= v < edges[i + 1], the last bin closed; -1 outside."""
    index = jnp.searchsorted(edges, values, side="right") - 1
    nbins = edges.shape[0] - 1
    index = jnp.where(values == edges[-1], nbins - 1, index)
    inside = (values >= edges[0]) & (values <= edges[-1])
    return jnp.where(inside, index, -1)


def _histogram_nd(points, edges, weight, density):
    """Counts (or weight sums) of `points` [N, D] over the grid whose per-dim edges are `edges`."""
    shape = tuple(e.shape[0] - 1 for e in edges)
    index = [_bin_index(points[:, d], e) for d, e in enumerate(edges)]
    inside = jnp.all(jnp.stack([i >= 0 for i in index]), axis=0) if index else jnp.ones(len(points), bool)
    flat = jnp.ravel_multi_index(tuple(jnp.maximum(i, 0) for i in index), shape, mode="clip")
    acc = opmath_type(points.dtype)
    counts = jnp.ones(points.shape[0], acc) if weight is None else weight.reshape(-1).astype(acc)
    counts = jnp.where(inside, counts, 0)
    hist = jnp.zeros(int(np.prod(shape)), acc).at[flat].add(counts).reshape(shape)
    if density:
        volume = jnp.ones(shape, acc)
        for d, e in enumerate(edges):
            widths = jnp.diff(e).astype(acc)
            volume = volume * widths.reshape((-1,) + (1,) * (len(shape) - d - 1))
        hist = hist / (jnp.sum(hist) * volume)
    return hist.astype(points.dtype)


@aten("histogram.bin_ct")
def aten_histogram_bin_ct(self, bins=100, *, range=None, weight=None, density=False):
    """histogram.bin_ct(Tensor self, int bins=100, *, float[]? range=None, Tensor? weight=None, bool density=False) -> (Tensor hist, Tensor bin_edges)"""
    edges = _uniform_edges(self, bins, range)
    hist = _histogram_nd(self.reshape(-1, 1), [edges], weight, density)
    return hist, edges


@aten("histogram.bins_tensor")
def aten_histogram_bins_tensor(self, bins, *, weight=None, density=False):
    """histogram.bins_tensor(Tensor self, Tensor bins, *, Tensor? weight=None, bool density=False) -> (Tensor hist, Tensor bin_edges)"""
    hist = _histogram_nd(self.reshape(-1, 1), [bins], weight, density)
    return hist, bins


def _dd_edges(points, bins, value_range):
    if isinstance(bins, int):
        bins = [bins] * points.shape[1]
    return [
        _uniform_edges(points[:, d], n, None if value_range is None else value_range[2 * d : 2 * d + 2])
        for d, n in enumerate(bins)
    ]


@aten("_histogramdd_bin_edges.default")
def aten__histogramdd_bin_edges(self, bins, *, range=None, weight=None, density=False):
    """_histogramdd_bin_edges(Tensor self, int[] bins, *, float[]? range=None, Tensor? weight=None, bool density=False) -> Tensor[]"""
    return _dd_edges(self.reshape(-1, self.shape[-1]), bins, range)


@aten("_histogramdd_from_bin_cts.default")
def aten__histogramdd_from_bin_cts(self, bins, *, range=None, weight=None, density=False):
    """_histogramdd_from_bin_cts(Tensor self, int[] bins, *, float[]? range=None, Tensor? weight=None, bool density=False) -> Tensor"""
    points = self.reshape(-1, self.shape[-1])
    return _histogram_nd(points, _dd_edges(points, bins, range), weight, density)


@aten("_histogramdd_from_bin_tensors.default")
def aten__histogramdd_from_bin_tensors(self, bins, *, weight=None, density=False):
    """_histogramdd_from_bin_tensors(Tensor self, Tensor[] bins, *, Tensor? weight=None, bool density=False) -> Tensor"""
    return _histogram_nd(self.reshape(-1, self.shape[-1]), list(bins), weight, density)


@aten("histogramdd.default", "histogramdd.int_bins")
def aten_histogramdd(self, bins, range=None, weight=None, density=False):
    """histogramdd(Tensor self, int[] bins, float[]? range=None, Tensor? weight=None, bool density=False) -> (Tensor hist, Tensor[] bin_edges)"""
    points = self.reshape(-1, self.shape[-1])
    edges = _dd_edges(points, bins, range)
    return _histogram_nd(points, edges, weight, density), edges


@aten("histogramdd.TensorList_bins")
def aten_histogramdd_tensor_bins(self, bins, range=None, weight=None, density=False):
    """histogramdd.TensorList_bins(Tensor self, Tensor[] bins, float[]? range=None, Tensor? weight=None, bool density=False) -> (Tensor hist, Tensor[] bin_edges)"""
    points = self.reshape(-1, self.shape[-1])
    return _histogram_nd(points, list(bins), weight, density), list(bins)


def _segment_reduce_1d(data, offsets, reduce: str, initial):
    """Reduce `data` [n, ...] over the segments offsets[i]:offsets[i + 1] along axis 0."""
    segments = offsets.shape[0] - 1
    position = jnp.arange(data.shape[0])
    segment = jnp.searchsorted(offsets[1:], position, side="right")
    # Positions past the last offset belong to no segment; segment_* drops ids >= segments.
    segment = jnp.where(position < offsets[0], segments, segment)
    count = jnp.diff(offsets).reshape((-1,) + (1,) * (data.ndim - 1))
    acc = opmath_type(data.dtype)
    x = data.astype(acc)
    if reduce in ("sum", "mean"):
        out = jax.ops.segment_sum(x, segment, segments)
        if initial is not None:
            out = out + initial
        if reduce == "mean":
            empty = jnp.nan if initial is None else initial
            out = jnp.where(count > 0, out / jnp.maximum(count, 1).astype(acc), empty)
    elif reduce == "prod":
        out = jax.ops.segment_prod(x, segment, segments)
        if initial is not None:
            out = out * initial
    elif reduce in ("max", "amax"):
        out = jax.ops.segment_max(x, segment, segments)
        if initial is not None:
            out = jnp.maximum(out, initial)
    elif reduce in ("min", "amin"):
        out = jax.ops.segment_min(x, segment, segments)
        if initial is not None:
            out = jnp.minimum(out, initial)
    else:
        raise ValueError(f"segment_reduce: unknown reduction '{reduce}'")
    return out.astype(data.dtype)


@aten("segment_reduce.default")
def aten_segment_reduce(
    data, reduce, *, lengths=None, indices=None, offsets=None, axis=0, unsafe=False, initial=None
):
    """segment_reduce(Tensor data, str reduce, *, Tensor? lengths=None, Tensor? indices=None, Tensor? offsets=None, int axis=0, bool unsafe=False, Scalar? initial=None) -> Tensor"""
    if indices is not None:
        raise NotImplementedError("segment_reduce with indices= (PyTorch does not support it either)")
    axis = canonical_dim(axis, data.ndim)
    if offsets is None:
        zero = jnp.zeros(lengths.shape[:-1] + (1,), lengths.dtype)
        offsets = jnp.concatenate([zero, jnp.cumsum(lengths, axis=-1, dtype=lengths.dtype)], axis=-1)
    lead = data.shape[:axis]
    batch = int(np.prod(lead))
    rows = data.reshape((batch,) + data.shape[axis:])
    bounds = offsets.reshape((batch, offsets.shape[-1]))
    out = jax.vmap(lambda d, o: _segment_reduce_1d(d, o, reduce, initial))(rows, bounds)
    return out.reshape(lead + out.shape[1:])
