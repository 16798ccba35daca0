"""Tensors between PyTorch and JAX: through DLPack without a copy where the layout allows.

Every torch value jaxport reads (weights, constants, inputs, eager arguments) and every array it
hands back to PyTorch crosses here, so JAX's 64-bit narrowing is checked in one place.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import torch

from . import dtypes, pages

#: The alignment XLA:CPU needs of a buffer it takes as it lies (JAX copies any other one it is
#: handed, at the array's first use; checking first spares that deferred copy's allocation).
XLA_CPU_ALIGNMENT = 64


def to_jax(tensor: torch.Tensor, *, what: str = "a tensor", error: type[Exception] | None = None,
           release: bool = False) -> jax.Array:
    """A torch tensor as a jax.Array, zero-copy through DLPack where the layout allows.

    With JAX's x64 mode off, 64-bit values are narrowed (`dtypes`): float64 with a warning
    (once per dtype); values the narrow type cannot hold (an int64 beyond int32, a float64 beyond
    float32's range) raise `error` naming `what` when one is given (inputs, weights), and warn
    otherwise.

    A CPU buffer XLA cannot take as it lies (not aligned as it needs) is copied here, at once:
    left to JAX, the copy is made at the array's first use, with the tensor kept alive until then
    (a model's weights twice over in memory while its first call compiles and runs). With
    `release` (a weight read once), the pages of a file-mapped tensor so copied are handed back
    to the kernel (`pages.release`), so the mapped file and the copy are not both resident: the
    tensor's values do not change, the kernel reads the file again if the tensor is read."""
    tensor = narrowed(tensor, what=what, error=error)
    if tensor.device.type != "cpu":
        on_device = _shared_on_device(tensor)
        if on_device is not None:
            return on_device
        tensor = tensor.cpu()
    if not tensor.is_contiguous():
        tensor = tensor.contiguous()
    if tensor.dtype != torch.bool and tensor.numel() > 0 and tensor.data_ptr() % XLA_CPU_ALIGNMENT == 0:
        try:
            shared = jax.dlpack.from_dlpack(tensor)
        except Exception:  # a dtype DLPack lacks: copy below
            pass
        else:
            if shared.unsafe_buffer_pointer() == tensor.data_ptr():
                # DLPack shares the CPU buffer, so the array lives on the CPU; like jnp.asarray,
                # the result belongs on JAX's default device (a GPU's, where there is one), or a
                # model's weights would pin every call to the CPU.
                default = jax.devices()[0]
                return shared if default.platform == "cpu" else jax.device_put(shared, default)
            del shared  # a deferred copy: made below instead
    values = to_numpy(tensor)
    if values.size and jax.devices()[0].platform == "cpu":
        values = _aligned_copy(values)
    copied = jax.device_put(values)
    if release:
        pages.release(tensor.data_ptr(), tensor.numel() * tensor.element_size())
    return copied


def narrowed(tensor: torch.Tensor, *, what: str = "a tensor", error: type[Exception] | None = None) -> torch.Tensor:
    """`tensor` (detached, its conjugate and negative views resolved) in the dtype JAX holds it
    in under the current x64 mode, checked as `to_jax` says."""
    tensor = tensor.detach()
    if tensor.is_conj():
        tensor = tensor.resolve_conj()
    if tensor.is_neg():
        tensor = tensor.resolve_neg()
    exact = dtypes.numpy_dtype(tensor.dtype)
    narrow = dtypes.narrow_dtype(exact)
    if narrow != exact:
        found = _extremes(tensor)
        problem = dtypes.problem(what, exact, *found) if found is not None else None
        if problem and error is not None:
            raise error(problem)
        if exact.kind == "f" or problem:
            dtypes.warn_narrowing(what, exact)
        tensor = tensor.to(dtypes.torch_dtype(narrow))
    return tensor


def _shared_on_device(tensor: torch.Tensor) -> jax.Array | None:
    """A GPU tensor as a jax.Array on the same device, through DLPack without a copy; None where
    JAX has no such device (a CPU-only jaxlib) or cannot take the buffer: then it goes through
    the host."""
    if tensor.dtype == torch.bool or tensor.numel() == 0:
        return None
    try:
        return jax.dlpack.from_dlpack(tensor.contiguous())
    except Exception:
        return None


def share(tensor: torch.Tensor) -> jax.Array | None:
    """`tensor`'s own memory as a jax.Array on the JAX device that holds it (the CPU, or the same
    GPU), through DLPack: no copy, no move to JAX's default device, no narrowing check. None
    where that cannot be: an empty, non-contiguous, conjugate or negative-view tensor, bool (not
    every jaxlib takes it), a dtype JAX would narrow (int64 with x64 off) or DLPack lacks, a
    buffer JAX would copy because XLA cannot take it as it lies (not aligned as XLA needs: the
    real MiniLM's weights, as transformers loads them, are not), or JAX without that device (a CPU-only jaxlib beside CUDA tensors).

    The array aliases the tensor: in-place writes to the tensor show through it. On a GPU, the
    array is ready once the work queued on PyTorch's current stream before this call is done
    (DLPack's stream handshake); later writes are not ordered with JAX's reads of it."""
    if (tensor.numel() == 0 or tensor.dtype == torch.bool or not tensor.is_contiguous()
            or tensor.is_conj() or tensor.is_neg()):
        return None
    try:
        exact = dtypes.numpy_dtype(tensor.dtype)
    except TypeError:
        return None
    if dtypes.narrow_dtype(exact) != exact:
        return None
    if tensor.device.type == "cpu" and tensor.data_ptr() % XLA_CPU_ALIGNMENT:
        return None  # JAX would copy it (and allocate that copy only to have it dropped here)
    try:
        array = jax.dlpack.from_dlpack(tensor.detach())
    except Exception:  # a dtype DLPack lacks, a device JAX lacks
        return None
    # JAX copies a buffer XLA cannot take as it lies (unaligned) instead of refusing it.
    return array if array.unsafe_buffer_pointer() == tensor.data_ptr() else None


def jax_device(device: torch.device) -> jax.Device | None:
    """The JAX device that holds the memory of torch `device` (DLPack's pairing: the CPU, or the
    GPU of the same local index), or None where this jaxlib has none."""
    try:
        if device.type == "cpu":
            return jax.local_devices(backend="cpu")[0]
        if device.type == "cuda":
            gpus = jax.local_devices(backend="gpu")
            index = torch.cuda.current_device() if device.index is None else device.index
            return next((d for d in gpus if d.local_hardware_id == index), None)
    except RuntimeError:  # no such JAX backend
        return None
    return None


def _aligned_copy(values: np.ndarray) -> np.ndarray:
    """A copy of `values` in a buffer aligned as XLA:CPU takes it as it lies, so that JAX keeps
    this one copy rather than making its own (and a transient the heap would keep)."""
    buffer = np.empty(values.nbytes + XLA_CPU_ALIGNMENT, np.uint8)
    start = -buffer.ctypes.data % XLA_CPU_ALIGNMENT
    copy = buffer[start:start + values.nbytes].view(values.dtype).reshape(values.shape)
    np.copyto(copy, values)
    return copy


def to_numpy(tensor: torch.Tensor) -> np.ndarray:
    """A CPU tensor's values as a NumPy array (bfloat16 and float8 through ml_dtypes)."""
    tensor = tensor.detach().cpu()
    if tensor.dtype in (torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2):
        bits = torch.int16 if tensor.dtype == torch.bfloat16 else torch.uint8
        return tensor.view(bits).numpy().view(dtypes.numpy_dtype(tensor.dtype))
    return tensor.resolve_conj().resolve_neg().numpy()


def _extremes(tensor: torch.Tensor) -> tuple | None:
    """(low, high) of a tensor as `dtypes.problem` takes them; None if empty."""
    if tensor.numel() == 0:
        return None
    if tensor.is_complex():
        tensor = torch.view_as_real(tensor)
    if tensor.is_floating_point():
        finite = tensor[torch.isfinite(tensor)].abs()
        return 0, (finite.max().item() if finite.numel() else 0)
    if tensor.dtype == torch.bool:
        return None
    if tensor.dtype == torch.uint64:  # PyTorch has no min/max for it: as int64, 2**63 and up are negative
        signed = tensor.view(torch.int64)
        above = signed[signed < 0]
        return 0, (above.max().item() + 2**64 if above.numel() else signed.max().item())
    return tensor.min().item(), tensor.max().item()


def to_torch(array: jax.Array | np.ndarray) -> torch.Tensor:
    """A jax.Array (or NumPy array) as a torch tensor, zero-copy through DLPack where possible."""
    if not isinstance(array, np.ndarray):
        try:
            return torch.from_dlpack(array)
        except Exception:  # a dtype DLPack lacks (bool on some versions): copy below
            pass
    host = np.array(array)  # a writable copy
    if host.dtype in (np.dtype(jnp.bfloat16), np.dtype(jnp.float8_e4m3fn), np.dtype(jnp.float8_e5m2)):
        bits = np.int16 if host.dtype == np.dtype(jnp.bfloat16) else np.uint8
        return torch.from_numpy(host.view(bits)).view(dtypes.torch_dtype(host.dtype))
    return torch.from_numpy(host)
