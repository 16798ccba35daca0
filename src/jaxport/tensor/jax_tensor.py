"""`JaxTensor`: a torch.Tensor whose data is a jax.Array, with PyTorch's view semantics.

Every ATen call on a JaxTensor reaches `__torch_dispatch__`, which hands it to
`dispatch.py`: the op's lowering from the same library the graph path uses
(`jaxport.ops`), run op by op or, for a hot call signature, compiled.

Views and in-place writes. JAX arrays are immutable, but PyTorch programs write
through views (`x[0] = 1`, `x.t().add_(1)`) and expect every alias to see the
write. So a JaxTensor is what a PyTorch tensor is: a (size, stride, offset) window
on a storage, here a `Storage` box holding a jax.Array, read and written through
`read_window` and `write_window` (pure, so they also run inside compiled calls).
View ops share the box (their geometry comes from running the op on a meta
tensor, so it is exactly PyTorch's); in-place ops compute the functional result
and scatter it into the box, which every alias reads from.

Output dtypes and shapes also come from PyTorch's meta kernels (cached per
signature), so results carry PyTorch's dtypes even where JAX stores them
narrower (int64 as int32 when x64 is off).
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import torch

from .. import dtypes
from . import _table

#: The device torch's dispatcher sees; `JaxTensor.device` reports `jax`.
_WRAPPER_DEVICE = torch.device("meta")
JAX_DEVICE = torch.device("jax", 0)  # valid once jaxport.tensor renames PrivateUse1 to "jax"


class Storage:
    """The values a tensor and all of its views share; in-place ops replace them.

    Kept in the shape of the tensor that created it, so the common case (a
    contiguous tensor that spans its storage) reads and writes without a
    reshape; `flat` is the 1-D form views index into.
    """

    __slots__ = ("array",)

    def __init__(self, array: jax.Array):
        self.array = array

    @property
    def dtype(self):
        return self.array.dtype


def _contiguous_strides(size) -> tuple[int, ...]:
    strides, step = [], 1
    for n in reversed(size):
        strides.append(step)
        step *= max(n, 1)
    return tuple(reversed(strides))


@functools.lru_cache(maxsize=4096)
def _dense_permutation(size: tuple, stride: tuple):
    """(dim order, dense shape) when a view is a permutation of a contiguous layout, else None."""
    order = sorted(range(len(size)), key=lambda d: (-stride[d], d))
    dense = tuple(size[d] for d in order)
    if tuple(stride[d] for d in order if size[d] != 1) != tuple(
        s for s, n in zip(_contiguous_strides(dense), dense) if n != 1
    ):
        return None
    return tuple(order), dense


@functools.lru_cache(maxsize=4096)
def _gather_index(size: tuple, stride: tuple, offset: int) -> np.ndarray:
    """Flat storage positions of a strided view, in row-major order of the view."""
    index = np.full((), offset, np.int64)
    for n, s in zip(size, stride):
        index = index[..., None] + np.arange(n, dtype=np.int64) * s
    return index.reshape(size)


@functools.lru_cache(maxsize=4096)
def _is_contiguous(size: tuple, stride: tuple) -> bool:
    return all(n == 1 or s == want for n, s, want in zip(size, stride, _contiguous_strides(size)))


def read_window(storage: jax.Array, window: tuple[tuple, tuple, int]) -> jax.Array:
    """The values of the tensor at `window` (size, stride, offset) of `storage`.

    Pure, so it also runs inside the compiled calls of `dispatch`.
    """
    size, stride, offset = window
    numel = math.prod(size)
    contiguous = _is_contiguous(size, stride)
    if contiguous and offset == 0 and numel == storage.size:  # the tensor is its storage
        return storage if storage.shape == size else storage.reshape(size)
    flat = storage.reshape(-1)
    if contiguous:
        return jax.lax.slice(flat, (offset,), (offset + numel,)).reshape(size)
    if offset == 0 and numel == storage.size:
        permutation = _dense_permutation(size, stride)
        if permutation is not None:  # a transpose/permute of the whole storage
            order, dense = permutation
            return storage.reshape(dense).transpose(np.argsort(order))
    return flat[_gather_index(size, stride, offset)]


def write_window(storage: jax.Array, window: tuple[tuple, tuple, int], value) -> jax.Array:
    """`storage` with `value` (broadcast and cast to the storage's dtype) written at `window`."""
    size, stride, offset = window
    if not isinstance(value, jax.Array):
        value = jnp.asarray(value)
    if value.dtype != storage.dtype:
        value = value.astype(storage.dtype)
    if value.shape != size:
        value = jnp.broadcast_to(value, size)
    if _is_contiguous(size, stride) and offset == 0 and math.prod(size) == storage.size:
        return value
    index = _gather_index(size, stride, offset).reshape(-1)
    return storage.reshape(-1).at[index].set(value.reshape(-1))


class JaxTensor(torch.Tensor):
    """A torch.Tensor on the `jax` device; `.jax()` is its value as a jax.Array."""

    _box: Storage

    @staticmethod
    def __new__(cls, box: Storage, size, stride, offset: int, dtype: torch.dtype, requires_grad=False):
        t = torch.Tensor._make_wrapper_subclass(
            cls, size, strides=stride, storage_offset=offset, dtype=dtype,
            device=_WRAPPER_DEVICE, requires_grad=requires_grad,
        )
        t._box = box
        return t

    @classmethod
    def _dense(cls, box: Storage, size: tuple, dtype: torch.dtype) -> JaxTensor:
        """A contiguous tensor over all of `box`: PyTorch computes the strides itself, which
        costs less than passing them (this builds the result of every compiled eager call)."""
        t = torch.Tensor._make_wrapper_subclass(cls, size, dtype=dtype, device=_WRAPPER_DEVICE)
        t._box = box
        return t

    @classmethod
    def from_array(cls, array, dtype: torch.dtype | None = None, requires_grad=False) -> JaxTensor:
        """A contiguous JaxTensor holding `array` (no copy); `dtype` is its torch dtype."""
        if not isinstance(array, jax.Array):
            array = jnp.asarray(array)
        if dtype is None:
            dtype = dtypes.torch_dtype(array.dtype)
        size = tuple(array.shape)
        return cls(Storage(array), size, _contiguous_strides(size), 0, dtype, requires_grad)

    # -- values ---------------------------------------------------------------------------------

    def jax(self) -> jax.Array:
        """This tensor's values as a jax.Array (no copy for a tensor that spans its storage).

        A method, as in torchax, so libraries that duck-type `t.jax()` (Hugging Face's
        `is_tracing`) recognise JaxTensors traced by `jax.jit`.
        """
        return read_window(self._box.array, self.window())

    def window(self) -> tuple[tuple, tuple, int]:
        """(size, stride, storage offset): where this tensor sits in its storage."""
        return tuple(self.shape), tuple(self.stride()), self.storage_offset()

    def _write(self, value: jax.Array) -> None:
        """Store `value` (broadcast and cast to this tensor) into this window of the storage."""
        self._box.array = write_window(self._box.array, self.window(), value)

    # -- what PyTorch users call on tensors -----------------------------------------------------

    @property
    def device(self) -> torch.device:  # type: ignore[override]
        return JAX_DEVICE

    def numpy(self, *, force: bool = False) -> np.ndarray:  # type: ignore[override]
        return np.asarray(self.cpu().detach().numpy())

    def tolist(self):  # type: ignore[override]
        return self.cpu().tolist()

    def __repr__(self, *, tensor_contents=None) -> str:  # type: ignore[override]
        text = repr(self.detach().cpu())
        suffix = f", device='{JAX_DEVICE}'"
        if self.grad_fn is not None:
            suffix += f", grad_fn=<{type(self.grad_fn).__name__}>"
        elif self.requires_grad:
            suffix += ", requires_grad=True"
        return text[:-1] + suffix + ")" if text.endswith(")") else text

    def __format__(self, format_spec: str) -> str:
        # torch.Tensor formats a 0-d tensor as its number only when its type is exactly Tensor;
        # models build names from it (`f"expert_{index[0]}"` in NLLB-MoE, Switch Transformers).
        if self.dim() == 0:
            return self.detach().item().__format__(format_spec)
        return object.__format__(self, format_spec)

    # PyTorch's C++ indexing turns Python data (a list index, a scalar value) into tensors on the
    # device it sees, meta, where the values are lost; they are made tensors here instead.

    def __getitem__(self, index):
        return super().__getitem__(index_tensors(index))

    def __setitem__(self, index, value) -> None:
        if not isinstance(value, torch.Tensor):
            value = JaxTensor.from_array(
                jnp.asarray(value, dtypes.jax_dtype(self.dtype)),
                self.dtype,
            )
        super().__setitem__(index_tensors(index), value)

    __torch_function__ = torch._C._disabled_torch_function_impl

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        return _table.dispatch(func, args, kwargs or {})


def index_tensors(index):
    """An index with its lists of numbers as CPU tensors (what PyTorch would make of them)."""
    if isinstance(index, tuple):
        return tuple(index_tensors(i) for i in index)
    if isinstance(index, list) and _numbers_only(index):
        return torch.tensor(index, device="cpu")
    return index


def _numbers_only(data) -> bool:
    if isinstance(data, (list, tuple)):
        return all(_numbers_only(d) for d in data)
    return isinstance(data, (int, float, bool))
