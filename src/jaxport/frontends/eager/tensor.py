"""`JaxTensor`: a torch.Tensor whose data is a jax.Array, with PyTorch's view semantics.

Every ATen call on a JaxTensor reaches `__torch_dispatch__`, which runs the op's
lowering from the same library the graph path uses (`jaxport.ops`).

Views and in-place writes. JAX arrays are immutable, but PyTorch programs write
through views (`x[0] = 1`, `x.t().add_(1)`) and expect every alias to see the
write. So a JaxTensor is what a PyTorch tensor is: a (size, stride, offset) window
on a flat storage, here a `Storage` box holding a 1-D jax.Array. View ops share
the box (their geometry comes from running the op on a meta tensor, so it is
exactly PyTorch's); in-place ops compute the functional result and scatter it
into the box, which every alias reads from.

Output dtypes and shapes also come from PyTorch's meta kernels (cached per
signature), so results carry PyTorch's dtypes even where JAX stores them
narrower (int64 as int32 when x64 is off).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import traceback
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import torch
import torch.utils._pytree as pytree

from ... import _torch_utils as tu
from ...errors import LoweringError, OpUse, UnsupportedOpsError
from ...ops import registry

#: The device torch's dispatcher sees; `JaxTensor.device` reports `jax`.
_WRAPPER_DEVICE = torch.device("meta")
JAX_DEVICE = torch.device("jax", 0)  # valid once eager/__init__ renames PrivateUse1 to "jax"


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
    def flat(self) -> jax.Array:
        return self.array.reshape(-1) if self.array.ndim != 1 else self.array

    @property
    def numel(self) -> int:
        return self.array.size

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
    def from_array(cls, array, dtype: torch.dtype | None = None, requires_grad=False) -> JaxTensor:
        """A contiguous JaxTensor holding `array` (no copy); `dtype` is its torch dtype."""
        if not isinstance(array, jax.Array):
            array = jnp.asarray(array)
        if dtype is None:
            dtype = tu.torch_dtype(array.dtype)
        size = tuple(array.shape)
        return cls(Storage(array), size, _contiguous_strides(size), 0, dtype, requires_grad)

    # -- values ---------------------------------------------------------------------------------

    def _spans_storage(self) -> bool:
        """Whether this tensor is its storage, contiguous from offset 0 (no indexing needed)."""
        return (
            self.storage_offset() == 0
            and self.numel() == self._box.numel
            and self.is_contiguous()
        )

    def jax(self) -> jax.Array:
        """This tensor's values as a jax.Array (no copy for a tensor that spans its storage).

        A method, as in torchax, so libraries that duck-type `t.jax()` (Hugging Face's
        `is_tracing`) recognise JaxTensors traced by `jax.jit`.
        """
        array, size = self._box.array, tuple(self.shape)
        if self._spans_storage():
            return array if array.shape == size else array.reshape(size)
        stride, offset = tuple(self.stride()), self.storage_offset()
        if self.is_contiguous():
            return jax.lax.slice(self._box.flat, (offset,), (offset + self.numel(),)).reshape(size)
        if offset == 0 and self.numel() == self._box.numel:
            permutation = _dense_permutation(size, stride)
            if permutation is not None:  # a transpose/permute of the whole storage
                order, dense = permutation
                return self._box.array.reshape(dense).transpose(np.argsort(order))
        return self._box.flat[_gather_index(size, stride, offset)]

    def _write(self, value: jax.Array) -> None:
        """Store `value` (broadcast and cast to this tensor) into this window of the storage."""
        size = tuple(self.shape)
        value = jnp.asarray(value)
        if value.dtype != self._box.dtype:
            value = value.astype(self._box.dtype)
        if value.shape != size:
            value = jnp.broadcast_to(value, size)
        if self._spans_storage():
            self._box.array = value
            return
        index = _gather_index(size, tuple(self.stride()), self.storage_offset()).reshape(-1)
        self._box.array = self._box.flat.at[index].set(value.reshape(-1))

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

    def __setitem__(self, index, value) -> None:
        # PyTorch would wrap a Python scalar on the wrapper's (meta) device, losing its value.
        if not isinstance(value, torch.Tensor):
            value = JaxTensor.from_array(
                jnp.asarray(value, np.dtype(jax.dtypes.canonicalize_dtype(tu.numpy_dtype(self.dtype)))),
                self.dtype,
            )
        super().__setitem__(index, value)

    __torch_function__ = torch._C._disabled_torch_function_impl

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        return dispatch(func, args, kwargs or {})


# -- dispatch -------------------------------------------------------------------------------------


def _user_line() -> str:
    """The innermost stack frame outside torch and jaxport, as 'file:line in fn'."""
    for frame in reversed(traceback.extract_stack()):
        name = frame.filename.replace("\\", "/")
        if "/torch/" in name or "/jaxport/" in name or "/jax/" in name:
            continue
        return f"{frame.filename}:{frame.lineno} in {frame.name}: {(frame.line or '').strip()}"
    return ""


def _to_meta(value):
    if isinstance(value, JaxTensor):
        return torch.empty_strided(
            tuple(value.shape), tuple(value.stride()), dtype=value.dtype, device="meta"
        ).as_strided(tuple(value.shape), tuple(value.stride()), value.storage_offset())
    if isinstance(value, torch.Tensor):
        return value.to("meta")
    return value


def _meta_key(value):
    if isinstance(value, torch.Tensor):
        return ("T", tuple(value.shape), tuple(value.stride()), value.storage_offset(), value.dtype)
    if isinstance(value, (list, tuple)):
        return tuple(_meta_key(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _meta_key(v)) for k, v in value.items()))
    if isinstance(value, (int, float, bool, str, type(None), torch.dtype, torch.device,
                          torch.layout, torch.memory_format)):
        return (type(value), value)
    raise TypeError  # uncacheable


_META_CACHE: dict[Any, Any] = {}


def _meta_run(func, args, kwargs):
    """The op run on meta tensors: PyTorch's output shapes, strides and dtypes."""
    try:
        key = (func, _meta_key(args), _meta_key(kwargs))
    except TypeError:
        key = None
    if key is not None and key in _META_CACHE:
        return _META_CACHE[key]
    meta_args, meta_kwargs = pytree.tree_map(_to_meta, (args, kwargs))
    if meta_kwargs.get("device") is not None:
        meta_kwargs["device"] = "meta"
    try:
        out = func(*meta_args, **meta_kwargs)
    except NotImplementedError:
        # Ops whose output shape depends on values (nonzero, unique) have no meta kernel.
        return _VALUE_DEPENDENT
    if key is not None:
        if len(_META_CACHE) > 100_000:
            _META_CACHE.clear()
        _META_CACHE[key] = out
    return out


#: `_meta_run`'s answer for an op PyTorch cannot run without values.
_VALUE_DEPENDENT = object()


def _probe_dtypes(func, args, kwargs):
    """Output dtypes of a value-dependent op, from running it on small CPU zeros."""
    def zeros(v):
        if isinstance(v, JaxTensor):
            return torch.zeros(tuple(v.shape), dtype=v.dtype)
        return v.cpu() if isinstance(v, torch.Tensor) else v

    with torch.utils._python_dispatch._disable_current_modes():
        out = func(*pytree.tree_map(zeros, args), **pytree.tree_map(zeros, kwargs))
    return pytree.tree_map_only(torch.Tensor, lambda t: t.dtype, out)


def _unwrap(value):
    """A dispatcher argument as lowerings take it."""
    if isinstance(value, JaxTensor):
        return value.jax()
    if isinstance(value, torch.Tensor):  # a CPU tensor mixed in: copied, as results may alias it
        return jnp.array(tu.to_jax(value), copy=True)
    if isinstance(value, torch.dtype):
        return np.dtype(jax.dtypes.canonicalize_dtype(tu.numpy_dtype(value)))
    if isinstance(value, (torch.device, torch.layout, torch.memory_format)):
        return None
    if isinstance(value, (list, tuple)):
        return type(value)(_unwrap(v) for v in value)
    return value


def _wrap(result, meta):
    """Lowering results as JaxTensors with PyTorch's dtypes; non-tensors pass through."""
    if isinstance(meta, torch.Tensor):
        want = np.dtype(jax.dtypes.canonicalize_dtype(tu.numpy_dtype(meta.dtype)))
        array = result if isinstance(result, jax.Array) else jnp.asarray(result)
        if array.dtype != want:
            array = array.astype(want)
        if tuple(array.shape) != tuple(meta.shape):
            raise LoweringError(
                f"lowering returned shape {tuple(array.shape)} where PyTorch gives {tuple(meta.shape)}"
            )
        return JaxTensor.from_array(array, meta.dtype)
    if isinstance(meta, torch.dtype):  # a value-dependent shape: the lowering's is the answer
        array = jnp.asarray(result)
        return JaxTensor.from_array(array.astype(jax.dtypes.canonicalize_dtype(tu.numpy_dtype(meta))), meta)
    if isinstance(meta, (list, tuple)):
        return type(meta)(_wrap(r, m) for r, m in zip(result, meta))
    if isinstance(result, jax.Array) and result.ndim == 0:
        return result.item()
    return result


def _view(func, args, kwargs):
    """A view op: PyTorch's geometry from the meta kernel, sharing the base's storage."""
    base = args[0]
    meta = _meta_run(func, args, kwargs)

    def share(m):
        return JaxTensor(base._box, tuple(m.shape), tuple(m.stride()), m.storage_offset(), m.dtype)

    if isinstance(meta, (list, tuple)):
        return type(meta)(share(m) for m in meta)
    return share(meta)


@dataclasses.dataclass(frozen=True)
class _Lowered:
    """What `_compute` needs to know about an op, worked out once per overload."""

    lowering: Any
    fills_dtype: bool  # a kwarg-only `dtype=` PyTorch defaults from the output
    rng_keyword: str | None


@functools.cache
def _lowered(func) -> _Lowered:
    name = str(func)
    return _Lowered(
        registry.lookup(name),
        any(a.name == "dtype" and a.kwarg_only for a in func._schema.arguments),
        registry.random_keyword(name),
    )


def _compute(func, args, kwargs):
    """Run `func`'s lowering (or PyTorch's decomposition of it); JaxTensor results."""
    plan = _lowered(func)
    lowering = plan.lowering
    if lowering is None:
        decomposition = torch._decomp.decomposition_table.get(func)
        if decomposition is not None:
            return decomposition(*args, **kwargs)
        composite = func.decompose(*args, **kwargs)
        if composite is not NotImplemented:
            return composite
        raise UnsupportedOpsError([OpUse(str(func), "", "", _user_line())])
    meta = _meta_run(func, args, kwargs)
    if meta is _VALUE_DEPENDENT:
        meta = _probe_dtypes(func, args, kwargs)
    lowered_kwargs = {k: _unwrap(v) for k, v in kwargs.items() if k not in tu.PLACEMENT_KWARGS}
    if plan.fills_dtype and lowered_kwargs.get("dtype") is None and isinstance(meta, torch.Tensor):
        lowered_kwargs["dtype"] = np.dtype(jax.dtypes.canonicalize_dtype(tu.numpy_dtype(meta.dtype)))
    if plan.rng_keyword:
        lowered_kwargs[plan.rng_keyword] = _next_key(kwargs.get("generator"))
    lowered_kwargs.pop("generator", None)
    try:
        result = lowering(*_unwrap(tuple(args)), **lowered_kwargs)
    except (jax.errors.ConcretizationTypeError, jax.errors.TracerBoolConversionError,
            jax.errors.TracerIntegerConversionError, jax.errors.NonConcreteBooleanIndexError) as e:
        raise LoweringError(
            f"{func} needs concrete values, but it is being traced by a JAX transformation "
            f"({_user_line()}): its output shape or a Python decision depends on tensor values. "
            "Run this code eagerly, or express it with static shapes (e.g. torch.where, "
            "nonzero_static) or jax.lax.cond."
        ) from e
    return _wrap(result, meta)


def _next_key(generator: torch.Generator | None = None) -> jax.Array:
    """A fresh jax.random key drawn from torch's CPU generator, so `torch.manual_seed` (or an
    explicit `generator=`) makes random ops on the jax device reproducible."""
    with torch.utils._python_dispatch._disable_current_modes():
        seed = torch.empty((), dtype=torch.int64).random_(generator=generator).item()
    return jax.random.key(seed % (2**32))


def _out_arguments(func) -> list[str]:
    return [a.name for a in func._schema.arguments if a.kwarg_only and a.alias_info is not None
            and a.alias_info.is_write]


@functools.cache
def _functional_sibling(func):
    """For `aten.add.out`, the overload with the same inputs and no `out`: `aten.add.Tensor`."""
    outs = set(_out_arguments(func))
    inputs = [(a.name, str(a.type)) for a in func._schema.arguments if a.name not in outs]
    packet = getattr(torch.ops.aten, func._opname)
    for name in packet.overloads():
        candidate = getattr(packet, name)
        if candidate is func or _out_arguments(candidate):
            continue
        if [(a.name, str(a.type)) for a in candidate._schema.arguments] == inputs:
            return candidate
    return None


@dataclasses.dataclass(frozen=True)
class _Kind:
    """How `dispatch` treats an overload, worked out once per overload."""

    special: Any  # a tensor-level handler, or None
    is_view: bool
    out_names: tuple[str, ...]  # the `out=` arguments of an .out overload
    written: int | None  # the argument an in-place op writes


@functools.cache
def _kind(func) -> _Kind:
    return _Kind(_SPECIAL.get(func), func.is_view, tuple(_out_arguments(func)), tu.written_argument(func))


def dispatch(func, args, kwargs):
    """Run one ATen call on JaxTensors with PyTorch's semantics."""
    kind = _kind(func)
    if kind.special is not None:
        return kind.special(*args, **kwargs)
    if kind.is_view:
        return _view(func, args, kwargs)
    if kind.out_names:
        return _run_out(func, args, kwargs, list(kind.out_names))
    written = kind.written
    if written is not None:
        functional = tu.functional_variant(func)
        if functional is None:
            raise UnsupportedOpsError([OpUse(str(func), "", "", _user_line())])
        target = args[written]
        # PyTorch's meta kernel raises PyTorch's error for an invalid in-place op, and says
        # when a legacy one (addbmm_) resizes its input instead.
        geometry = _meta_run(func, args, kwargs)
        value = _compute(functional, args, kwargs)
        if tuple(geometry.shape) != tuple(target.shape):
            _resize(target, geometry.shape)
        target._write(value.jax())
        return target
    return _compute(func, args, kwargs)


def _run_out(func, args, kwargs, out_names):
    """`op(..., out=t)`: compute functionally, then resize and fill `t` as PyTorch does."""
    functional = _functional_sibling(func)
    if functional is None:
        raise UnsupportedOpsError([OpUse(str(func), "", "", _user_line())])
    outs = [kwargs[n] for n in out_names]
    inputs = {k: v for k, v in kwargs.items() if k not in out_names}
    result = _compute(functional, args, inputs)
    results = list(result) if isinstance(result, (list, tuple)) else [result]
    for out, value in zip(outs, results):
        if tuple(out.shape) != tuple(value.shape):
            _resize(out, value.shape)
        out._write(value.jax())
    return outs[0] if len(outs) == 1 else tuple(outs)


def _resize(tensor: JaxTensor, size) -> None:
    """Give `tensor` a fresh contiguous storage of `size` (PyTorch's out= resize)."""
    size = tuple(size)
    strides = _contiguous_strides(size)
    with torch.utils._mode_utils.no_dispatch():
        # The wrapper's own (meta) geometry, so torch sees the new size and strides.
        storage = torch.empty(math.prod(size), dtype=tensor.dtype, device="meta").untyped_storage()
        torch.Tensor.set_(tensor, storage, 0, size, strides)
    tensor._box = Storage(jnp.zeros(size, tensor._box.dtype))


# -- ops with tensor-level meaning --------------------------------------------------------------


def _to_copy(self, *, dtype=None, layout=None, device=None, pin_memory=None, non_blocking=False,
             memory_format=None):
    dtype = dtype or self.dtype
    target = torch.device(device) if device is not None else JAX_DEVICE
    # `.to()` copies: a jax.Array sharing a CPU tensor's memory (DLPack) would see later
    # in-place writes to that tensor.
    value = self.jax() if isinstance(self, JaxTensor) else jnp.array(tu.to_jax(self), copy=True)
    if target.type == "jax":
        want = np.dtype(jax.dtypes.canonicalize_dtype(tu.numpy_dtype(dtype)))
        return JaxTensor.from_array(value.astype(want), dtype)
    out = tu.to_torch(np.asarray(value))
    return out.to(device=target, dtype=dtype)


def to_jax_device(tensor: torch.Tensor, dtype: torch.dtype | None = None) -> JaxTensor:
    """`tensor` as a JaxTensor (of `dtype`), sharing memory with a CPU tensor where DLPack allows.

    Autograd sees the move: gradients flow back to a CPU tensor that requires them.
    """
    return _ToJax.apply(tensor, dtype or tensor.dtype)


class _ToJax(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, dtype):
        ctx.source_dtype = tensor.dtype
        return _to_copy(tensor.detach(), dtype=dtype, device=JAX_DEVICE)

    @staticmethod
    def backward(ctx, grad):
        return _to_copy(grad, dtype=ctx.source_dtype, device=torch.device("cpu")), None


def _copy_(self, src, non_blocking=False):
    value = src.jax() if isinstance(src, JaxTensor) else jnp.array(tu.to_jax(src), copy=True)
    if isinstance(self, JaxTensor):
        self._write(value)
        return self
    with torch.no_grad():  # a CPU destination: copy the values over
        self.copy_(tu.to_torch(np.asarray(value)))
    return self


def _alias(self):
    return JaxTensor(self._box, tuple(self.shape), tuple(self.stride()), self.storage_offset(), self.dtype)


def _local_scalar_dense(self):
    value = self.jax()
    if isinstance(value, jax.core.Tracer):
        raise LoweringError(
            "a tensor's value was needed as a Python number (`if x.sum() > 0:`, `.item()`, "
            f"`int(x)`) while jax.jit or another JAX transformation traces the code ({_user_line()}). "
            "Traced values are known only when the compiled function runs. Express the "
            "choice with torch.where (or jax.lax.cond in JAX code), or run this code eagerly."
        )
    return value.item()


def _clone(self, *, memory_format=None):
    return JaxTensor.from_array(self.jax(), self.dtype)


_SPECIAL = {
    torch.ops.aten._to_copy.default: _to_copy,
    torch.ops.aten.copy_.default: _copy_,
    torch.ops.aten.detach.default: _alias,
    torch.ops.aten.alias.default: _alias,
    torch.ops.aten.lift_fresh.default: _alias,
    torch.ops.aten._local_scalar_dense.default: _local_scalar_dense,
    torch.ops.aten.clone.default: _clone,
}
