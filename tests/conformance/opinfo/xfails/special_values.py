"""Expected failures of the special-values pass (tests/ops/aten/test_special_values.py, path "special"):
{"opinfo_id:*:special" or "opinfo_id:torch.dtype:special": reason}, by cause. The pass compares
NaN places, infinities and the signs of zeros exactly; these ops differ from PyTorch there. Every
cause is PyTorch's or XLA's own: PyTorch's vectorized and scalar loops disagreeing with each
other, behaviour C++ leaves undefined, or XLA:CPU's flushing of subnormals, so there is no single
answer to match or no one lowering that could give it.
"""

from . import by_cause

ZERO_TIES = (
    "the sign of a zero where +0.0 and -0.0 tie: PyTorch's CPU kernels return either operand "
    "depending on whether the vectorized or the scalar loop ran (torch.maximum(0.0, -0.0) is +0.0 "
    "for one element and -0.0 for 40), so there is no one sign to match; jaxport gives IEEE 754's "
    "maximum/minimum (-0.0 < 0.0), as XLA does"
)
SUBNORMALS_READ_EXACTLY = (
    "XLA:CPU flushes subnormal operands to zero in arithmetic but this op reads them as they are "
    "(pow, atan2 and frexp on the value, nextafter on its bits), so a subnormal operand gives the "
    "unflushed answer where the reference, run on flushed inputs, gives a zero's"
)
INTEGER_CAST = (
    "casting NaN, an infinity or an out-of-range float to an integer type is undefined in C++: "
    "PyTorch returns what the CPU's conversion instruction gives and XLA saturates, so there is "
    "no defined answer to match"
)
VECTORIZED_FMOD = (
    "PyTorch's vectorized fmod (Sleef) gives NaN wherever |x / y| overflows, while its scalar loop "
    "(std::fmod) gives the exact remainder: torch.fmod of 40 sixes by the smallest normal float is "
    "NaN, of one six 0.0; jaxport gives the exact remainder for every element"
)
SUBNORMAL_INTERMEDIATE = (
    "the op exports as reciprocal then multiply, and XLA:CPU flushes the subnormal reciprocal of "
    "the largest float to zero, so max / max gives 0 and inf / max NaN where PyTorch keeps "
    "2.9e-39 and gives 1 and inf; no one lowering sees both steps"
)
VECTORIZED_ZERO_SIGN = (
    "PyTorch's vectorized and scalar loops give zeros of different signs (softshrink(-0.0) is "
    "-0.0 for one element and +0.0 for 40), so there is no one sign to match; NaN passes through "
    "as in PyTorch"
)
FLOAT32_GELU_AT_INFINITY = (
    "PyTorch's vectorized float32 GELU gives NaN at +inf while its float64 kernel gives inf; "
    "jaxport gives inf for both"
)

_CAUSES = {
    ZERO_TIES: ("amin", "aminmax", "clamp", "clamp_max", "clamp_min", "cummax", "cummin", "fmax", "fmin",
                "kthvalue", "masked.amin", "max.binary", "maximum", "min.binary", "min.reduction_with_dim",
                "minimum", "nn.functional.hardtanh", "nn.functional.relu6", "topk"),
    SUBNORMALS_READ_EXACTLY: ("__rpow__", "atan2", "float_power:torch.float64", "frexp", "nextafter", "pow"),
    INTEGER_CAST: ("byte", "char", "int", "long", "short"),
    VECTORIZED_FMOD: ("__rmod__", "fmod", "remainder"),
    SUBNORMAL_INTERMEDIATE: ("__rdiv__",),
    VECTORIZED_ZERO_SIGN: ("nn.functional.softshrink",),
    FLOAT32_GELU_AT_INFINITY: ("nn.functional.gelu:torch.float32",),
}

#: Keys "opinfo_id:*:special", or "opinfo_id:torch.dtype:special" where one dtype fails.
EXPECTED_FAILURES: dict[str, str] = by_cause(_CAUSES, ("special",))
