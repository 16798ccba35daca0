"""Products of activations with a weight, as each backend runs them fast.

`rows_times_weight` takes rows [m, k] and a weight [out, k] as `aten.linear` holds it,
`rows_times_matrix` a matrix [k, out] as `aten.mm` does. Most products are
`lax.dot_general`. Where the weight is a constant of the program being traced (a frozen
model: `JaxModel.frozen()` closes over its parameters) and jaxport's compiled kernel is built
(`ops/_native`, registered in `CPU_KERNELS`), CPUs run it instead: XLA:CPU's products are
slow on thin shapes (T5-small's 32 x 512 x 512 at 32 GF/s on one core), and a constant weight
can be packed for the kernel once, when the program is traced. As for convolutions, the
choice is made in the program (`lax.platform_dependent`), so the same program compiled for a
GPU runs `dot_general` there.
"""

from __future__ import annotations

import functools
import math

import jax.numpy as jnp
import numpy as np
from jax import lax

#: Compiled CPU kernels by name, each a function that returns its formulation of a product or
#: None where it does not apply. `jaxport.ops._native` adds them when `pip install` built them.
CPU_KERNELS = {}


def rows_times_weight(rows, weight, compute_dtype):
    """rows [..., k] times the transpose of weight [n, k] (or a weight [k], giving [...]),
    accumulated and returned in `compute_dtype`: `aten.linear`'s layout."""
    return _product(rows, weight, weight.ndim - 1, compute_dtype)


def rows_times_matrix(rows, matrix, compute_dtype):
    """rows [..., k] times matrix [k, n], accumulated and returned in `compute_dtype`:
    `aten.mm`'s layout (GPT-2's Conv1D weights)."""
    return _product(rows, matrix, 0, compute_dtype)


def _product(rows, weight, contracting: int, compute_dtype):
    """rows [..., k] times `weight` contracted over its dimension `contracting` (of size k).

    Leading dims multiply as one [rows, k] matrix: given [..., tokens, k] with a constant
    weight (a frozen model), XLA:CPU's dot canonicalization transposes an [n, k] weight to
    [k, n] at compile time, and its products are up to 1.7x slower on that layout (T5 frozen:
    9% slower)."""
    lead = rows.shape[:-1]
    if rows.ndim > 2:
        rows = rows.reshape(math.prod(lead), rows.shape[-1])

    def general(rows, weight):
        return lax.dot_general(rows, weight, (((rows.ndim - 1,), (contracting,)), ((), ())),
                               preferred_element_type=compute_dtype)

    kernel = CPU_KERNELS.get("product")
    on_cpu = kernel and kernel(rows, weight, contracting, compute_dtype, general)
    if on_cpu is None and rows.shape[0] == 1 and _is_half(rows.dtype) and _is_half(weight.dtype):
        on_cpu = functools.partial(_as_two_rows, general)
    out = general(rows, weight) if on_cpu is None else lax.platform_dependent(rows, weight, cpu=on_cpu,
                                                                               default=general)
    return out.reshape(*lead, *out.shape[1:]) if len(lead) > 1 else out


def _is_half(dtype) -> bool:
    return np.dtype(dtype) in (np.dtype(jnp.bfloat16), np.dtype(jnp.float16))


def _as_two_rows(general, rows, weight):
    """One row of 16-bit floats times a weight, as the first row of a product of two.

    XLA:CPU runs a one-row product of float16 or bfloat16 (a batch of one decoding) by converting
    the whole weight to float32 first, into a buffer of twice the weight's size, and inside a
    `lax.while_loop` (`generate`) it hoists those conversions out of the loop, holding a float32
    copy of every weight at once: a bfloat16 model then needs three times its size. From two rows
    on it reads the 16-bit weight as it lies, and faster (one core: 1 x 4096 times 4096 x 4096 in
    bfloat16, 104 ms converted, 9 to 12 ms as two rows). The second row is zeros, its result
    dropped."""
    out = general(jnp.concatenate([rows, jnp.zeros_like(rows)]), weight)
    return out[:1]
