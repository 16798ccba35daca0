"""Numeric formats between PyTorch and JAX: dtype tables, JAX's 64-bit narrowing, matmul precision.

With JAX's x64 mode off (its default), int64 values are stored as int32, uint64 as uint32,
float64 as float32 and complex128 as complex64. That is rounding as long as the values fit; a
value outside the narrow type's range would silently become another number (2**40 + 1 as int32
is 1) or an infinity (1e300 as float32). `problem(...)` says so for such values, so the caller
raises its error (`InputError` for an input, `ModelFileError` for a weight) instead. The extremes
come from the caller (NumPy or torch computes them where the values live).
"""

from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import torch

X64_HINT = 'enable x64 with jax.config.update("jax_enable_x64", True) before converting'

_TORCH_TO_NUMPY = {
    torch.bool: np.dtype(np.bool_),
    torch.uint8: np.dtype(np.uint8),
    torch.int8: np.dtype(np.int8),
    torch.int16: np.dtype(np.int16),
    torch.int32: np.dtype(np.int32),
    torch.int64: np.dtype(np.int64),
    torch.uint16: np.dtype(np.uint16),
    torch.uint32: np.dtype(np.uint32),
    torch.uint64: np.dtype(np.uint64),
    torch.float16: np.dtype(jnp.float16),
    torch.bfloat16: np.dtype(jnp.bfloat16),
    torch.float32: np.dtype(np.float32),
    torch.float64: np.dtype(np.float64),
    torch.complex64: np.dtype(np.complex64),
    torch.complex128: np.dtype(np.complex128),
    torch.float8_e4m3fn: np.dtype(jnp.float8_e4m3fn),
    torch.float8_e5m2: np.dtype(jnp.float8_e5m2),
}
_NUMPY_TO_TORCH = {v: k for k, v in _TORCH_TO_NUMPY.items()}


def numpy_dtype(dtype: torch.dtype) -> np.dtype:
    """The NumPy/JAX dtype of a torch dtype (exact: int64 stays int64 here)."""
    try:
        return _TORCH_TO_NUMPY[dtype]
    except KeyError:
        raise TypeError(f"jaxport does not support torch dtype {dtype}") from None


def jax_dtype(dtype: torch.dtype) -> np.dtype:
    """The dtype JAX stores a torch dtype in under the current x64 mode (int64 as int32 without it)."""
    return narrow_dtype(numpy_dtype(dtype))


def torch_dtype(dtype) -> torch.dtype:
    """The torch dtype of a NumPy/JAX dtype."""
    return _NUMPY_TO_TORCH[np.dtype(dtype)]


#: torch.get_float32_matmul_precision() -> jax.default_matmul_precision.
_MATMUL_PRECISIONS = {"highest": "float32", "high": "tensorfloat32", "medium": "bfloat16"}


def matmul_precision() -> str:
    """How PyTorch computes float32 matrix products now, in JAX's terms: "float32" at
    PyTorch's default ("highest"); TF32 or bfloat16 only where the user asked for them with
    `torch.set_float32_matmul_precision`. JAX's own default is TF32 on recent NVIDIA GPUs and
    one bfloat16 pass on TPUs, off from PyTorch by about 1e-3."""
    return _MATMUL_PRECISIONS.get(torch.get_float32_matmul_precision(), "float32")


def convolution_precision() -> str:
    """How PyTorch computes float32 convolutions on a GPU, in JAX's terms: "tensorfloat32" at its
    default (cuDNN convolutions in TF32, unlike its matrix products), "float32" where the user
    asked for IEEE float32 (`torch.backends.cudnn.conv.fp32_precision = "ieee"`, or the older
    `torch.backends.cudnn.allow_tf32 = False`). On the CPU both compute in float32 (XLA:CPU has
    no TF32), as PyTorch's CPU convolutions do."""
    cudnn = torch.backends.cudnn
    for scope in (getattr(cudnn, "conv", None), cudnn, torch.backends):  # "none" defers to the next
        setting = getattr(scope, "fp32_precision", "none")
        if setting == "tf32":
            return "tensorfloat32"
        if setting == "ieee":
            return "float32"
    try:
        return "tensorfloat32" if cudnn.allow_tf32 else "float32"
    except RuntimeError:  # PyTorch refuses to answer when the old and new settings disagree
        return "float32"


# -- JAX's 64-bit narrowing -----------------------------------------------------------------------


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


_warned_narrowing: set[str] = set()


def warn_narrowing(what: str, dtype) -> None:
    """Warn once per dtype that JAX's x64 mode is off and values are being narrowed."""
    name = np.dtype(dtype).name
    if name in _warned_narrowing:
        return
    _warned_narrowing.add(name)
    narrow = narrow_dtype(dtype).name
    warnings.warn(
        f"jaxport: {what} has dtype {name}, which JAX stores as {narrow} because x64 mode is off. "
        "Enable it with jax.config.update('jax_enable_x64', True) before converting to keep "
        "64-bit precision. (This warning is shown once.)",
        stacklevel=3,
    )
