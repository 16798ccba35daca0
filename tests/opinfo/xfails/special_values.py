"""Expected failures of the special-values pass (tests/test_special_values.py, path "special"):
{"opinfo_id:*:special" or "opinfo_id:torch.dtype:special": reason}, by cause. The pass compares NaN places, infinities and the signs
of zeros exactly; these ops differ from PyTorch there. The first two causes are PyTorch's or
XLA's own and have no single answer to match; the rest are open work on jaxport's lowerings
(issue 18's follow-up), each listed with what differs.
"""

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
OVERFLOWING_STEP = (
    "open: an intermediate step overflows or underflows where PyTorch's kernel has none (x + "
    "alpha * y, which PyTorch fuses into one multiply-add; division by a broadcast operand, which "
    "XLA turns into a multiply by its reciprocal; fmod/remainder of huge by tiny, which PyTorch "
    "computes exactly; the sum of squares in std/var of float-max rows), giving NaN or inf where "
    "PyTorch has a number"
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
NAN_INF_RULES = (
    "open: the index the lowering returns among NaNs and ties differs from PyTorch's (mode, "
    "nanmedian)"
)
ZERO_SIGN_OF_FORMULA = (
    "open: the formula the lowering uses gives a zero of the other sign where PyTorch's lerp "
    "kernel, which switches formula at weight 0.5, does not"
)

_CAUSES = {
    ZERO_TIES: ("amin", "aminmax", "clamp", "clamp_max", "clamp_min", "cummax", "cummin", "fmax", "fmin",
                "kthvalue", "masked.amin", "max.binary", "maximum", "min.binary", "min.reduction_with_dim",
                "minimum", "nn.functional.hardtanh", "nn.functional.relu6", "topk"),
    SUBNORMALS_READ_EXACTLY: ("__rpow__", "atan2", "float_power:torch.float64", "frexp", "nextafter", "pow"),
    INTEGER_CAST: ("byte", "char", "int", "long", "short"),
    OVERFLOWING_STEP: ("__rdiv__", "__rmod__", "add", "addcdiv", "addcmul", "div.no_rounding_mode", "fmod",
                       "remainder", "rsub", "std:torch.float32", "std.unbiased:torch.float32", "std_mean", "sub", "true_divide", "var_mean"),
    VECTORIZED_ZERO_SIGN: ("nn.functional.softshrink",),
    FLOAT32_GELU_AT_INFINITY: ("nn.functional.gelu:torch.float32",),
    NAN_INF_RULES: ("mode", "nanmedian"),
    ZERO_SIGN_OF_FORMULA: ("lerp",),
}

#: Keys "opinfo_id:*:special", or "opinfo_id:torch.dtype:special" where one dtype fails.
EXPECTED_FAILURES: dict[str, str] = {
    f"{op}:special" if ":" in op else f"{op}:*:special": reason for reason, ops in _CAUSES.items() for op in ops
}
