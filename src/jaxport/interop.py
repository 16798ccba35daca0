"""PyTorch and JAX calling each other: tensors across, functions both ways.

- `to_jax` / `to_torch`: tensors through DLPack (`jaxport.dlpack`), without copies where the
  layout allows.
- `jax_fn(torch_callable)`: PyTorch code as a JAX function, without torch.export. It runs the
  torch code on `JaxTensor`s whose data are the JAX values it is called with, so under
  `jax.jit`, `jax.grad` or `jax.vmap` the torch ops trace into the JAX computation like any
  jax.numpy call. It suits code `torch.export` cannot capture (Python control flow on shapes,
  unusual containers); for models `from_torch` gives a program that is also checked against the
  exported graph.
- `torch_fn(jax_callable)`: a JAX function as a torch function, differentiated by torch's
  autograd through `jax.vjp`.
- `callback(torch_callable, result_shape)`: real PyTorch on the host from inside JAX code.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import torch
import torch.utils._pytree as torch_pytree

from . import dtypes
from .devices import module_device
from .dlpack import to_jax, to_numpy, to_torch

# `jaxport.tensor` is imported on first use, inside the functions: importing it names torch's
# PrivateUse1 device "jax", which `to_jax`/`to_torch` users should not get as a side effect.


def _to_tensor(value):
    from .tensor import JaxTensor

    if isinstance(value, (jax.Array, np.ndarray)) or hasattr(value, "aval"):
        array = jnp.asarray(value)
        return JaxTensor.from_array(array, dtypes.torch_dtype(array.dtype))
    return value


def _to_array(value):
    from .tensor import JaxTensor

    if isinstance(value, JaxTensor):
        return value.jax()
    if isinstance(value, torch.Tensor):
        return to_jax(value)
    return value


def _run_torch(fn: Callable, args: tuple, kwargs: dict) -> Any:
    from .tensor import eager

    args, kwargs = jax.tree_util.tree_map(_to_tensor, (args, kwargs))
    # JAX differentiates the traced computation; torch's autograd would only duplicate it.
    with eager(), torch.no_grad():
        out = fn(*args, **kwargs)
    return torch_pytree.tree_map(_to_array, out)


def jax_fn(torch_callable: Callable | torch.nn.Module) -> Callable | tuple[dict[str, jax.Array], Callable]:
    """A JAX function (on jax.Arrays and pytrees of them) that runs `torch_callable` on JAX.

    For a function, returns a function. For an `nn.Module`, returns `(params, apply)` as
    `from_torch` does: `params` is `{name: jax.Array}` of parameters and buffers (tied
    weights once) and `apply(params, *args, **kwargs)` is pure. Both work under `jax.jit`, `jax.grad`, `jax.vmap` and `jax.jvp`.
    """
    if isinstance(torch_callable, torch.nn.Module):
        return _module_fn(torch_callable)

    @functools.wraps(torch_callable)
    def run(*args, **kwargs):
        return _run_torch(torch_callable, args, kwargs)

    return run


def _module_fn(module: torch.nn.Module):
    # Tied weights appear once, under their first name; functional_call re-ties the others.
    state = {**dict(module.named_parameters()), **dict(module.named_buffers())}
    params = {name: to_jax(t, what=f"'{name}'") for name, t in state.items()}

    def call(state, *args, **kwargs):
        return torch.func.functional_call(module, state, args, kwargs, tie_weights=True, strict=False)

    def apply(params: dict[str, Any], *args, **kwargs):
        """Run the module with `params` (a `{state_dict name: array}`) on `args`."""
        return _run_torch(call, (params, *args), kwargs)

    return params, apply


# -- JAX from PyTorch ---------------------------------------------------------------------------


class _JaxFunction(torch.autograd.Function):
    """Forward through JAX; backward through `jax.vjp`, so torch's autograd sees one node."""

    @staticmethod
    def forward(ctx, fn, n_out_box, *tensors):
        arrays = [to_jax(t) for t in tensors]
        out, vjp = jax.vjp(fn, *arrays)
        ctx.vjp = vjp
        ctx.out_structure = jax.tree_util.tree_structure(out)
        ctx.input_dtypes = [t.dtype for t in tensors]
        leaves = jax.tree_util.tree_leaves(out)
        n_out_box.append(ctx.out_structure)
        return tuple(to_torch(np.asarray(leaf)) for leaf in leaves)

    @staticmethod
    def backward(ctx, *grads):
        cotangent = jax.tree_util.tree_unflatten(ctx.out_structure, [to_jax(g) for g in grads])
        input_grads = ctx.vjp(cotangent)
        return (None, None) + tuple(
            to_torch(np.asarray(g)).to(dtype) for g, dtype in zip(input_grads, ctx.input_dtypes)
        )


def torch_fn(jax_callable: Callable) -> Callable:
    """A function on torch tensors that runs `jax_callable` (on jax.Arrays) in JAX.

    PyTorch autograd differentiates through it with `jax.vjp`, so it can sit inside an
    `nn.Module` trained by a torch optimizer. Positional tensor arguments; the outputs
    may be a pytree of arrays, returned with the same structure as torch tensors.
    """

    @functools.wraps(jax_callable)
    def run(*tensors: torch.Tensor):
        structure: list = []
        leaves = _JaxFunction.apply(jax_callable, structure, *tensors)
        return jax.tree_util.tree_unflatten(structure[0], list(leaves))

    return run


def callback(torch_callable: Callable, result_shape: Any) -> Callable:
    """Run real PyTorch on the host from JAX code, even under `jax.jit` (`jax.pure_callback`).

    `result_shape` is a pytree of `jax.ShapeDtypeStruct` describing the outputs. Gradients
    flow through a `jax.custom_vjp` whose backward pass runs torch autograd, also as a
    callback. Use it for the parts of a program jaxport cannot translate. An `nn.Module` gets
    its inputs on the device it lives on (a CUDA module on its GPU); other callables on the CPU.
    """
    device = module_device(torch_callable)

    def torch_inputs(arrays, grad: bool = False):
        return [torch.from_numpy(np.array(a)).to(device).requires_grad_(grad and np.issubdtype(a.dtype, np.floating))
                for a in arrays]

    def host_forward(*arrays):
        with torch.no_grad():
            out = torch_callable(*torch_inputs(arrays))
        return jax.tree_util.tree_map(lambda t: np.asarray(to_numpy(t)), _tree(out))

    @jax.custom_vjp
    def run(*arrays):
        return jax.pure_callback(host_forward, result_shape, *arrays)

    def forward(*arrays):
        return run(*arrays), arrays

    def backward(arrays, cotangent):
        input_shapes = tuple(jax.ShapeDtypeStruct(a.shape, a.dtype) for a in arrays)

        def host_backward(arrays, cotangent):
            tensors = torch_inputs(arrays, grad=True)
            with torch.enable_grad():
                out = _tree(torch_callable(*tensors))
            outs = jax.tree_util.tree_leaves(out)
            cots = [torch.from_numpy(np.array(c)).to(device) for c in jax.tree_util.tree_leaves(cotangent)]
            wrt = [t for t in tensors if t.requires_grad]
            grads = iter(torch.autograd.grad(outs, wrt, cots, allow_unused=True))
            result = []
            for t, a in zip(tensors, arrays):
                g = next(grads) if t.requires_grad else None
                result.append(np.zeros(a.shape, a.dtype) if g is None else to_numpy(g).astype(a.dtype))
            return tuple(result)

        return jax.pure_callback(host_backward, input_shapes, arrays, cotangent)

    run.defvjp(forward, backward)
    return run


def _tree(out):
    """Torch outputs (tensor, tuple, list, dict) as a JAX pytree of tensors."""
    if isinstance(out, torch.Tensor):
        return out
    if isinstance(out, (tuple, list)):
        return type(out)(_tree(o) for o in out)
    if isinstance(out, dict):
        return {k: _tree(v) for k, v in out.items()}
    return out


__all__ = ["callback", "jax_fn", "to_jax", "to_torch", "torch_fn"]
