"""Expected failures that several op families share, each an `Expected` (reason and cause) that
the family files list ops under with `on_paths`.

Most are causes of the special-values pass (tests/ops/aten/test_special_values.py, path
"special"), which compares NaN places, infinities and the signs of zeros exactly; the ops listed
under them differ from PyTorch there. Every such cause is PyTorch's or XLA's own: PyTorch's
vectorized and scalar loops disagreeing with each other, behaviour C++ leaves undefined, or
XLA:CPU's flushing of subnormals, so there is no single answer to match or no one lowering that
could give it.
"""

from tests.conformance.expectations import Expected

#: A failure's detail when zeros differ only in sign (`harness._signed_zeros` writes it).
ZERO_SIGNS = r"zeros of the wrong sign"
#: A failure's detail when a NaN stands against a number (torch.testing.assert_close writes it).
NAN_PLACES = r"Greatest absolute difference: nan"

ZERO_TIES = Expected(
    "the sign of a zero where +0.0 and -0.0 tie: PyTorch's CPU kernels return either operand "
    "depending on whether the vectorized or the scalar loop ran (torch.maximum(0.0, -0.0) is +0.0 "
    "for one element and -0.0 for 40), so there is no one sign to match; jaxport gives IEEE 754's "
    "maximum/minimum (-0.0 < 0.0), as XLA does",
    fails="mismatch", detail=ZERO_SIGNS,
)
SUBNORMALS_READ_EXACTLY = Expected(
    "XLA:CPU flushes subnormal operands to zero in arithmetic but this op reads them as they are "
    "(pow, atan2 and frexp on the value, nextafter on its bits), so a subnormal operand gives the "
    "unflushed answer where the reference, run on flushed inputs, gives a zero's",
    fails="mismatch",
)
INTEGER_CAST = Expected(
    "casting NaN, an infinity or an out-of-range float to an integer type is undefined in C++: "
    "PyTorch returns what the CPU's conversion instruction gives and XLA saturates, so there is "
    "no defined answer to match",
    fails="mismatch",
)
VECTORIZED_FMOD = Expected(
    "PyTorch's vectorized fmod (Sleef) gives NaN wherever |x / y| overflows, while its scalar loop "
    "(std::fmod) gives the exact remainder: torch.fmod of 40 sixes by the smallest normal float is "
    "NaN, of one six 0.0; jaxport gives the exact remainder for every element",
    fails="mismatch", detail=NAN_PLACES,
)
SUBNORMAL_INTERMEDIATE = Expected(
    "the op exports as reciprocal then multiply, and XLA:CPU flushes the subnormal reciprocal of "
    "the largest float to zero, so max / max gives 0 and inf / max NaN where PyTorch keeps "
    "2.9e-39 and gives 1 and inf; no one lowering sees both steps",
    fails="mismatch", detail=NAN_PLACES,
)
VECTORIZED_ZERO_SIGN = Expected(
    "PyTorch's vectorized and scalar loops give zeros of different signs (softshrink(-0.0) is "
    "-0.0 for one element and +0.0 for 40), so there is no one sign to match; NaN passes through "
    "as in PyTorch",
    fails="mismatch", detail=ZERO_SIGNS,
)
