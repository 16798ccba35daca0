"""JAX's 64-bit narrowing, checked once for every value jaxport converts.

With JAX's x64 mode off (its default), int64 values are stored as int32, uint64 as uint32,
float64 as float32 and complex128 as complex64. That is rounding as long as the values fit; a
value outside the narrow type's range would silently become another number (2**40 + 1 as int32
is 1) or an infinity (1e300 as float32). `problem(...)` says so for such values, so the caller
raises its error (`InputError` for an input, `ModelFileError` for a weight) instead. The extremes
come from the caller (NumPy or torch computes them where the values live).
"""

from __future__ import annotations

import jax
import numpy as np

X64_HINT = 'enable x64 with jax.config.update("jax_enable_x64", True) before converting'


def narrow_dtype(dtype) -> np.dtype:
    """The dtype JAX stores `dtype` in under the current x64 mode."""
    return np.dtype(jax.dtypes.canonicalize_dtype(np.dtype(dtype)))


def problem(what: str, exact: np.dtype, low, high) -> str | None:
    """Why narrowing values of `exact` dtype whose extremes are `low`, `high` (for floats and
    complex numbers: 0 and the largest finite magnitude of a part) would change them by more than
    rounding, or None if it would not."""
    exact = np.dtype(exact)
    narrow = narrow_dtype(exact)
    if narrow == exact:
        return None
    if exact.kind in "iu":
        info = np.iinfo(narrow)
        value = int(high) if int(high) > info.max else int(low) if int(low) < info.min else None
        if value is None:
            return None
        return (f"{what} holds {value} ({exact.name}), which is outside {narrow.name}'s range, and JAX stores "
                f"{exact.name} as {narrow.name} with its x64 mode off: {X64_HINT}")
    if exact.kind in "fc":
        part = np.dtype(np.float32)
        with np.errstate(over="ignore"):
            overflows = bool(np.isinf(part.type(float(high))))
        if not overflows:
            return None
        return (f"{what} holds {float(high):g} ({exact.name}), which is beyond {narrow.name}'s range (it would "
                f"become infinity), and JAX stores {exact.name} as {narrow.name} with its x64 mode off: {X64_HINT}")
    return None


def extremes(x: np.ndarray) -> tuple | None:
    """(low, high) of a NumPy array as `problem` takes them; None if empty or not a number."""
    if x.size == 0:
        return None
    if x.dtype.kind in "iu":
        return x.min(), x.max()
    if x.dtype.kind == "c":
        x = np.concatenate([x.real.ravel(), x.imag.ravel()])
    if x.dtype.kind == "f":
        finite = np.abs(x[np.isfinite(x)])
        return 0, (finite.max() if finite.size else 0)
    return None


def check_array(x: np.ndarray, what: str, error: type[Exception]) -> None:
    """Raise `error` if narrowing the NumPy array `x` (or scalar) would change its values by more
    than rounding."""
    x = np.asarray(x)
    if x.dtype.kind not in "iufc" or narrow_dtype(x.dtype) == x.dtype:
        return
    found = extremes(x)
    message = problem(what, x.dtype, *found) if found is not None else None
    if message:
        raise error(message)
