"""Expected OpInfo failures of the nn family (activations, convolution, pooling, normalization,
sampling, losses, attention), every path's: {"opinfo_id", "opinfo_id:torch.dtype" or
"opinfo_id:dtype:path": Expected}."""

from tests.conformance.expectations import Expected

from . import REFERENCE, SPECIAL, on_paths
from .reasons import VECTORIZED_ZERO_SIGN, ZERO_TIES

FUSED_COORDINATES = Expected(
    "PyTorch's vectorized grid sampler unnormalizes each grid coordinate with a fused "
    "multiply-add ((x + 1) * size / 2 - 0.5 rounded once) and XLA rounds the multiply and the "
    "subtraction apart, or fuses other steps as it compiles, so a source coordinate can differ by "
    "an ulp; on the reference inputs' 345x456 images with steps of up to 255 between neighbouring "
    "pixels that moves 0.1% of outputs by up to 4e-3 op by op and 7.5% under jax.jit (sample_inputs' "
    "smoother images pass)",
    fails="mismatch",
)

EXPECTED_FAILURES: dict[str, Expected] = {
    "nn.functional.ctc_loss:*:eager": Expected(
        "no lowering yet for aten._ctc_loss, which PyTorch's eager ctc_loss "
        "calls for the (log_probs, targets) layouts of two of the samples",
        fails="missing", detail=r"missing aten\._ctc_loss\.",
    ),
    "nn.functional.linear_cross_entropy.chunked": Expected(
        "torch_nn._linear_cross_entropy_batch_chunked is a custom op with no decomposition; no lowering yet",
        fails="missing", detail=r"missing torch_nn\._linear_cross_entropy_batch_chunked\.",
    ),
    "nn.functional.linear_cross_entropy.chunked_none": Expected(
        "torch_nn._linear_cross_entropy_batch_chunked_no_reduction is a custom op with no "
        "decomposition; no lowering yet",
        fails="missing", detail=r"missing torch_nn\._linear_cross_entropy_batch_chunked_no_reduction\.",
    ),
    **on_paths(SPECIAL, {
        ZERO_TIES: ("nn.functional.hardtanh", "nn.functional.relu6"),
        VECTORIZED_ZERO_SIGN: ("nn.functional.softshrink",),
    }),
    **on_paths(REFERENCE, {FUSED_COORDINATES: ("nn.functional.grid_sample:torch.float32",)}),
}
