"""Which ATen ops PyTorch shapes by device: every OpInfo op's samples run on the CPU and on `meta`
(which records what CUDA does), their outputs' shapes and dtypes compared. An op whose outputs
differ must be one whose lowering reads them off the graph (`@aten(..., recorded=True)`), so a
graph recorded on a GPU converts as it was recorded; the table below names each such op and the
overloads that carry it. A new op that differs, or one that stops differing, fails here."""

from __future__ import annotations

import itertools

import torch
import torch.utils._pytree as pytree

import jaxport  # noqa: F401  (fills the op tables)
from jaxport.ops import registry
from tests.conformance.opinfo.harness import op_db, opinfo_id

#: OpInfo op -> the ATen overloads whose outputs differ by device for it, all `recorded=True`.
#: BatchNorm saves no statistics outside training on the CPU and one per channel elsewhere; the
#: normalizations' saved statistics are in a half input's dtype on the CPU, float32 elsewhere.
DEVICE_SHAPED = {
    "native_batch_norm": ("aten.native_batch_norm.default",),
    "_native_batch_norm_legit": ("aten._native_batch_norm_legit.default", "aten._native_batch_norm_legit.no_stats"),
    "_batch_norm_with_update": ("aten._batch_norm_with_update_functional.default",),
    "native_layer_norm": ("aten.native_layer_norm.default",),
}
#: Samples per op and dtype: the differences show on the first few.
SAMPLES = 3


def _signature(output) -> list:
    return [(tuple(t.shape), t.dtype) for t in pytree.tree_leaves(output) if isinstance(t, torch.Tensor)]


def _on_meta(value):
    return value.to("meta") if isinstance(value, torch.Tensor) else value


def _differs(op, dtype) -> bool:
    torch.manual_seed(0)
    for sample in itertools.islice(op.sample_inputs("cpu", dtype, requires_grad=False), SAMPLES):
        try:
            on_cpu = op(sample.input, *sample.args, **sample.kwargs)
            on_meta = op(_on_meta(sample.input), *pytree.tree_map(_on_meta, sample.args),
                         **pytree.tree_map(_on_meta, sample.kwargs))
        except Exception:  # noqa: BLE001 - no meta kernel, or a sample the op refuses: nothing to compare
            continue
        if _signature(on_cpu) != _signature(on_meta):
            return True
    return False


def test_ops_pytorch_shapes_by_device_read_their_outputs_off_the_graph():
    differing = set()
    for op in op_db():
        for dtype in (torch.float32, torch.float16):
            if dtype in op.supported_dtypes("cpu") and _differs(op, dtype):
                differing.add(opinfo_id(op))
    assert differing == set(DEVICE_SHAPED), (
        f"ops whose outputs differ between the CPU and meta: {sorted(differing)}; DEVICE_SHAPED names "
        f"{sorted(DEVICE_SHAPED)}")
    for overloads in DEVICE_SHAPED.values():
        for overload in overloads:
            assert registry.takes_recorded(overload), f"{overload} should be registered with recorded=True"
