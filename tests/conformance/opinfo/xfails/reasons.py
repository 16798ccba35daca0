"""Expected failures that several op families share, each an `Expected` (reason and cause) that
the family files list ops under with `on_paths`, and the operand values (`Values`) they are about.

Most are causes of the special-values pass (tests/ops/aten/test_special_values.py, path
"special"), which compares NaN places, infinities and the signs of zeros exactly; the ops listed
under them differ from PyTorch there, and only there: each entry names the operand values its
reason is about, and a difference at any other element fails the case. Every such cause is
PyTorch's or XLA's own: PyTorch's vectorized and scalar loops disagreeing with each other,
behaviour C++ leaves undefined, or XLA:CPU's flushing of subnormals, so there is no single answer
to match or no one lowering that could give it.

A `Values` predicate is given a failure's operands, one tensor per floating operand with the
differing elements along the first axis: 1-d for elementwise samples, one row of the reduced
matrix per differing output row for row reductions (`harness.LAYOUTS`). The operands are the
sample's own, subnormals unflushed.
"""

from __future__ import annotations

import dataclasses

import torch

from tests.conformance.expectations import Expected, Values

#: A failure's detail when zeros differ only in sign (`harness._signed_zeros` writes it).
ZERO_SIGNS = r"zeros of the wrong sign"
#: A failure's detail when a NaN stands against a number (torch.testing.assert_close writes it).
NAN_PLACES = r"Greatest absolute difference: nan"


def _rows(t: torch.Tensor) -> torch.Tensor:
    """`t` as (differing element, the operand values it reads): one column for an elementwise
    operand, the row for a row reduction."""
    return t.reshape(t.shape[0], -1)


def _zeros(t: torch.Tensor) -> torch.Tensor:
    """Where `t` is a zero to XLA:CPU: a zero, or a subnormal it flushes to a zero of its sign."""
    return t.abs() < torch.finfo(t.dtype).tiny


def _zeros_of_both_signs(*operands: torch.Tensor) -> torch.Tensor:
    positive = negative = torch.zeros(len(operands[0]), dtype=torch.bool)
    for t in map(_rows, operands):
        zero = _zeros(t)
        positive = positive | (zero & ~t.signbit()).any(1)
        negative = negative | (zero & t.signbit()).any(1)
    return positive & negative


def _subnormal(*operands: torch.Tensor) -> torch.Tensor:
    return torch.stack([((t != 0) & _zeros(t)).any(1) for t in map(_rows, operands)]).any(0)


#: Tied zeros: the operands an element reads (the two or three of an elementwise op, the row of
#: a reduction) hold zeros of both signs, subnormals counting as zeros.
TIED_ZEROS = Values("the operands hold zeros of both signs (subnormals counting as zeros)", _zeros_of_both_signs)
#: A subnormal operand, which XLA:CPU flushes in arithmetic.
SUBNORMAL_OPERAND = Values("an operand is subnormal", _subnormal)


def not_representable(dtype: torch.dtype) -> Values:
    """The operand is NaN, an infinity, or a float whose integer part lies outside `dtype`."""
    info = torch.iinfo(dtype)

    def holds(x: torch.Tensor) -> torch.Tensor:
        whole = x.double().trunc()
        return x.isnan() | x.isinf() | (whole < info.min) | (whole > info.max)

    return Values(f"the operand is NaN, an infinity or out of {str(dtype)[6:]}'s range", holds)


def quotient_overflows(dividend: int, divisor: int) -> Values:
    """|dividend / divisor| (the floating operands at those positions) exceeds the dtype's largest
    finite number."""

    def holds(*operands: torch.Tensor) -> torch.Tensor:
        x, y = operands[dividend], operands[divisor]
        return x.double().abs() > torch.finfo(x.dtype).max * y.double().abs()

    return Values("|x / y| overflows", holds)


def subnormal_reciprocal(divisor: int) -> Values:
    """1 / the operand at `divisor` is subnormal (the divisor is finite and beyond 1 / tiny)."""

    def holds(*operands: torch.Tensor) -> torch.Tensor:
        y = operands[divisor]
        return y.isfinite() & (y.double().abs() > 1 / torch.finfo(y.dtype).tiny)

    return Values("1 / y is subnormal", holds)


ZERO_TIES = Expected(
    "the sign of a zero where +0.0 and -0.0 tie: PyTorch's CPU kernels for tensor operands return "
    "either operand depending on whether the vectorized or the scalar loop ran (torch.maximum(0.0, "
    "-0.0) is +0.0 for one element and -0.0 for 40), so there is no one sign to match; jaxport gives "
    "IEEE 754's maximum/minimum (-0.0 < 0.0), as XLA does, and clamp returns x where it ties with a "
    "bound, as PyTorch's scalar loop does",
    fails="mismatch", detail=ZERO_SIGNS, values=TIED_ZEROS,
)
ZERO_TIES_REDUCED = Expected(
    "the sign of the extreme of a row holding +0.0 and -0.0: PyTorch's reduction keeps the first "
    "of tied zeros in its scalar loop and another in its vectorized one (with AVX-512 kernels, amin "
    "of +0.0 and then -0.0s is +0.0 for 16 elements and -0.0 for 33), so there is no one sign to "
    "match; jaxport gives IEEE 754's minimum (-0.0). The rows here (7 elements) take the scalar loop "
    "with AVX2 and AVX-512 kernels alike",
    fails="mismatch", detail=ZERO_SIGNS, values=TIED_ZEROS,
)
ZERO_TIES_SELECTED = Expected(
    "the sign of a selected zero where +0.0 and -0.0 tie: which of tied elements PyTorch's "
    "quickselect and partial sort return is unspecified (the harness accepts any of their indices, "
    "TIE_ORDER_INDICES), and a zero's sign follows the element chosen",
    fails="mismatch", detail=ZERO_SIGNS, values=TIED_ZEROS,
)
SUBNORMALS_READ_EXACTLY = Expected(
    "XLA:CPU flushes subnormal operands to zero in arithmetic but this op reads them as they are "
    "(pow, atan2 and frexp on the value, nextafter on its bits), so a subnormal operand gives the "
    "unflushed answer where the reference, run on flushed inputs, gives a zero's",
    fails="mismatch", values=SUBNORMAL_OPERAND,
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
    fails="mismatch", detail=NAN_PLACES, values=quotient_overflows(dividend=0, divisor=1),
)
SUBNORMAL_INTERMEDIATE = Expected(
    "the op exports as reciprocal then multiply, and XLA:CPU flushes the subnormal reciprocal of "
    "the largest float to zero, so max / max gives 0 and inf / max NaN where PyTorch keeps "
    "2.9e-39 and gives 1 and inf; no one lowering sees both steps",
    fails="mismatch", detail=NAN_PLACES,
)
VECTORIZED_ZERO_SIGN = Expected(
    "PyTorch's vectorized and scalar loops give zeros of different signs where a negative x "
    "shrinks to zero (softshrink(-0.0) is -0.0 for one element and +0.0 for 40), so there is no "
    "one sign to match; NaN passes through as in PyTorch",
    fails="mismatch", detail=ZERO_SIGNS,
    values=Values("x is -0.0 or negative and shrinks to zero (|x| <= lambd, at most 0.5 in OpInfo's calls)",
                  lambda x: x.signbit() & (x.abs() <= 0.5)),
)


def cast(dtype: torch.dtype) -> Expected:
    """`INTEGER_CAST` for a cast to `dtype`: its differences only where the float is NaN, an
    infinity or out of `dtype`'s range."""
    return dataclasses.replace(INTEGER_CAST, values=not_representable(dtype))

#: torch.complex32 (complex half): the op's input or output has it.
COMPLEX32 = Expected(
    "JAX has no complex32 (complex half) dtype, so jaxport refuses torch.complex32 by name",
    fails="error:TypeError", detail=r"jaxport does not support torch dtype torch\.complex32", blame="jax",
)

