"""The conversions: a model through its frontend into a `Translation`, and that into a `JaxModel`.

`from_torch` (an `nn.Module`, through `torch.export`), `from_exported_program` (an
`ExportedProgram`, such as `torch.export.load` gives) and `from_onnx` (an ONNX file) differ only
in their frontend; the `JaxModel` is made from the frontend's `Translation` the same way for all.
"""

from __future__ import annotations

import functools
import threading
from typing import Any

import jax
import numpy as np
import torch

from . import dlpack, dtypes
from .backends.model import JaxModel
from .devices import module_device, moved
from .frontends import hugging_face, torch_export, transformers_adapter
from .frontends import onnx as onnx_frontend
from .frontends.torch_export import quiet_torch_logs
from .frontends.torch_export.structure import child_specs
from .precision import Precision, precision_policy


def from_torch(
    module: torch.nn.Module,
    args: tuple = (),
    kwargs: dict[str, Any] | None = None,
    *,
    dynamic_shapes: Any = None,
    strict: bool = False,
    decompose: str = "auto",
    train: bool | None = None,
    dtype: Any = None,
) -> JaxModel:
    """Convert `module`, called as `module(*args, **kwargs)`, into a pure JAX function.

    Args:
      module: the model, on any device. On the `meta` device (no weights in memory), the model
        is converted from its shapes alone and `JaxModel.load_weights` gives it its weights.
      train: True converts training behaviour (BatchNorm batch statistics and running-stat
        updates, active dropout that takes `rng=`), False inference behaviour; the module's
        own mode is restored afterwards. None (the default) converts the mode it is in.
      args: example positional inputs, as for `torch.export.export` (one input that is not a
        tuple is taken as `(input,)`).
      kwargs: example keyword inputs, as for `torch.export.export`.
      dynamic_shapes: as for `torch.export.export`, to allow other sizes of some dims.
      strict: use torch.export's strict (TorchDynamo) mode; non-strict by default.
      decompose: "auto" lowers the exported graph directly and decomposes only ops
        jaxport lacks; "core" decomposes to core ATen first.
      dtype: a precision policy: `jnp.bfloat16` or `jnp.float16` runs the model as
        `torch.autocast` at that dtype runs it (products in it, float32 where autocast keeps
        it), or a `jaxport.Precision` (which can also store the weights in another dtype).
    """
    if not isinstance(args, tuple):
        args = (args,)
    policy = precision_policy(dtype)
    if policy is not None:
        module = policy.prepare(module)
        with policy.autocast(module_device(module, (args, kwargs))):
            model = from_torch(module, args, kwargs, dynamic_shapes=dynamic_shapes, strict=strict,
                               decompose=decompose, train=train)
        if isinstance(model, CacheFedModel):  # its cached steps: the same module, under autocast too
            model._convert_options["dtype"] = Precision(compute=policy.compute)
        return model
    if module_device(module).type == "meta":
        # Converted before its weights exist (JaxModel.load_weights gives them): the example
        # inputs only lend their shapes and dtypes, on the module's device.
        args, kwargs = moved(args, module_device(module)), moved(kwargs, module_device(module))
    training = getattr(module, "training", False) if train is None else bool(train)
    modes = {m: m.training for m in module.modules()} if isinstance(module, torch.nn.Module) else {}
    try:
        if modes:
            module.train(training)
        ep = torch_export.export(module, args, kwargs, dynamic_shapes=dynamic_shapes, strict=strict)
    finally:
        for m, was_training in modes.items():
            m.training = was_training
    model = from_exported_program(ep, decompose=decompose, name=type(module).__name__, training=training)
    if module_device(module).type == "meta":
        _compute_buffers(model, module)
    field, cache = _returned_cache(ep)
    if cache is not None and field not in (kwargs or {}):
        model = CacheFedModel(model, module, field, cache, decompose=decompose, strict=strict, train=training)
    return model


def _compute_buffers(model: JaxModel, module: torch.nn.Module) -> None:
    """Give a model converted on the meta device the values of the buffers its module computes
    rather than stores (rotary `inv_freq`, position ids: in no checkpoint), where a Hugging Face
    model inside it says how (`transformers_adapter.computed_buffers`). Those it cannot make stay
    without values, and `load_weights` names them if its source lacks them too."""
    missing = [name for name in model.computed_buffers if isinstance(model.params.get(name), jax.ShapeDtypeStruct)]
    if not missing or not any(hugging_face.is_model(m) for m in module.modules()):
        return
    for name, value in transformers_adapter.computed_buffers(module, missing).items():
        array = dlpack.to_jax(value, what=f"buffer '{name}'")
        wanted = model.params[name]
        if tuple(array.shape) == tuple(wanted.shape) and np.dtype(array.dtype) == np.dtype(wanted.dtype):
            model.params[name] = array


def _returned_cache(ep: torch.export.ExportedProgram) -> tuple[str | None, Any]:
    """(the output field, its pytree spec) of the Hugging Face cache `ep` returns, if any: the field
    is `cache` from transformers 5.24 on, `past_key_values` before, and the model takes the cache
    back as the argument of the same name."""
    spec = ep.call_spec.out_spec
    field = transformers_adapter.cache_field(spec.context if isinstance(spec.context, list) else [])
    if field is not None:
        child = child_specs(spec)[spec.context.index(field)]
        if hugging_face.is_described(child):
            return field, child
    return None, None


class CacheFedModel(JaxModel):
    """A Hugging Face model converted without a cache, which returns one (`use_cache=True`) and takes
    it back: a call with `past_key_values=` (`cache=` from transformers 5.24 on; the nested arrays
    an earlier call returned, or a transformers cache) runs a second program converted for cached
    steps on first use, with the cache length dynamic, and the same `params`. A call with a
    different number of new tokens converts once more. It keeps a reference to the torch module
    for that conversion."""

    def __init__(self, base: JaxModel, module: torch.nn.Module, cache_field: str, cache_spec, **convert_options):
        self.__dict__.update(base.__dict__)
        self._module = module
        self._cache_field = cache_field
        self._cache_spec = cache_spec
        self._convert_options = convert_options
        self._steps: list[JaxModel] = []
        self._converting = threading.Lock()  # threads asking for one new step convert it once

    def _step_for(self, args: tuple, kwargs: dict) -> JaxModel | None:
        """The program converted for a cached step with these inputs' sizes; None without a cache."""
        if kwargs.get(self._cache_field) is None:
            return None
        with self._converting:
            for step in self._steps:
                leaves = step._flatten_inputs(args, kwargs)
                if all(_admits(x, s) for x, s in zip(leaves, step.program.user_inputs)):
                    return step
            step = self._convert_step(args, kwargs)
            self._steps.append(step)
            return step

    def _convert_step(self, args: tuple, kwargs: dict) -> JaxModel:
        from transformers.exporters.exporter_dynamo import (
            get_auto_dynamic_shapes,  # optional (`jaxport[hf]`)
        )

        device = module_device(self._module)  # trace where the module lives (cuda, meta, cpu)
        example = {k: _torch_like(v, device) for k, v in kwargs.items() if k != self._cache_field}
        cache = kwargs[self._cache_field]
        if not isinstance(cache, self._cache_spec.type):
            leaves = hugging_face.leaves_from_arrays(
                self._cache_spec.context, cache, self._cache_spec.num_children, f"input '{self._cache_field}'"
            )
            cache = self._cache_spec.unflatten([_torch_like(x, device) for x in leaves])
        example[self._cache_field] = cache
        example_args = tuple(_torch_like(a, device) for a in args)
        # Every size dynamic, as transformers' exporter does: torch.export keeps what it must fix,
        # and logs a warning for each such size (a single new token stays 1), which is expected.
        dims = get_auto_dynamic_shapes(example)
        with quiet_torch_logs():
            return from_torch(
                self._module, example_args, example, dynamic_shapes=dims, **self._convert_options
            )

    def apply_with_updates(self, params, *args, rng=None, **kwargs):
        step = self._step_for(args, kwargs)
        if step is None:
            return super().apply_with_updates(params, *args, rng=rng, **kwargs)
        return step.apply_with_updates(params, *args, rng=rng, **kwargs)

    def __call__(self, *args, rng=None, **kwargs):
        step = self._step_for(args, kwargs)
        if step is None:
            return super().__call__(*args, rng=rng, **kwargs)
        # The step runs on this model's params: those it was converted with may have no values
        # (a meta module), or be older than what load_weights or a user has put here since.
        self._require_weights()
        params = {**step.params, **self.params}
        return step._call(functools.partial(step._jitted, params), args, kwargs, rng)


def _admits(x, spec) -> bool:
    """Whether an input of `x`'s shape fits `spec` (dtypes are checked when the program runs)."""
    return spec.spec is None or not hasattr(x, "shape") or spec.spec.admits(tuple(x.shape))


def _torch_like(x, device: torch.device):
    """A torch tensor on `device` with `x`'s shape and dtype for tracing (values are not read: `x`
    may be a tracer)."""
    if isinstance(x, torch.Tensor):
        return x.to(device)
    if isinstance(x, (jax.Array, np.ndarray)):
        return torch.ones(tuple(x.shape), dtype=dtypes.torch_dtype(x.dtype), device=device)
    return x


def from_exported_program(
    ep: torch.export.ExportedProgram, *, decompose: str = "auto", name: str = "model", training: bool = False
) -> JaxModel:
    """Convert an `ExportedProgram` (e.g. from `torch.export.load`); `training` says whether it
    was exported in training mode (then dropout needs `rng=`)."""
    return JaxModel(torch_export.translate(ep, decompose=decompose, name=name, training=training))


def from_onnx(model: Any, *, name: str | None = None) -> JaxModel:
    """Load an ONNX model (a path, bytes or `onnx.ModelProto`) as a `JaxModel`.

    The file is read as untrusted input (checked before anything else reads it). `params` holds
    the graph's floating-point initializers under their graph names, except one-value literals
    (scale factors, epsilons), which are constants XLA can fold; `apply(params, *inputs)` takes
    the graph inputs in order (or by name) and returns the output, or a tuple of the outputs in
    graph order; `output_names` names them.
    """
    _proto, translation = onnx_frontend.translate(model, name=name)
    return JaxModel(translation)
