"""ATen ops that only a GPU runs, and why each one jaxport does not lower is not lowered.

Graphs recorded on a GPU (a `.pt2` exported on CUDA, the graphs AOTAutograd records under
`torch.compile` there) hold ops with no CPU kernel at all. The sweep here finds them in the
dispatcher of the torch installed: ATen overloads with a Meta kernel (so a graph can record
them) and no CPU or composite kernel. Each is lowered (by its own lowering, or an `out=`
overload by its functional form's, which the eager frontend computes and writes into `out`;
exported graphs never hold `out=` overloads) or named in `NOT_LOWERED` with the reason. The
test (`test_gpu_kernels.py`) fails on an op in neither, and on a `NOT_LOWERED` entry that has
since been lowered.

    python -m tests.ops.aten.gpu_only docs/gpu-only-ops.md

writes the table of them all from the registry and `NOT_LOWERED`.
"""

from __future__ import annotations

import inspect
import pathlib
import sys
from collections.abc import Callable

import torch

from jaxport.frontends import aten_schema
from jaxport.ops import registry

_SPARSE = "sparse tensors, which jaxport does not model: it lowers dense arrays only"
_INT4 = ("int4 weights in the GPU's packed tile layout (tinygemm's `innerKTiles` interleaving, "
         "which the CPU's `_convert_weight_to_int4pack_for_cpu` does not share): unpacking it "
         "means copying the CUDA layout bit for bit with no kernel here to check it against")
_SEMI_STRUCTURED = ("2:4 semi-structured sparse matrices in cuSPARSELt's/CUTLASS's compressed "
                    "format (values and metadata in the library's own layout): a dense lowering "
                    "would have to decode a format only those libraries define")
_PHILOX = ("`torch.func._random`'s experimental stateless PRNG (CUDA only): its keys are uint64 "
           "(seed, offset) pairs of Philox-4x32-10 and what they draw is defined by that stream; "
           "jaxport's random ops reproduce distributions, not streams, so a key would silently "
           "mean other numbers (and uint64 keys need JAX's x64 mode)")
_SCALED_RECIPES = ("float8 (and MX) matrix products with lists of scales, each scaled by a recipe "
                   "(per tensor, per row, blockwise) read from the swizzled layouts the CUDA "
                   "kernels take, and `use_fast_accum`'s reduced-precision accumulation: jaxport "
                   "lowers unscaled products, not float8 ones")
_QUANTIZED_FLASH = ("float8 flash attention with per-tensor descale factors (`q_descale`, "
                    "`k_descale`, `v_descale`), FlashAttention-3's quantized path: jaxport "
                    "lowers the unquantized flash ops, not float8 attention")

#: "aten.<op>.<overload>" -> why jaxport does not lower it. An op not lowered is not registered
#: (the missing-op error is the answer); this says why.
NOT_LOWERED: dict[str, str] = {
    "aten._coalesced_.default": "sets a sparse COO tensor's `coalesced` flag in place; " + _SPARSE,
    "aten._convert_weight_to_int4pack.default": _INT4,
    "aten._cslt_sparse_mm.default": _SEMI_STRUCTURED,
    "aten._cudnn_rnn.default": (
        "cuDNN's whole-sequence RNN: its weights in cuDNN's flat packed buffer (`weight_buf`, "
        "`weight_stride0`, gate order and padding as cuDNN lays them out), a reserve-space output "
        "only cuDNN's backward reads, and dropout between layers from cuDNN's own generator state "
        "(`dropout_state`). Exported on the meta device or the CPU, `nn.LSTM` and `nn.GRU` record "
        "their gate products and activations instead (PyTorch's decomposition of `aten.lstm`/"
        "`aten.gru`), which jaxport lowers"),
    "aten._cudnn_rnn_flatten_weight.default": (
        "packs an RNN's weights into cuDNN's flat buffer (gate order and padding as cuDNN lays "
        "them out), which only `_cudnn_rnn` reads; registered by CUDA builds of torch alone"),
    "aten._fill_mem_eff_dropout_mask_.default": (
        "writes, in place, the dropout mask the memory-efficient attention kernel draws from a CUDA "
        "Philox seed and offset (PyTorch calls it from its tests, to reproduce that kernel's mask): "
        "jaxport's attention kernels draw their masks from JAX keys, and an in-place op with a "
        "leading underscore has no functional form the frontends could rewrite it to"),
    "aten._flash_attention_forward.quantized": _QUANTIZED_FLASH,
    "aten._flash_attention_forward_no_dropout_inplace.default": (
        "`torch.nn.attention.varlen.varlen_attn_out`'s kernel: flash attention over packed "
        "variable-length batches (`cu_seq_q`, `cu_seq_k`), written in place into a preallocated "
        "`out`. Dynamo keeps it out of its graphs (`disallow_in_graph`), it has no functional form "
        "the frontends could rewrite it to, and jaxport's flash lowerings refuse packed batches"),
    "aten._mkldnn_transpose_.default": (
        "an in-place transpose of an MKL-DNN (opaque layout) tensor: such tensors never reach an "
        "exported graph, and an in-place op with a leading underscore has no functional form the "
        "frontends could rewrite it to"),
    "aten._philox_key_fold_in.default": _PHILOX,
    "aten._philox_key_split.default": _PHILOX,
    "aten._philox_normal_.default": _PHILOX,
    "aten._philox_uniform_.default": _PHILOX,
    "aten._resize_output_.default": (
        "resizes an `out=` tensor's storage in place (the plumbing of `out=` wrappers): exported "
        "graphs are functional and never hold it, and a JAX array has no storage to resize"),
    "aten._scaled_addmm.out": _SCALED_RECIPES,
    "aten._scaled_dot_product_flash_attention.quantized": _QUANTIZED_FLASH,
    "aten._scaled_grouped_mm.default": (
        "float8 grouped matrix products with per-row or blockwise (MX) scales in the swizzled "
        "layouts the CUDA kernels read, and `use_fast_accum`'s reduced-precision accumulation: "
        "jaxport lowers the unscaled `_grouped_mm`, not float8 products"),
    "aten._scaled_grouped_mm_v2.out": _SCALED_RECIPES,
    "aten._scaled_mm_v2.default": _SCALED_RECIPES,
    "aten._sparse_coo_tensor_with_dims.default": "creates a sparse COO tensor; " + _SPARSE,
    "aten._sparse_coo_tensor_with_dims_and_tensors.default": "creates a sparse COO tensor; " + _SPARSE,
    "aten._sparse_semi_structured_addmm.default": _SEMI_STRUCTURED,
    "aten._sparse_semi_structured_linear.default": _SEMI_STRUCTURED,
    "aten._sparse_semi_structured_mm.default": _SEMI_STRUCTURED,
    "aten._weight_int4pack_mm.default": _INT4,
    "aten._weight_int4pack_mm_with_scales_and_zeros.default": _INT4,
    "aten.copy_sparse_to_sparse_.default": "copies one sparse tensor into another in place; " + _SPARSE,
    "aten.miopen_rnn.default": (
        "MIOpen's whole-sequence RNN (ROCm): weights in MIOpen's packed layout and dropout from "
        "its own generator state, as for `_cudnn_rnn`; exported on the meta device or the CPU, "
        "`nn.LSTM` and `nn.GRU` record their gate products and activations instead"),
    "aten.resize_as_sparse_.default": "resizes a sparse tensor in place; " + _SPARSE,
    "aten.sparse_resize_.default": "resizes a sparse tensor in place; " + _SPARSE,
    "aten.sparse_resize_and_clear_.default": "resizes and empties a sparse tensor in place; " + _SPARSE,
}

#: `NOT_LOWERED` entries that are GPU-only in other releases than the one requirements/dev.txt pins,
#: where they have a CPU kernel: `_scaled_mm_v2` in torch 2.10 and 2.11 (2.13 runs it on the CPU).
GPU_ONLY_IN_OTHER_RELEASES: tuple[str, ...] = ("aten._scaled_mm_v2.default",)

#: GPU-only ops the sweep cannot see, which jaxport lowers: torch before 2.15 gives them no Meta
#: kernel (2.15 does, and the sweep finds them), so a graph records them only where the tracer falls back to running the real CUDA
#: kernel on its fake tensors (FakeTensorMode's `allow_fallback_kernels`, on by default, in
#: `torch.export` and `torch.compile` on a GPU, for static shapes; on `meta` it cannot run).
WITHOUT_META_KERNEL: tuple[str, ...] = (
    "aten._thnn_fused_gru_cell.default",
    "aten._thnn_fused_gru_cell_backward.default",
)

_KEYS_WITH_KERNELS = ("CPU", "CompositeImplicitAutograd", "CompositeExplicitAutograd",
                      "CompositeExplicitAutogradNonFunctional")


def gpu_only_ops() -> list[str]:
    """Every ATen overload of the torch installed with a Meta kernel and no CPU or composite
    kernel, as the registry names it ("aten.mm.dtype"), sorted."""
    found = []
    for name in torch._C._dispatch_get_all_op_names():
        if not name.startswith("aten::"):
            continue
        if not torch._C._dispatch_has_kernel_for_dispatch_key(name, "Meta"):
            continue
        if any(torch._C._dispatch_has_kernel_for_dispatch_key(name, key) for key in _KEYS_WITH_KERNELS):
            continue
        op, _, overload = name[len("aten::"):].partition(".")
        found.append(f"aten.{op}.{overload or 'default'}")
    return sorted(found)


def runs_on_the_cpu(name: str) -> bool:
    """Whether the torch installed has `name` ("aten.mm.dtype") with a CPU or composite kernel.
    False for an op it lacks: `NOT_LOWERED` spans releases (and CUDA builds register some ops the
    CPU wheel lacks)."""
    _, op, over = name.split(".")
    qualified = f"aten::{op}" + ("" if over == "default" else f".{over}")
    if not torch._C._dispatch_has_kernel(qualified):
        return False
    return any(torch._C._dispatch_has_kernel_for_dispatch_key(qualified, key) for key in _KEYS_WITH_KERNELS)


def overload(name: str):
    """The torch OpOverload the registry name "aten.mm.dtype" stands for (None: this torch lacks it)."""
    _, op, over = name.split(".")
    if not hasattr(torch.ops.aten, op) or over not in getattr(torch.ops.aten, op).overloads():
        return None
    return getattr(getattr(torch.ops.aten, op), over)


def lowering(name: str) -> tuple[str, Callable] | None:
    """(the op whose lowering runs `name`, that lowering), or None: its own, or for an `out=`
    overload its functional form's (`aten.mm.dtype` for `aten.mm.dtype_out`)."""
    fn = registry.lookup(name)
    if fn is not None:
        return name, fn
    op = overload(name)
    if op is not None and aten_schema.out_arguments(op):
        source = aten_schema.out_variant_source(op)
        if source is not None and registry.lookup(str(source)) is not None:
            return str(source), registry.lookup(str(source))
    return None


def _where(fn: Callable) -> str:
    return f"`{fn.__name__}` in `{pathlib.Path(inspect.getsourcefile(fn)).name}`"


def table() -> str:
    """The Markdown page: every GPU-only op, lowered by what, or not and why."""
    ops = gpu_only_ops()
    rows, lowered = [], 0
    for name in ops:
        found = lowering(name)
        if found is not None:
            lowered += 1
            through, fn = found
            how = _where(fn) + ("" if through == name else f", through `{through}` (an `out=` overload: "
                                                          "computed functionally, written into its `out=` tensors)")
            rows.append(f"| `{name}` | lowered | {how} |")
        else:
            rows.append(f"| `{name}` | not lowered | {NOT_LOWERED.get(name, '**no reason given**')} |")
    extra = [f"| `{name}` | lowered | {_where(registry.lookup(name))} |" for name in WITHOUT_META_KERNEL
             if name not in ops]
    return "\n".join([
        "# GPU-only ATen ops",
        "",
        "Generated by `python -m tests.ops.aten.gpu_only docs/gpu-only-ops.md` from jaxport's op",
        "registry and the reasons in `tests/ops/aten/gpu_only.py`; do not edit by hand.",
        "",
        f"ATen overloads of torch {torch.__version__} with a Meta kernel (so a graph can record them)",
        "and no CPU or composite kernel: graphs recorded on a GPU (a `.pt2` exported on CUDA, the",
        "graphs AOTAutograd records under `torch.compile` there) can hold them, and nothing on the",
        f"CPU runs them. {lowered} of {len(ops)} are lowered; an op that is not has no lowering, so a",
        "model using it fails to convert with `UnsupportedOpsError` naming it.",
        "",
        "| op | | lowering, or why not |",
        "|---|---|---|",
        *rows,
        "",
        "## GPU-only ops without a Meta kernel",
        "",
        "These have no Meta kernel in this torch, so the sweep above cannot see them; a graph records",
        "them only where the tracer runs the real CUDA kernel on its fake tensors (on a GPU, with",
        "static shapes, `torch.export` and `torch.compile` fall back to it for ATen ops without one).",
        "",
        "| op | | lowering |",
        "|---|---|---|",
        *extra,
        "",
    ])


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m tests.ops.aten.gpu_only OUTPUT.md", file=sys.stderr)
        return 2
    pathlib.Path(argv[0]).write_text(table())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
