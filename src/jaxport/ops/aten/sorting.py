"""ATen lowerings: sorting and order statistics (sort, argsort, topk, kthvalue, median, nanmedian,
mode).

Sorts are stable, NaN the largest value, indices int64. The median is the lower median, NaN
where the slice holds one (nanmedian: of the numbers); `mode` is the smallest of the most
frequent values, as PyTorch's sort-then-count kernel gives it.
"""

from __future__ import annotations

import jax.numpy as jnp
from jax import lax

from ..registry import aten
from ._promotion import is_floating
from .reduction import _index_dtype, _on_axis


def _sort(x, axis: int, descending: bool):
    """Stable sort along `axis`: (values, int64 indices); NaN sorts as the largest value."""
    n = x.shape[axis]
    iota = lax.broadcasted_iota(_index_dtype(), x.shape, axis)
    keys = x.astype(jnp.uint8) if x.dtype == jnp.bool_ else x
    if descending:
        # A stable ascending sort of the reversed input, reversed, keeps equal elements in order.
        keys, iota = lax.rev(keys, (axis,)), lax.rev(iota, (axis,))
    if n == 0:
        values, indices = keys, iota
    else:
        values, indices = lax.sort((keys, iota), dimension=axis, is_stable=True, num_keys=1)
    if descending:
        values, indices = lax.rev(values, (axis,)), lax.rev(indices, (axis,))
    return values.astype(x.dtype), indices


def _median(x, axis, ignore_nan):
    """The lower median along `axis` and its index; NaN wins unless `ignore_nan`."""
    n = x.shape[axis]
    values, indices = _sort(x, axis, descending=False)
    if is_floating(x):
        nans = jnp.sum(jnp.isnan(x), axis=axis, keepdims=True, dtype=_index_dtype())
        if ignore_nan:  # NaNs sort last: the median of the n - nans numbers before them
            pos = jnp.maximum((n - nans - 1) // 2, 0)
        else:  # the first NaN, which a stable sort puts at n - nans
            pos = jnp.where(nans > 0, n - nans, (n - 1) // 2)
    else:
        pos = jnp.full([1 if a == axis else s for a, s in enumerate(x.shape)], (n - 1) // 2, _index_dtype())
    values = jnp.take_along_axis(values, pos, axis=axis)
    indices = jnp.take_along_axis(indices, pos, axis=axis)
    if ignore_nan and is_floating(x):
        # An all-NaN row: every element ties under PyTorch's comparator, so its index is
        # whichever one std::nth_element leaves in front.
        indices = jnp.where(nans == n, jnp.asarray(_nth_element_front_of_ties(n), indices.dtype), indices)
    return jnp.squeeze(values, axis), jnp.squeeze(indices, axis)


def _nth_element_front_of_ties(n: int) -> int:
    """The index libstdc++'s std::nth_element(first, first, last) leaves at `first` when all `n`
    elements tie (nanmedian of an all-NaN row asks for position (0 - 1) / 2 == 0 in C++).

    With every comparison false, each introselect round swaps the front with the middle
    (__move_median_to_first), then __unguarded_partition swaps pairs inwards from both ends,
    reversing [1, last), and cuts at 1 + (last - 1) // 2; the front stays in the left part,
    which halves until 3 or fewer are left for an insertion sort that moves nothing.
    """
    rounds, last = [], n
    while last > 3:
        rounds.append(last)
        last = 1 + (last - 1) // 2
    pos = 0  # follow the slot that ends at the front back to the element that started there
    for last in reversed(rounds):
        if 1 <= pos < last:  # undo the reversal of [1, last)
            pos = last - pos
        mid = last // 2
        pos = mid if pos == 0 else 0 if pos == mid else pos  # undo the swap of the front and the middle
    return pos


def _insertion_sorted(values, indices):
    """(values, indices) along the last axis in the order libstdc++'s std::sort leaves them for
    16 elements or fewer, where it runs an insertion sort alone, comparing with `<`.

    A NaN compares false both ways, so it stays where it is and stops numbers moving back past
    it, except that a number smaller than the first element moves straight to the front.
    """
    n = values.shape[-1]
    pos = lax.broadcasted_iota(jnp.int32, values.shape, values.ndim - 1)
    for i in range(1, n):
        v, ix = values[..., i:i + 1], indices[..., i:i + 1]
        # __unguarded_linear_insert walks back while v < values[k]: it stops after the last k
        # before i where that is false (NaN comparisons among them)
        stop = jnp.max(jnp.where((pos < i) & ~(v < values), pos, -1), axis=-1, keepdims=True)
        dest = jnp.where(v < values[..., :1], 0, stop + 1)
        moved = (pos > dest) & (pos <= i)
        shift = lambda a: jnp.concatenate([a[..., :1], a[..., :-1]], axis=-1)  # noqa: E731
        values = jnp.where(pos == dest, v, jnp.where(moved, shift(values), values))
        indices = jnp.where(pos == dest, ix, jnp.where(moved, shift(indices), indices))
    return values, indices


@aten("argsort.default", "argsort.stable")
def aten_argsort(self, dim=-1, descending=False, *, stable=False):
    """argsort.stable(Tensor self, *, bool stable, int dim=-1, bool descending=False) -> Tensor"""
    return aten_sort(self, dim=dim, descending=descending)[1]


@aten("kthvalue.default")
def aten_kthvalue(self, k, dim=-1, keepdim=False):
    """kthvalue(Tensor self, SymInt k, int dim=-1, bool keepdim=False) -> (Tensor values, Tensor indices)"""

    def kth(x, axis):
        values, indices = _sort(x, axis, descending=False)
        return (lax.index_in_dim(values, k - 1, axis, keepdims=False),
                lax.index_in_dim(indices, k - 1, axis, keepdims=False))

    return _on_axis(kth, self, dim, keepdim)


@aten("median.default")
def aten_median(self):
    """median(Tensor self) -> Tensor"""
    if self.size == 0:
        return jnp.full((), jnp.nan, self.dtype)
    return _median(self.reshape(-1), 0, ignore_nan=False)[0]


@aten("median.dim")
def aten_median_dim(self, dim, keepdim=False):
    """median.dim(Tensor self, int dim, bool keepdim=False) -> (Tensor values, Tensor indices)"""
    return _on_axis(lambda x, axis: _median(x, axis, ignore_nan=False), self, dim, keepdim)


@aten("mode.default")
def aten_mode(self, dim=-1, keepdim=False):
    """mode(Tensor self, int dim=-1, bool keepdim=False) -> (Tensor values, Tensor indices)"""

    def mode(x, axis):
        # PyTorch sorts, then keeps the first longest run (so the smallest of the most frequent
        # values) and the original index of that run's last element. NaNs are runs of one
        # (NaN != NaN), and where they sit depends on std::sort, whose `<` does not order them:
        # for 16 elements or fewer that is an insertion sort, followed exactly; past that,
        # libstdc++'s introsort, not followed (a stable sort with NaN last; ties keep the
        # largest index there).
        n = x.shape[axis]
        if n == 0:
            shape = x.shape[:axis] + x.shape[axis + 1:]
            return jnp.zeros(shape, x.dtype), jnp.zeros(shape, _index_dtype())
        if is_floating(x) and n <= 16:
            x = jnp.moveaxis(x, axis, -1)
            axis = x.ndim - 1
            values, indices = _insertion_sorted(x, lax.broadcasted_iota(_index_dtype(), x.shape, axis))
        else:
            values, indices = _sort(x, axis, descending=False)
        pos = lax.broadcasted_iota(_index_dtype(), x.shape, axis)
        prev = jnp.concatenate([lax.slice_in_dim(values, 0, 1, axis=axis), lax.slice_in_dim(values, 0, n - 1, axis=axis)], axis)
        nxt = jnp.concatenate([lax.slice_in_dim(values, 1, n, axis=axis), lax.slice_in_dim(values, n - 1, n, axis=axis)], axis)
        starts = (pos == 0) | (values != prev)
        ends = (pos == n - 1) | (values != nxt)
        run_start = lax.cummax(jnp.where(starts, pos, 0), axis=axis)
        freq = jnp.where(ends, pos - run_start + 1, 0)
        best = jnp.argmax(freq, axis=axis, keepdims=True)
        return (jnp.squeeze(jnp.take_along_axis(values, best, axis=axis), axis),
                jnp.squeeze(jnp.take_along_axis(indices, best, axis=axis), axis))

    return _on_axis(mode, self, dim, keepdim)


@aten("nanmedian.default")
def aten_nanmedian(self):
    """nanmedian(Tensor self) -> Tensor"""
    if self.size == 0:
        return jnp.full((), jnp.nan, self.dtype)
    return _median(self.reshape(-1), 0, ignore_nan=True)[0]


@aten("nanmedian.dim")
def aten_nanmedian_dim(self, dim, keepdim=False):
    """nanmedian.dim(Tensor self, int dim, bool keepdim=False) -> (Tensor values, Tensor indices)"""
    return _on_axis(lambda x, axis: _median(x, axis, ignore_nan=True), self, dim, keepdim)


@aten("sort.default", "sort.stable")
def aten_sort(self, dim=-1, descending=False, *, stable=False):
    """sort.stable(Tensor self, *, bool? stable, int dim=-1, bool descending=False) -> (Tensor values, Tensor indices)"""
    return _on_axis(lambda x, axis: _sort(x, axis, descending), self, dim)


@aten("topk.default")
def aten_topk(self, k, dim=-1, largest=True, sorted=True):
    """topk(Tensor self, SymInt k, int dim=-1, bool largest=True, bool sorted=True) -> (Tensor values, Tensor indices)"""

    def top(x, axis):
        values, indices = _sort(x, axis, descending=largest)
        return lax.slice_in_dim(values, 0, k, axis=axis), lax.slice_in_dim(indices, 0, k, axis=axis)

    return _on_axis(top, self, dim)
