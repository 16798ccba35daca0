"""The tests' numeric check: `jaxport.compare.compare`, the comparator `jaxport verify`, the
catalogue and the benchmarks use, and an assertion on it that says what differs."""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

from jaxport.compare import OutputCheck, as_numpy, compare


def compare_values(name: str, actual: Any, expected: Any, *, rtol: float, atol: float,
                   per_tensor: bool = False) -> OutputCheck:
    """`jaxport.compare.compare` on the values alone: both sides as float64 (as `.astype` casts
    them), so their dtypes are not judged, in JAX's x64 mode, so float64 is the dtype JAX stores
    float64 in whatever mode the caller runs in."""
    actual = np.asarray(as_numpy(actual)).astype(np.float64)
    expected = np.asarray(as_numpy(expected)).astype(np.float64)
    with jax.enable_x64(True):
        return compare(name, actual, expected, rtol=rtol, atol=atol, per_tensor=per_tensor)


def assert_close(actual: Any, expected: Any, *, rtol: float, atol: float, per_tensor: bool = False,
                 check_dtype: bool = True, name: str = "output") -> OutputCheck:
    """`actual` against `expected` by `jaxport.compare.compare`: the same shape, the dtype JAX
    stores `expected`'s in (unless `check_dtype=False`: `compare_values`), NaN and infinities in
    the same places, other values within `atol + rtol * |expected|` (`per_tensor`: within
    `atol + rtol * max(1, max |expected|)`). Raises an AssertionError saying what differs;
    returns the check."""
    check = (compare(name, actual, expected, rtol=rtol, atol=atol, per_tensor=per_tensor) if check_dtype
             else compare_values(name, actual, expected, rtol=rtol, atol=atol, per_tensor=per_tensor))
    scale = f", per tensor of max |expected| {check.scale:.3g}" if per_tensor else ""
    assert check.passed, (f"{check.name}: {check.problem or 'values differ'}; max |diff| {check.max_abs:.3g}, "
                          f"max rel {check.max_rel:.3g} (rtol={rtol:g}, atol={atol:g}{scale})")
    return check
