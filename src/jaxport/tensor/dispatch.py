"""Running ATen calls on JaxTensors: `dispatch` is what `JaxTensor.__torch_dispatch__` calls.

Each call runs the op's lowering from the library the graph path uses, with
PyTorch's semantics around it: output dtypes and shapes from PyTorch's meta
kernels, views sharing storage, in-place and `out=` writes through every alias.

A call signature seen more than once (the steady state of a training loop or a
model's forward) runs compiled instead (`compiled.py`): one compiled-function
call in place of the op-by-op JAX calls and dtype bookkeeping of the first runs.
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

from .. import dlpack, dtypes
from ..errors import LoweringError, OpUse, UnsupportedOpsError
from ..frontends import aten_schema, foreach
from . import _table
from .arguments import lowered, lowering_arguments, unwrap
from .compiled import Sighting, compiled_call, seen
from .jax_tensor import JAX_DEVICE, JaxTensor, Storage, _contiguous_strides


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
        # The default dtype decides factories' output dtypes (torch.arange(0.5, 3)).
        key = (func, _meta_key(args), _meta_key(kwargs), torch.get_default_dtype())
    except TypeError:
        key = None
    if key is not None and key in _META_CACHE:
        return _META_CACHE[key]
    meta_args, meta_kwargs = pytree.tree_map(_to_meta, (args, kwargs))
    if meta_kwargs.get("device") is not None:
        meta_kwargs["device"] = "meta"
    try:
        out = _META_KERNELS.get(func, func)(*meta_args, **meta_kwargs)
    except NotImplementedError:
        # Ops whose output shape depends on values (nonzero, unique) have no meta kernel.
        return _VALUE_DEPENDENT
    except RuntimeError as e:
        if "item() cannot be called on meta tensors" in str(e):  # allclose, equal: a Python value
            return _VALUE_DEPENDENT
        raise
    if key is not None:
        if len(_META_CACHE) > 100_000:
            _META_CACHE.clear()
        _META_CACHE[key] = out
    return out


def _grouped_mm_meta(self, mat2, offs=None, bias=None, out_dtype=None):
    """`_grouped_mm`'s output: PyTorch's meta kernel accepts only bfloat16, its CPU kernel more."""
    if self.dim() == 2 and mat2.dim() == 2:
        shape = (offs.shape[0], self.shape[0], mat2.shape[1])  # groups along the contraction
    elif self.dim() == 2:
        shape = (self.shape[0], mat2.shape[-1])
    elif mat2.dim() == 2:
        shape = (self.shape[1], mat2.shape[1])
    else:
        shape = (self.shape[0], self.shape[1], mat2.shape[-1])
    return torch.empty(shape, dtype=out_dtype or self.dtype, device="meta")


#: Meta kernels PyTorch's own cannot stand in for.
_META_KERNELS = {torch.ops.aten._grouped_mm.default: _grouped_mm_meta}

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


def _refuse_unrepresentable(meta) -> None:
    """Name an output dtype JAX has no type for (complex32) before the lowering fails on it
    in its own words, as the graph path does."""
    for leaf in pytree.tree_leaves(meta):
        if isinstance(leaf, (torch.Tensor, torch.dtype)):
            dtypes.jax_dtype(leaf if isinstance(leaf, torch.dtype) else leaf.dtype)


def _wrap(result, meta):
    """Lowering results as JaxTensors with PyTorch's dtypes; non-tensors pass through."""
    if isinstance(meta, torch.Tensor):
        want = dtypes.jax_dtype(meta.dtype)
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
        return JaxTensor.from_array(array.astype(dtypes.jax_dtype(meta)), meta)
    if isinstance(meta, (list, tuple)):
        return type(meta)(_wrap(r, m) for r, m in zip(result, meta))
    if isinstance(result, jax.Array) and result.ndim == 0:
        return result.item()
    return result


def _view(func, args, kwargs):
    """A view op: PyTorch's geometry from the meta kernel, sharing the base's storage."""
    base = args[0]
    meta = _meta_run(func, args, kwargs)
    if any(m.dtype != base.dtype for m in (meta if isinstance(meta, (list, tuple)) else [meta])):
        # A view that reinterprets the elements (view_as_real, view_as_complex, view.dtype) would
        # need the storage itself reinterpreted; it is computed as a new tensor instead, so a
        # write through it does not reach its base.
        return _compute(func, args, kwargs)

    if func in _VIEWS_OR_COPIES and not meta._is_view():
        # reshape and flatten copy where the base's strides allow no view (an unfold's
        # overlapping windows): PyTorch's meta kernel copied too, so this result owns its storage.
        return _compute(func, args, kwargs)

    def share(m):
        return JaxTensor(base._box, tuple(m.shape), tuple(m.stride()), m.storage_offset(), m.dtype)

    if isinstance(meta, (list, tuple)):
        return type(meta)(share(m) for m in meta)
    return share(meta)


def _compute(func, args, kwargs, sighting: Sighting | None = None):
    """Run `func`'s lowering (or PyTorch's decomposition of it); JaxTensor results.

    `sighting` is the dispatcher call this computes, to be counted towards compiling it.
    """
    plan = lowered(func)
    lowering = plan.lowering
    if lowering is None:
        decomposition = torch._decomp.decomposition_table.get(func)
        if decomposition is not None:
            # A Python decomposition creates its temporaries with device=x.device, which is jax:
            # inside eager() (entered afresh: dispatch runs with the modes paused) they are JaxTensors.
            with _table.eager():
                return decomposition(*args, **kwargs)
        composite = func.decompose(*args, **kwargs)
        if composite is not NotImplemented:
            return composite
        raise UnsupportedOpsError([OpUse(str(func), "", "", _user_line())])

    meta = _meta_run(func, args, kwargs)
    if meta is _VALUE_DEPENDENT:
        meta = _probe_dtypes(func, args, kwargs)
        sighting = None
    _refuse_unrepresentable(meta)
    positional, keywords = lowering_arguments(plan, args, kwargs, meta, unwrap)
    if plan.rng_keyword:
        keywords[plan.rng_keyword] = _next_key(kwargs.get("generator"))
    try:
        with jax.default_matmul_precision(dtypes.matmul_precision()):
            result = lowering(*positional, **keywords)
    except (jax.errors.ConcretizationTypeError, jax.errors.TracerBoolConversionError,
            jax.errors.TracerIntegerConversionError, jax.errors.NonConcreteBooleanIndexError) as e:
        raise LoweringError(
            f"{func} needs concrete values, but it is being traced by a JAX transformation "
            f"({_user_line()}): its output shape or a Python decision depends on tensor values. "
            "Run this code eagerly, or express it with static shapes (e.g. torch.where, "
            "nonzero_static) or jax.lax.cond."
        ) from e
    if func in _CPU_STATISTICS:
        meta = _cpu_statistics(meta, result, args[0].dtype)
        sighting = None
    elif func in _CPU_AUXILIARY_SHAPES:
        meta = _cpu_auxiliary_shapes(meta, result)
        sighting = None
    out = _wrap(result, meta)
    if sighting is not None and not plan.rng_keyword:
        seen(sighting, plan, args, kwargs, meta)
    return out


#: Normalizations whose CPU kernel returns its statistics (outputs 1 and 2) otherwise than its
#: meta kernel (and CUDA) does: in the input's dtype, not float32 for half inputs, and, for
#: native_batch_norm outside training, empty. Eager mode follows the CPU kernel.
_CPU_STATISTICS = frozenset({torch.ops.aten.native_batch_norm.default,
                             torch.ops.aten.native_layer_norm.default,
                             torch.ops.aten._native_batch_norm_legit.default,
                             torch.ops.aten._native_batch_norm_legit.no_stats,
                             torch.ops.aten._native_batch_norm_legit_functional.default,
                             torch.ops.aten._batch_norm_with_update_functional.default})

#: Ops whose CPU kernel shapes its auxiliary outputs (1 onwards) otherwise than its meta kernel:
#: embedding_bag's offset2bag, bag_size and max_indices depend on the mode. The lowering
#: follows the CPU kernel.
_CPU_AUXILIARY_SHAPES = frozenset({torch.ops.aten._embedding_bag.default,
                                   torch.ops.aten._embedding_bag_forward_only.default})


def _cpu_statistics(meta, result, dtype):
    statistics = (torch.empty(tuple(jnp.shape(r)), dtype=dtype, device="meta") for r in result[1:3])
    return (meta[0], *statistics, *meta[3:])


def _cpu_auxiliary_shapes(meta, result):
    return (meta[0], *(torch.empty(tuple(jnp.shape(r)), dtype=m.dtype, device="meta")
                       for m, r in zip(meta[1:], result[1:])))


def _next_key(generator: torch.Generator | None = None) -> jax.Array:
    """A fresh jax.random key drawn from torch's CPU generator, so `torch.manual_seed` (or an
    explicit `generator=`) makes random ops on the jax device reproducible."""
    with torch.utils._python_dispatch._disable_current_modes():
        seed = torch.empty((), dtype=torch.int64).random_(generator=generator).item()
    return jax.random.key(seed % (2**32))


@dataclasses.dataclass(frozen=True)
class _Kind:
    """How `dispatch` treats an overload, worked out once per overload."""

    special: Any  # a tensor-level handler, or None
    is_view: bool
    out_names: tuple[str, ...]  # the `out=` arguments of an .out overload
    written: int | None  # the argument an in-place op writes


_KINDS: dict[int, tuple[Any, _Kind]] = {}

#: Ops whose schema does not say they alias, though PyTorch's kernels return a view: C++
#: composites (kron's out=) write through them.
_UNTRACKED_VIEWS = frozenset({torch.ops.aten._unsafe_view.default})


#: Ops whose schema says they alias, though they return a copy where the base's strides allow
#: no view (`_view` asks the meta kernel which it did).
_VIEWS_OR_COPIES = frozenset({
    torch.ops.aten.reshape.default, torch.ops.aten.flatten.using_ints, torch.ops.aten.reshape_as.default,
})


def _kind(func) -> _Kind:
    # By id: OpOverload hashes in Python, which costs a microsecond on every call.
    entry = _KINDS.get(id(func))
    if entry is None or entry[0] is not func:
        special = _SPECIAL.get(func) or (functools.partial(foreach.run, func) if func._opname.startswith(foreach.PREFIX)
                                           else None)
        kind = _Kind(special, func.is_view or func in _UNTRACKED_VIEWS, aten_schema.out_arguments(func),
                     aten_schema.written_argument(func))
        entry = _KINDS[id(func)] = (func, kind)
    return entry[1]


def dispatch(func, args, kwargs):
    """Run one ATen call on JaxTensors with PyTorch's semantics."""
    # Below the dispatcher, reading a tensor's geometry (t.shape, t.stride()) need not pass
    # through torch-function modes such as eager()'s once more: each pass costs microseconds.
    with torch._C.DisableTorchFunction():
        return _dispatch(func, args, kwargs)


def _dispatch(func, args, kwargs):
    kind = _kind(func)
    if kind.special is not None:
        return kind.special(*args, **kwargs)
    if kind.is_view:
        return _view(func, args, kwargs)
    if kind.out_names:
        return _run_out(func, args, kwargs, list(kind.out_names))
    if func._opname in _RESTRIDES:
        return _restride(args[0], _meta_run(func, args, kwargs))
    result, signature = compiled_call(func, args, kwargs)
    if result is not None:
        return result
    written = kind.written
    if written is None:
        return _compute(func, args, kwargs, signature and Sighting(*signature))
    functional = aten_schema.functional_variant(func)
    if functional is not None:
        args = aten_schema.with_defaults(func, args)
    if functional is None:
        functional = aten_schema.functional_variant_by_name(func)
        if functional is not None:  # its arguments in another order: pass them all by name
            args, kwargs = (), {**dict(zip((a.name for a in func._schema.arguments), args)), **kwargs}
            written = func._schema.arguments[written].name
    if functional is None:
        functional = aten_schema.functional_variant(func, suffix="_functional")
    if functional is None:
        twin = aten_schema.functional_twin(func)
        if twin is None:
            raise UnsupportedOpsError([OpUse(str(func), "", "", _user_line())])
        return _run_functional_twin(func, twin, args, kwargs)
    target = kwargs[written] if isinstance(written, str) else args[written]
    # PyTorch's meta kernel raises PyTorch's error for an invalid in-place op, and says
    # when a legacy one resizes its input instead.
    try:
        geometry = _meta_run(func, args, kwargs)
    except RuntimeError:
        if func not in _RESIZE_THEIR_INPUT:
            raise
        geometry = _meta_run(functional, args, kwargs)
    resizes = tuple(geometry.shape) != tuple(target.shape)
    sighting = None
    if signature is not None and not resizes:
        sighting = Sighting(*signature, next(i for i, t in enumerate(signature[2]) if t is target))
    value = _compute(functional, args, kwargs, sighting)
    if resizes:
        _resize(target, geometry.shape)
    target._write(value.jax())
    return target


def _run_functional_twin(func, twin, args, kwargs):
    """Run the twin, write its trailing outputs into the inputs `func` updates, return the rest."""
    updated = aten_schema.updated_arguments(func)
    results = list(_compute(twin, args, kwargs))
    for position, value in zip(updated, results[len(results) - len(updated):]):
        target = args[position] if position < len(args) else None
        if isinstance(target, JaxTensor):
            target._write(value.jax())
    outputs = results[: len(results) - len(updated)]
    return outputs[0] if len(func._schema.returns) == 1 else tuple(outputs)


def _run_out(func, args, kwargs, out_names):
    """`op(..., out=t)`: compute functionally, then resize and fill `t` as PyTorch does."""
    functional = aten_schema.out_variant_source(func)
    if functional is None:
        raise UnsupportedOpsError([OpUse(str(func), "", "", _user_line())])
    outs = [t for n in out_names for t in (kwargs[n] if isinstance(kwargs[n], (list, tuple)) else [kwargs[n]])]
    inputs = {k: v for k, v in kwargs.items() if k not in out_names}
    if (not any(a.name == "dtype" for a in func._schema.arguments)
            and aten_schema.fills_dtype(functional)):
        inputs["dtype"] = outs[0].dtype  # a factory makes what its out tensor holds
    result = _compute(functional, args, inputs)
    results = list(result) if isinstance(result, (list, tuple)) else [result]
    for out, value in zip(outs, results):
        if tuple(out.shape) != tuple(value.shape):
            _resize(out, value.shape)
        out._write(value.jax())
    if not func._schema.returns:  # unbind_copy.int_out fills a list and returns nothing
        return None
    return outs[0] if len(outs) == 1 else tuple(outs)


#: In-place ops whose CPU kernel resizes an input of too small a shape to the result (through
#: their out= kernel) where the meta kernel refuses it.
_RESIZE_THEIR_INPUT = frozenset({torch.ops.aten.addbmm_.default})

#: In-place ops that change a tensor's geometry, not its values (`x.t_()`).
_RESTRIDES = frozenset({"as_strided_", "squeeze_", "swapaxes_", "swapdims_", "t_", "transpose_",
                        "unsqueeze_"})


def _restride(tensor: JaxTensor, geometry: torch.Tensor) -> JaxTensor:
    """Give `tensor` the size, stride and offset of `geometry`, over the same storage."""
    _set_geometry(tensor, tensor._box.array.size, geometry.storage_offset(), tuple(geometry.shape),
                  tuple(geometry.stride()))
    return tensor


def _resize(tensor: JaxTensor, size) -> None:
    """Give `tensor` a fresh contiguous storage of `size` (PyTorch's out= resize)."""
    size = tuple(size)
    _set_geometry(tensor, math.prod(size), 0, size, _contiguous_strides(size))
    tensor._box = Storage(jnp.zeros(size, tensor._box.dtype))


def _set_geometry(tensor: JaxTensor, numel: int, offset: int, size: tuple, stride: tuple) -> None:
    """Set the wrapper's own (meta) geometry, so torch sees the new size and strides."""
    with torch.utils._mode_utils.no_dispatch():
        storage = torch.empty(numel, dtype=tensor.dtype, device="meta").untyped_storage()
        torch.Tensor.set_(tensor, storage, offset, size, stride)


# -- ops with tensor-level meaning --------------------------------------------------------------


def _to_copy(self, *, dtype=None, layout=None, device=None, pin_memory=None, non_blocking=False,
             memory_format=None):
    dtype = dtype or self.dtype
    target = torch.device(device) if device is not None else JAX_DEVICE
    if target.type == "meta":
        # PyTorch's C++ composites convert with the input's device as they see it (`meta` for
        # a JaxTensor): softmax(dtype=...), quantile, ... The copy stays on the jax device.
        target = JAX_DEVICE
    # `.to()` copies: a jax.Array sharing a CPU tensor's memory (DLPack) would see later
    # in-place writes to that tensor.
    value = self.jax() if isinstance(self, JaxTensor) else jnp.array(dlpack.to_jax(self), copy=True)
    if target.type == "jax":
        want = dtypes.jax_dtype(dtype)
        return JaxTensor.from_array(value.astype(want), dtype)
    out = dlpack.to_torch(np.asarray(value))
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
    value = src.jax() if isinstance(src, JaxTensor) else jnp.array(dlpack.to_jax(src), copy=True)
    if isinstance(self, JaxTensor):
        self._write(value)
        return self
    with torch.no_grad():  # a CPU destination: copy the values over
        self.copy_(dlpack.to_torch(np.asarray(value)))
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


def _conjugate(self):
    # PyTorch's lazy conjugate/negate views set a bit that later kernels honour; here the
    # values are computed at once (a write through such a view does not reach its base).
    return JaxTensor.from_array(jnp.conj(self.jax()), self.dtype)


def _negative(self):
    return JaxTensor.from_array(jnp.negative(self.jax()), self.dtype)


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
    torch.ops.aten._conj.default: _conjugate,
    torch.ops.aten._neg_view.default: _negative,
}

_table.dispatch = dispatch
