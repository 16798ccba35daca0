"""The eager frontend's two late bindings, so that its modules import one way.

`JaxTensor.__torch_dispatch__` (jax_tensor.py) hands every ATen call to `dispatch.dispatch`, and
`dispatch` runs PyTorch's Python decompositions inside `mode.eager()`; but `dispatch` works on
JaxTensors and `mode` calls `dispatch`. Each of those two functions is set here by the module
that defines it, when it is imported, and called through here by the module below it.
`jaxport.tensor` imports every module, so both are set before a JaxTensor can exist.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def _unset(*args: Any, **kwargs: Any) -> Any:
    raise RuntimeError("jaxport.tensor is partly imported: import jaxport.tensor itself")


#: `dispatch.dispatch(func, args, kwargs)`: one ATen call on JaxTensors.
dispatch: Callable[[Any, tuple, dict], Any] = _unset
#: `mode.eager()`: the context within which `device="jax"` creates JaxTensors.
eager: Callable[[], Any] = _unset
