"""`jaxport.eager()`: factory functions and `.to("jax")` create JaxTensors.

Ops on JaxTensors dispatch through the tensor subclass on their own; what needs
a mode is creating them. Inside `eager()` a TorchDispatchMode sees every ATen
call: factory calls with `device="jax"` (`torch.zeros(3, device="jax")`,
`torch.randn`, `torch.tensor(data, device="jax")`) and copies to the jax device
(`t.to("jax")`, `module.to("jax")`) produce JaxTensors; everything else runs as
PyTorch would.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from . import _table
from . import dispatch as _dispatch
from .jax_tensor import JaxTensor, index_tensors


def _on_jax(value) -> bool:
    if isinstance(value, JaxTensor):
        return True
    if isinstance(value, torch.device):
        return value.type == "jax"
    if isinstance(value, str):
        return value == "jax" or value.startswith("jax:")
    return False


def _mentions_jax(values) -> bool:
    """Whether any argument (or list element) is a JaxTensor or names the jax device."""
    for value in values:
        if isinstance(value, (list, tuple)):
            if _mentions_jax(value):
                return True
        elif _on_jax(value):
            return True
    return False


def _creates_on_wrapper_device(kwargs) -> bool:
    """A factory call for the wrapper's dispatcher device (meta): PyTorch's C++ composites
    (the math path of scaled_dot_product_attention, ...) create their temporaries on the
    device of a JaxTensor as C++ sees it. Inside eager() they become JaxTensors too."""
    device = kwargs.get("device")
    return device is not None and torch.device(device).type == "meta"


class _EagerMode(TorchDispatchMode):
    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # Nothing here is traced by TorchDynamo; its per-call guard costs more than our dispatch.
        return False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if _creates_on_wrapper_device(kwargs) or _mentions_jax(args) or _mentions_jax(kwargs.values()):
            return _dispatch.dispatch(func, args, kwargs)
        return func(*args, **kwargs)


#: Constructors that copy Python or NumPy data: PyTorch builds them on the CPU first (its C++
#: path would need a device guard the jax device does not have), then they move.
_DATA_CONSTRUCTORS = frozenset({torch.tensor, torch.as_tensor, torch.asarray, torch.Tensor.new_tensor})


#: Indexing, called unbound (`torch.Tensor.__getitem__(x, [0, 2])`) as well as by `x[...]`.
_INDEXING = frozenset({torch.Tensor.__getitem__, torch.Tensor.__setitem__})

#: Functions that take a tensor of indices that PyTorch requires on the CPU.
_CPU_INDEX_FUNCTIONS = frozenset({torch.tensor_split, torch.Tensor.tensor_split})


def _without_copy(rest: tuple, kwargs: dict) -> tuple[tuple, bool]:
    """`Tensor.to`'s arguments after self without `copy`, and its value: copy follows
    non_blocking, the third argument of to(dtype|other, ...) and the fourth of to(device, ...)."""
    position = 2 if rest and isinstance(rest[0], (torch.dtype, torch.Tensor)) else 3
    if len(rest) > position:
        return rest[:position] + rest[position + 1:], bool(rest[position])
    return rest, bool(kwargs.get("copy", False))


class _FunctionLevelMode(TorchFunctionMode):
    """What must be caught before PyTorch's C++ sees it: data copied into new tensors
    (`torch.tensor(data, device="jax")`), Python index lists, CPU-only index tensors, and
    `.to()` onto the jax device."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in _DATA_CONSTRUCTORS and (_on_jax(kwargs.get("device"))
                                           or _creates_on_wrapper_device(kwargs)):
            kwargs = dict(kwargs)
            kwargs["device"] = "cpu"
            requires_grad = kwargs.pop("requires_grad", False)
            out = _dispatch.to_jax_device(func(*args, **kwargs))
            return out.requires_grad_() if requires_grad else out
        if func in _INDEXING and isinstance(args[0], JaxTensor):
            args = (args[0], index_tensors(args[1]), *args[2:])
        if func in _CPU_INDEX_FUNCTIONS and len(args) > 1 and isinstance(args[1], JaxTensor):
            # PyTorch reads split points from a CPU tensor only (on CUDA too).
            args = (args[0], args[1].cpu(), *args[2:])
        if func is torch.Tensor.to:
            rest, copy = _without_copy(args[1:], kwargs)
            placement = {k: v for k, v in kwargs.items() if k != "copy"}
            device, dtype, _non_blocking, _memory_format = torch._C._nn._parse_to(*rest, **placement)
            if _on_jax(device) or (device is None and isinstance(args[0], JaxTensor)):
                source = args[0]
                if isinstance(source, JaxTensor) and dtype in (None, source.dtype):
                    return source.clone() if copy else source
                return _dispatch.to_jax_device(source, dtype or source.dtype)
        return func(*args, **kwargs)


class _Modes:
    """Both modes, entered and left together."""

    def __init__(self):
        self.stack = contextlib.ExitStack()

    def __enter__(self):
        self.stack.enter_context(_EagerMode())
        self.stack.enter_context(_FunctionLevelMode())
        return self

    def __exit__(self, *exc):
        return self.stack.__exit__(*exc)


_global_mode: _Modes | None = None


@contextlib.contextmanager
def eager() -> Iterator[None]:
    """Within this block, `device="jax"` creates tensors whose data are jax.Arrays.

    PyTorch's dispatcher sees a JaxTensor on the `meta` device, so tensors created for
    `meta` inside the block (PyTorch's own temporaries, mostly) become JaxTensors too;
    create genuine meta tensors outside it.
    """
    with _Modes():
        yield


def enable() -> None:
    """Turn `eager()` on for the rest of the program (scripts and notebooks); `disable()` undoes it."""
    global _global_mode
    if _global_mode is None:
        _global_mode = _Modes()
        _global_mode.__enter__()


def disable() -> None:
    global _global_mode
    if _global_mode is not None:
        _global_mode.__exit__(None, None, None)
        _global_mode = None

_table.eager = eager
