"""`from_torch`: the graph path from an `nn.Module` to a `JaxModel`."""

from __future__ import annotations

from typing import Any

import torch

from . import _torch_utils as tu
from .frontends import torch_export
from .model import JaxModel


def from_torch(
    module: torch.nn.Module,
    args: tuple = (),
    kwargs: dict[str, Any] | None = None,
    *,
    dynamic_shapes: Any = None,
    strict: bool = False,
    decompose: str = "auto",
    train: bool | None = None,
) -> JaxModel:
    """Convert `module`, called as `module(*args, **kwargs)`, into a pure JAX function.

    Args:
      module: the model.
      train: True converts training behaviour (BatchNorm batch statistics and running-stat
        updates, active dropout that takes `rng=`), False inference behaviour; the module's
        own mode is restored afterwards. None (the default) converts the mode it is in.
      args, kwargs: example inputs, as for `torch.export.export`.
      dynamic_shapes: as for `torch.export.export`, to allow other sizes of some dims.
      strict: use torch.export's strict (TorchDynamo) mode; non-strict by default.
      decompose: "auto" lowers the exported graph directly and decomposes only ops
        jaxport lacks; "core" decomposes to core ATen first.
    """
    if not isinstance(args, tuple):
        args = (args,)
    training = getattr(module, "training", False) if train is None else bool(train)
    modes = {m: m.training for m in module.modules()} if isinstance(module, torch.nn.Module) else {}
    try:
        if modes:
            module.train(training)
        ep = torch_export.export(module, args, kwargs, dynamic_shapes=dynamic_shapes, strict=strict)
    finally:
        for m, was_training in modes.items():
            m.training = was_training
    return from_exported_program(ep, decompose=decompose, name=type(module).__name__, training=training)


def from_exported_program(
    ep: torch.export.ExportedProgram, *, decompose: str = "auto", name: str = "model", training: bool = False
) -> JaxModel:
    """Convert an `ExportedProgram` (e.g. from `torch.export.load`); `training` says whether it
    was exported in training mode (then dropout needs `rng=`)."""
    ep = torch_export.lowerable(ep, decompose=decompose)
    program, state = torch_export.to_program(ep)
    program.check_supported()
    params = {key: tu.to_jax(t, what=f"parameter '{key}'") for key, t in state.tensors.items()}
    return JaxModel(
        program,
        params,
        parameter_names=state.parameters,
        buffer_names=state.buffers,
        tied=state.tied,
        flatten_inputs=torch_export.input_flattener(ep.call_spec.in_spec, program.user_inputs),
        build_outputs=torch_export.output_builder(ep.call_spec.out_spec),
        name=name,
        fixed_shape_hint="pass dynamic_shapes= to from_torch to allow other sizes",
        training=training,
    )
