"""The one output comparator: a result against its reference, NaN-aware, for every checker.

`jaxport verify`, the transformers catalogue, the benchmarks and the tests all judge outputs
here, so "matches" means one thing: the same shape, the reference's dtype (or the one JAX stores
it in with x64 off), NaN in the same places, infinities in the same places with the same sign,
and every other value within `atol + rtol * |reference|`. With `per_tensor=True` the relative part is taken of the
tensor's largest finite magnitude instead of each element's (for outputs whose values span
orders of magnitude, where an element near zero would otherwise demand an absolute error
near zero).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .dlpack import to_numpy


@dataclasses.dataclass
class OutputCheck:
    """How one output compares with its reference."""

    name: str
    shape: tuple
    dtype: str
    #: the largest absolute difference over the values that are finite on both sides
    max_abs: float
    #: the largest difference relative to each reference value (0 where the reference is 0)
    max_rel: float
    passed: bool
    #: what besides the values' closeness is wrong (shape, dtype, NaN or infinity placement)
    problem: str = ""
    #: the largest finite magnitude of the reference (`max_abs / scale` is a scale-free error)
    scale: float = 0.0

    @property
    def scaled_error(self) -> float:
        """`max_abs` relative to the reference's largest finite magnitude (its own value if that is 0)."""
        return self.max_abs / self.scale if self.scale > 0 else self.max_abs


def as_numpy(value: Any) -> Any:
    """A torch tensor, JAX array or NumPy array as a NumPy array (bfloat16 kept, through
    ml_dtypes); anything else (a Python number, None) as it is."""
    if type(value).__module__.startswith("torch"):
        return to_numpy(value)
    if isinstance(value, (jax.Array, np.ndarray, np.generic)):
        return np.asarray(value)
    return value


def _as_float(x: np.ndarray) -> np.ndarray:
    """Numbers as float64; complex numbers as (real, imaginary) pairs of them, so that NaN and
    infinities are placed, and errors measured, part by part."""
    if jnp.issubdtype(x.dtype, jnp.complexfloating):
        return np.stack([x.real, x.imag], axis=-1).astype(np.float64)
    if x.dtype == np.bool_ or jnp.issubdtype(x.dtype, jnp.number):
        return x.astype(np.float64)
    return x


def compare(name: str, actual: Any, expected: Any, *, rtol: float = 1e-4, atol: float = 1e-5,
            per_tensor: bool = False) -> OutputCheck:
    """`actual` (jaxport's output) against `expected` (the reference's); see the module docstring.
    Either may be a torch tensor, a JAX or NumPy array or a Python number (a size the model
    returns, which has no dtype of its own to compare)."""
    numbers = not _is_array(actual) or not _is_array(expected)
    actual = np.asarray(as_numpy(actual))
    expected = np.asarray(as_numpy(expected))
    if actual.shape != expected.shape:
        return OutputCheck(name, actual.shape, str(actual.dtype), math.nan, math.nan, False,
                           f"shape {actual.shape}, reference {expected.shape}")
    a, e = _as_float(actual), _as_float(expected)
    if a.dtype.kind not in "fc" or e.dtype.kind not in "fc":  # strings and other non-numbers
        same = bool(np.array_equal(actual, expected))
        return OutputCheck(name, actual.shape, str(actual.dtype), 0.0 if same else math.nan,
                           0.0 if same else math.nan, same, "" if same else "values differ")
    nan_a, nan_e = np.isnan(a), np.isnan(e)
    inf_a, inf_e = np.isinf(a), np.isinf(e)
    finite = ~(nan_a | nan_e | inf_a | inf_e)
    diff = np.abs(a[finite] - e[finite])
    magnitude = np.abs(e[finite])
    scale = float(np.abs(e[np.isfinite(e)]).max()) if np.isfinite(e).any() else 0.0
    max_abs = float(diff.max()) if diff.size else 0.0
    max_rel = float((diff / np.where(magnitude > 0, magnitude, 1)).max()) if diff.size else 0.0
    problems = []
    if (n := int(np.count_nonzero(nan_a != nan_e))):
        problems.append(f"NaN at {n} place(s) where the other has a number")
    if (n := int(np.count_nonzero((inf_a != inf_e) | (inf_a & inf_e & (a != e))))):
        problems.append(f"infinity differs at {n} place(s)")
    # the reference's dtype, or the one JAX stores it in (int64 as int32 with x64 off)
    allowed = {expected.dtype} | ({np.dtype(jax.dtypes.canonicalize_dtype(expected.dtype))}
                                  if expected.dtype != object else set())
    if actual.dtype not in allowed and not numbers:
        problems.append(f"dtype {actual.dtype}, reference {expected.dtype}")
    bound = atol + rtol * (max(scale, 1.0) if per_tensor else magnitude)
    close = bool(np.all(diff <= bound))
    return OutputCheck(name, actual.shape, str(actual.dtype), max_abs, max_rel, close and not problems,
                       "; ".join(problems), scale)


def _is_array(value: Any) -> bool:
    return isinstance(value, (np.ndarray, np.generic, jax.Array)) or type(value).__module__.startswith("torch")


def compare_all(actual: Sequence[Any], expected: Sequence[Any], *, names: Sequence[str] | None = None,
                rtol: float = 1e-4, atol: float = 1e-5, per_tensor: bool = False) -> list[OutputCheck]:
    """Every output against its reference, in order (flat lists: flatten pytrees first), and one
    failing check more if the counts differ."""
    names = list(names) if names is not None else [f"output {i}" for i in range(max(len(actual), len(expected)))]
    checks = [compare(n, a, e, rtol=rtol, atol=atol, per_tensor=per_tensor)
              for n, a, e in zip(names, actual, expected)]
    if len(actual) != len(expected):
        checks.append(OutputCheck("outputs", (), "", math.nan, math.nan, False,
                                  f"{len(actual)} outputs, reference {len(expected)}"))
    return checks


def first_output(output: Any) -> Any:
    """The main tensor of a model's output: the output itself, or the first leaf of its tuple,
    list or dict (`last_hidden_state`, `logits`, `logits_per_image`), recursively."""
    if isinstance(output, (tuple, list)):
        return first_output(output[0])
    if isinstance(output, dict):
        return first_output(next(iter(output.values())))
    if hasattr(output, "to_tuple"):  # a transformers ModelOutput
        return first_output(output.to_tuple())
    return output


__all__ = ["OutputCheck", "as_numpy", "compare", "compare_all", "first_output"]
