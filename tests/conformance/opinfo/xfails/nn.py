"""Expected OpInfo failures of the nn family (activations, convolution, pooling, normalization,
sampling, losses, attention), every path's: {"opinfo_id", "opinfo_id:torch.dtype" or
"opinfo_id:dtype:path": Expected}."""

from tests.conformance.expectations import Expected

from . import SPECIAL, on_paths, samples
from .reasons import VECTORIZED_ZERO_SIGN

_FUSED_COORDINATES = (
    "PyTorch's vectorized grid sampler unnormalizes each grid coordinate with a fused "
    "multiply-add ((x + 1) * size / 2 - 0.5 rounded once) and XLA rounds the multiply and the "
    "subtraction apart, or fuses other steps as it compiles, so a source coordinate can differ by "
    "an ulp; on the reference inputs' 345x456 images with steps of up to 255 between neighbouring "
    "pixels that moves 0.1% of outputs by up to 4e-3 op by op and up to 7.5% under jax.jit in the "
    "interpolating samples (nearest, and sample_inputs' smoother images, pass)"
)

_UNPOOL_FORWARD_MODE = (
    "PyTorch's two derivatives of max_unpool disagree where a sample repeats an index (overlapping "
    "pooling windows that chose the same element): reverse mode gathers the gradient at every "
    "index, forward mode writes the tangents as the values, one of them winning; jaxport's "
    "tangent adds them, the transpose of reverse mode, which matches PyTorch's (and what training "
    "uses). The samples with repeated indices"
)

EXPECTED_FAILURES: dict[str, Expected] = {
    "nn.functional.max_unpool1d:*:jvp": Expected(
        _UNPOOL_FORWARD_MODE, fails="mismatch", detail=r"^jvp: tangent 0: Tensor-likes are not close", where=samples(1, 2),
        blame="pytorch",
    ),
    "nn.functional.max_unpool2d:*:jvp": Expected(
        _UNPOOL_FORWARD_MODE, fails="mismatch", detail=r"^jvp: tangent 0: Tensor-likes are not close", where=samples(1, 2),
        blame="pytorch",
    ),
    "nn.functional.max_unpool3d:*:jvp": Expected(
        _UNPOOL_FORWARD_MODE, fails="mismatch", detail=r"^jvp: tangent 0: Tensor-likes are not close",
        where=samples(0, 1, 2), blame="pytorch",
    ),
    "nn.functional.ctc_loss:*:eager": Expected(
        "no lowering yet for aten._ctc_loss, which PyTorch's eager ctc_loss calls for every sample "
        "(.default or .Tensor, by the type of the lengths)",
        fails="missing", detail=r"^missing aten\._ctc_loss\.(default|Tensor)$",
    ),
    **on_paths(SPECIAL, {VECTORIZED_ZERO_SIGN: ("nn.functional.softshrink",)}),
    # bilinear (0-5) and bicubic (12-17) by padding mode and align_corners: op by op those with
    # align_corners=False, jitted also bicubic's with align_corners=True and bilinear's zeros
    "nn.functional.grid_sample:torch.float32:reference": Expected(
        _FUSED_COORDINATES, fails="mismatch", detail=r"Tensor-likes are not close",
        where=samples(0, 1, 2, 4, 12, 13, 14, 15, 16, 17),
    ),
    "nn.functional.grid_sample:torch.float32:eager_reference": Expected(
        _FUSED_COORDINATES, fails="mismatch", detail=r"Tensor-likes are not close",
        where=samples(0, 2, 4, 12, 14, 16),
    ),
}
