"""Grouped matrix products (mixture-of-experts layers) as each backend runs them fast.

`grouped_rows(a, b, sizes)` multiplies consecutive groups of `a`'s rows, group g holding
`sizes[g]` rows, by `b[g]`. `lax.ragged_dot` says exactly that, and GPUs and TPUs have kernels
for it; XLA:CPU expands it into one dense product of every row with every group's matrix,
masked: G times the work (Mixtral, 8 experts: 7x PyTorch eager's time at 1,024 tokens). On CPU
the product runs instead as a loop over the non-empty groups and, inside each, over windows
of 16 to 256 consecutive rows multiplied by that group's matrix, so the work is that of the
rows present (plus one part-filled window per group). Trip counts are computed from `sizes`
at run time, so shapes stay static. A `while_loop` cannot be differentiated in
reverse, so the CPU form carries its own gradient (`jax.custom_vjp`), itself a loop over
the same windows. With constant expert weights (a frozen model) and jaxport's compiled kernels
built, CPUs run the grouped product kernel instead (`CPU_KERNELS["grouped_product"]`), each
group's rows times its packed weight, with no windows. The choice is made in the program
(`lax.platform_dependent`), like the convolutions' (`ops/_convolution.py`).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from .._products import CPU_KERNELS

#: Rows per window on CPU, at least and at most: XLA:CPU's matrix product runs faster on more
#: rows (an 8-expert 1024x3584 layer over 2,048 rows: 315 ms in 64-row windows, 244 ms in
#: 256-row ones, one dense product of as many rows 242 ms), while windows much longer than an
#: average group waste work (over 256 rows: 60 ms in 128-row windows, 283 ms in 256-row ones).
MIN_WINDOW_ROWS, MAX_WINDOW_ROWS = 64, 256
#: The smallest last window of a group; the others double up to the window's rows.
MIN_LAST_WINDOW_ROWS = 16


def grouped_rows(a, b, sizes, compute_dtype):
    """Row i of `a` (S, K) times `b[g]` (G, K, N), g the group row i falls in, the groups being
    `sizes[g]` (>= 0, int32) consecutive rows from row 0; rows past the last group are 0.
    Accumulates and returns `compute_dtype`."""
    def general(a, b, sizes):
        out = lax.ragged_dot(a, b, sizes, preferred_element_type=compute_dtype)
        # ragged_dot leaves rows past the last group unspecified (GPU and TPU kernels may skip them).
        covered = jnp.arange(a.shape[0], dtype=np.int32) < jnp.sum(sizes, dtype=np.int32)
        return jnp.where(covered[:, None], out, jnp.zeros((), out.dtype))

    if a.shape[0] == 0:
        return jnp.zeros((0, b.shape[2]), compute_dtype)
    if not jax.core.is_constant_dim(a.shape[0]):
        return general(a, b, sizes)  # a symbolic row count (jax.export) cannot size CPU windows
    kernel = CPU_KERNELS.get("grouped_product")
    on_cpu = kernel and kernel(a, b, sizes, compute_dtype, general)
    if on_cpu is None:
        on_cpu = lambda a, b, sizes: _by_windows(a, b, sizes, compute_dtype)  # noqa: E731
    return lax.platform_dependent(a, b, sizes, cpu=on_cpu, default=general)


def _each_group(sizes, total_rows, rows, body, init):
    """`body(group, windows, carry)` for each non-empty group (an expert no token chose costs
    nothing, its weights are not read), `windows` being that group's `_Windows`."""
    ends = jnp.minimum(jnp.cumsum(jnp.maximum(sizes, 0)), total_rows)
    starts = jnp.concatenate([jnp.zeros((1,), ends.dtype), ends[:-1]])

    # A loop over the non-empty groups only, not a `cond` per group: XLA copies a loop-carried
    # buffer into a conditional's branches, the whole output each time.
    present = jnp.nonzero(ends > starts, size=sizes.shape[0], fill_value=0)[0]

    def group(i, carry):
        g = present[i]
        return body(g, _Windows(starts[g], ends[g], total_rows, rows), carry)

    return lax.fori_loop(0, jnp.sum(ends > starts), group, init)


class _Windows:
    """Rows [start, end) as `count` windows of `rows` rows."""

    def __init__(self, start, end, total_rows, rows):
        self.rows = rows
        self.start, self.end, self.total_rows = start, end, total_rows
        self.count = (end - start + self.rows - 1) // self.rows

    def __getitem__(self, i):
        """Window i: where it begins (moved back, if need be, to end by `total_rows`) and which
        of its rows are the group's."""
        first = self.start + i * self.rows
        start = jnp.minimum(first, self.total_rows - self.rows)
        index = start + jnp.arange(self.rows, dtype=start.dtype)
        return start, (index >= first) & (index < self.end)


def _as_stored(b):
    """`b` (G, K, N) as (G, N, K). Models store expert weights (out, in) and hand the product
    their transpose, so this transpose cancels theirs and each group's matrix is read as it
    lies, never copied into another layout on each call."""
    return jnp.swapaxes(b, 1, 2)


def window_rows(total_rows: int, groups: int) -> int:
    """Rows per window: the largest power of two not above twice an average group's rows,
    within bounds."""
    average = max(1, 2 * total_rows // max(groups, 1))
    return min(total_rows, max(MIN_WINDOW_ROWS, min(MAX_WINDOW_ROWS, 1 << (average.bit_length() - 1))))


def _forward(a, b, sizes, compute_dtype):
    """The product, each group's rows in full windows and then one last window of the smallest
    power of two (from `MIN_LAST_WINDOW_ROWS`) that holds the rest: a group of 20 rows is one
    32-row product, not a 64-row one (at 128 tokens, 8 experts, top-2: 82 -> 71 ms for a
    1024x3584 expert)."""
    stored = _as_stored(b)
    total_rows = a.shape[0]
    rows = window_rows(total_rows, b.shape[0])
    last_sizes = sorted({min(total_rows, MIN_LAST_WINDOW_ROWS << i) for i in range(8)
                         if MIN_LAST_WINDOW_ROWS << i <= rows} | {rows})

    def product(x, weight):
        return lax.dot_general(x, weight, (((1,), (1,)), ((), ())), preferred_element_type=compute_dtype)

    def group(g, windows, out):
        weight = stored[g]  # once per group: a dynamic slice in the window loop would copy it per window

        def update(out, start, mask, block):
            kept = lax.dynamic_slice_in_dim(out, start, rows)
            return lax.dynamic_update_slice_in_dim(out, jnp.where(mask[:, None], block, kept), start, 0)

        def window(i, out):
            start, mask = windows[i]
            return update(out, start, mask, product(lax.dynamic_slice_in_dim(a, start, rows), weight))

        out = lax.fori_loop(0, windows.count - 1, window, out)
        start, mask = windows[windows.count - 1]
        first = windows.start + (windows.count - 1) * rows
        remaining = windows.end - first

        def last(n):  # the last rows as an n-row product, its block padded to a window's rows
            def compute():
                begin = jnp.minimum(first, total_rows - n)
                block = product(lax.dynamic_slice_in_dim(a, begin, n), weight)
                return lax.dynamic_slice_in_dim(jnp.pad(block, ((rows, rows), (0, 0))), rows + start - begin, rows)
            return compute

        # branches return the block, not the updated output: XLA would copy the output into each
        branch = jnp.searchsorted(jnp.asarray(last_sizes, remaining.dtype), remaining)
        return update(out, start, mask, lax.switch(branch, [last(n) for n in last_sizes]))

    return _each_group(sizes, total_rows, rows, group, jnp.zeros((total_rows, b.shape[2]), compute_dtype))


@jax.custom_vjp
def _windowed(a, b, sizes, compute_dtype_marker):
    return _forward(a, b, sizes, compute_dtype_marker.dtype)


def _windowed_forward(a, b, sizes, marker):
    return _forward(a, b, sizes, marker.dtype), (a, b, sizes, marker)


def _windowed_backward(residuals, grad):
    """d a = grad's windows times b[g] transposed; d b[g] = a's rows of g, transposed, times
    grad's: one pass over the same windows."""
    a, b, sizes, marker = residuals
    compute = marker.dtype
    stored = _as_stored(b)

    def group(g, windows, carry):
        weight = stored[g]

        def window(i, carry):
            grad_a, grad_weight = carry
            start, mask = windows[i]
            rows_grad = lax.dynamic_slice_in_dim(grad, start, windows.rows)
            rows_grad = jnp.where(mask[:, None], rows_grad, jnp.zeros((), grad.dtype))
            product = jnp.dot(rows_grad, weight, preferred_element_type=compute)
            kept = lax.dynamic_slice_in_dim(grad_a, start, windows.rows)
            grad_a = lax.dynamic_update_slice_in_dim(grad_a, jnp.where(mask[:, None], product, kept), start, 0)
            rows = lax.dynamic_slice_in_dim(a, start, windows.rows)
            grad_weight += lax.dot_general(rows_grad, rows, (((0,), (0,)), ((), ())), preferred_element_type=compute)
            return grad_a, grad_weight

        grad_a, grad_stored = carry
        grad_a, grad_weight = lax.fori_loop(0, windows.count, window, (grad_a, jnp.zeros(weight.shape, compute)))
        return grad_a, grad_stored.at[g].set(grad_weight)

    init = (jnp.zeros(a.shape, compute), jnp.zeros(stored.shape, compute))
    grad_a, grad_stored = _each_group(sizes, a.shape[0], window_rows(a.shape[0], b.shape[0]), group, init)
    return grad_a.astype(a.dtype), _as_stored(grad_stored).astype(b.dtype), None, None


_windowed.defvjp(_windowed_forward, _windowed_backward)


def _by_windows(a, b, sizes, compute_dtype):
    # custom_vjp takes arrays only: the accumulation dtype travels as an empty array of it
    return _windowed(a, b, sizes, jnp.zeros((0,), compute_dtype))
