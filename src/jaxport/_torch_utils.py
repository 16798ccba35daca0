"""Conversions between torch and JAX values used by the torch frontends."""

from __future__ import annotations

import warnings
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import torch

from . import _narrowing

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


#: torch.get_float32_matmul_precision() -> jax.default_matmul_precision.
_MATMUL_PRECISIONS = {"highest": "float32", "high": "tensorfloat32", "medium": "bfloat16"}


def matmul_precision() -> str:
    """How PyTorch computes float32 matrix products now, in JAX's terms: "float32" at
    PyTorch's default ("highest"); TF32 or bfloat16 only where the user asked for them with
    `torch.set_float32_matmul_precision`. JAX's own default is TF32 on recent NVIDIA GPUs and
    one bfloat16 pass on TPUs, off from PyTorch by about 1e-3."""
    return _MATMUL_PRECISIONS.get(torch.get_float32_matmul_precision(), "float32")


def numpy_dtype(dtype: torch.dtype) -> np.dtype:
    """The NumPy/JAX dtype of a torch dtype (exact: int64 stays int64 here)."""
    try:
        return _TORCH_TO_NUMPY[dtype]
    except KeyError:
        raise TypeError(f"jaxport does not support torch dtype {dtype}") from None


def jax_dtype(dtype: torch.dtype) -> np.dtype:
    """The dtype JAX stores a torch dtype in under the current x64 mode (int64 as int32 without it)."""
    return np.dtype(jax.dtypes.canonicalize_dtype(numpy_dtype(dtype)))


def torch_dtype(dtype) -> torch.dtype:
    return _NUMPY_TO_TORCH[np.dtype(dtype)]


_warned_narrowing: set[str] = set()


def warn_narrowing(what: str, dtype) -> None:
    """Warn once per dtype that JAX's x64 mode is off and values are being narrowed."""
    name = np.dtype(dtype).name
    if name in _warned_narrowing:
        return
    _warned_narrowing.add(name)
    narrow = np.dtype(jax.dtypes.canonicalize_dtype(dtype)).name
    warnings.warn(
        f"jaxport: {what} has dtype {name}, which JAX stores as {narrow} because x64 mode is off. "
        "Enable it with jax.config.update('jax_enable_x64', True) before converting to keep "
        "64-bit precision. (This warning is shown once.)",
        stacklevel=3,
    )


def to_jax(tensor: torch.Tensor, *, what: str = "a tensor", error: type[Exception] | None = None) -> jax.Array:
    """A torch tensor as a jax.Array, zero-copy through DLPack where the layout allows.

    With JAX's x64 mode off, 64-bit values are narrowed (`_narrowing`): float64 with a warning
    (once per dtype); values the narrow type cannot hold (an int64 beyond int32, a float64 beyond
    float32's range) raise `error` naming `what` when one is given (inputs, weights), and warn
    otherwise."""
    tensor = tensor.detach()
    if tensor.is_conj():
        tensor = tensor.resolve_conj()
    if tensor.is_neg():
        tensor = tensor.resolve_neg()
    exact = numpy_dtype(tensor.dtype)
    narrow = np.dtype(jax.dtypes.canonicalize_dtype(exact))
    if narrow != exact:
        found = _extremes(tensor)
        problem = _narrowing.problem(what, exact, *found) if found is not None else None
        if problem and error is not None:
            raise error(problem)
        if exact.kind == "f" or problem:
            warn_narrowing(what, exact)
        tensor = tensor.to(torch_dtype(narrow))
    if tensor.device.type != "cpu":
        tensor = tensor.cpu()
    if not tensor.is_contiguous():
        tensor = tensor.contiguous()
    if tensor.dtype != torch.bool and tensor.numel() > 0:
        try:
            shared = jax.dlpack.from_dlpack(tensor)
        except Exception:  # an unaligned buffer or a dtype DLPack lacks: copy below
            pass
        else:
            # DLPack shares the CPU buffer, so the array lives on the CPU; like jnp.asarray, the
            # result belongs on JAX's default device (a GPU's, where there is one), or a model's
            # weights would pin every call to the CPU.
            default = jax.devices()[0]
            return shared if default.platform == "cpu" else jax.device_put(shared, default)
    return jnp.asarray(to_numpy(tensor))


def to_numpy(tensor: torch.Tensor) -> np.ndarray:
    """A CPU tensor's values as a NumPy array (bfloat16 and float8 through ml_dtypes)."""
    tensor = tensor.detach().cpu()
    if tensor.dtype in (torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2):
        bits = torch.int16 if tensor.dtype == torch.bfloat16 else torch.uint8
        return tensor.view(bits).numpy().view(numpy_dtype(tensor.dtype))
    return tensor.resolve_conj().resolve_neg().numpy()


def _extremes(tensor: torch.Tensor) -> tuple | None:
    """(low, high) of a tensor as `_narrowing.problem` takes them; None if empty."""
    if tensor.numel() == 0:
        return None
    if tensor.is_complex():
        tensor = torch.view_as_real(tensor)
    if tensor.is_floating_point():
        finite = tensor[torch.isfinite(tensor)].abs()
        return 0, (finite.max().item() if finite.numel() else 0)
    if tensor.dtype == torch.bool:
        return None
    return tensor.min().item(), tensor.max().item()


def to_torch(array) -> torch.Tensor:
    """A jax.Array (or NumPy array) as a torch tensor, zero-copy through DLPack where possible."""
    if not isinstance(array, np.ndarray):
        try:
            return torch.from_dlpack(array)
        except Exception:  # a dtype DLPack lacks (bool on some versions): copy below
            pass
    host = np.array(array)  # a writable copy
    if host.dtype in (np.dtype(jnp.bfloat16), np.dtype(jnp.float8_e4m3fn), np.dtype(jnp.float8_e5m2)):
        bits = np.int16 if host.dtype == np.dtype(jnp.bfloat16) else np.uint8
        return torch.from_numpy(host.view(bits)).view(torch_dtype(host.dtype))
    return torch.from_numpy(host)


def functional_variant(op, suffix: str = "") -> Any:
    """For an in-place overload like `aten.add_.Tensor`, its functional twin `aten.add.Tensor`:
    the overload of the op without `_` that takes the same arguments in the same order (the
    names differ at times: `pow_.Scalar` is `pow.Tensor_Scalar`). `suffix="_functional"`
    looks for the op named so instead (`normal_` is `normal_functional`: `normal` itself
    draws from mean and std tensors)."""
    for candidate in _functional_candidates(op, suffix):
        if _arguments(candidate) == _arguments(op):
            return candidate
    return None


def functional_variant_by_name(op) -> Any:
    """Like `functional_variant`, also when the twin orders the arguments differently
    (`polygamma_(self, n)` is `polygamma(n, self)`): call it with keyword arguments."""
    for candidate in _functional_candidates(op):
        if sorted(_arguments(candidate)) == sorted(_arguments(op)):
            return candidate
    return None


def _functional_candidates(op, suffix: str = "") -> list:
    if not isinstance(op, torch._ops.OpOverload) or not op._schema.is_mutable:
        return []
    name = op._opname
    if not name.endswith("_") or name.startswith("_"):
        return []
    packet = getattr(torch.ops.aten, name[:-1] + suffix, None)
    if packet is None:
        return []
    same_name = getattr(packet, op._overloadname, None)
    others = [getattr(packet, n) for n in packet.overloads() if n != op._overloadname]
    return ([same_name] if same_name is not None else []) + others


def _arguments(op) -> list[tuple[str, str]]:
    # The written tensor is `self` in-place and at times `input` in the twin (`dropout_`).
    return [("self" if a.name == "input" else a.name, str(a.type)) for a in op._schema.arguments]


def written_argument(op) -> int | None:
    """The position of the argument an in-place overload writes (`self` of `add_`), else None."""
    for i, a in enumerate(op._schema.arguments):
        if a.alias_info is not None and a.alias_info.is_write and not a.kwarg_only:
            return i
    return None


#: Keyword arguments that say where or how a tensor is stored, never what it holds: lowerings
#: never see them.
PLACEMENT_KWARGS = frozenset({"layout", "device", "pin_memory", "memory_format", "non_blocking"})

