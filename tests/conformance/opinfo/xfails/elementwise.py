"""Expected OpInfo failures of the elementwise family (elementwise, unary and special functions;
casts), every path's: {"opinfo_id", "opinfo_id:torch.dtype" or "opinfo_id:dtype:path": Expected}."""

import dataclasses

import torch

from tests.conformance.expectations import Expected, Values

from . import GRADIENTS, REFERENCE, SPECIAL, on_paths, samples
from .reasons import (
    COMPLEX32,
    SUBNORMAL_INTERMEDIATE,
    SUBNORMALS_READ_EXACTLY,
    VECTORIZED_FMOD,
    ZERO_TIES,
    cast,
    quotient_overflows,
    subnormal_reciprocal,
)

FLOAT32_AIRY_PHASE = Expected(
    "for x far below zero Airy's asymptotic expansion takes sin and cos of a phase that float32 "
    "resolves only to 5e-4 rad (7476.7 at x = -501), and PyTorch's kernel and jaxport (XLA's sin) "
    "round it differently: -0.032180 and -0.032124, where float64 gives -0.032193",
    # the reference inputs' two (100,) samples, at x = -501 and -13437.7 (the rest of their x, and
    # every other sample, match)
    fails="mismatch", where=samples(5, 7), values=Values("x < -100", lambda x: x < -100),
)

#: The casts to integer types OpInfo tests, by the dtype they cast to.
_CASTS = {"byte": torch.uint8, "char": torch.int8, "int": torch.int32, "long": torch.int64, "short": torch.int16}

EXPECTED_FAILURES: dict[str, Expected] = {
    "logcumsumexp:torch.complex128:jvp": Expected(
        "PyTorch's forward-mode derivative of complex logcumsumexp is NaN at every element of these "
        "samples (its float64 run too, so no reference exists); its reverse mode is finite and "
        "jaxport's matches it, and jaxport's tangent, cumsum(t e) / cumsum(e), is finite and that "
        "reverse mode's transpose",
        fails="mismatch", detail=r"^jvp: tangent 0: .*Greatest absolute difference: nan", where=samples(0, 1),
        blame="pytorch",
    ),
    "logcumsumexp:torch.float64:jvp": Expected(
        "PyTorch's float64 tangent is 1.8e-6 from the exact one in this sample (long-double "
        "cumsum(t e) / cumsum(e)), at an element whose exact tangent is the input's own (the first "
        "of its scan; with a random tangent, 0.87304033 for 0.87304215); jaxport's is within 4e-16 of it. float64 has no "
        "wider PyTorch reference to show that",
        fails="mismatch", detail=r"^jvp: tangent 0: Tensor-likes are not close", where=samples(1),
        blame="pytorch",
    ),
    # casts to and from complex half
    "chalf": COMPLEX32,
    "complex:torch.float16": COMPLEX32,
    "view_as_complex:torch.float16": COMPLEX32,
    **on_paths(("vjp", *SPECIAL), {COMPLEX32: ("chalf",)}),
    **on_paths(GRADIENTS, {COMPLEX32: ("complex:torch.float16", "view_as_complex:torch.float16")}),
    **on_paths(SPECIAL, {
        ZERO_TIES: ("clamp", "clamp_max", "clamp_min", "max.binary", "maximum", "min.binary", "minimum"),
        SUBNORMALS_READ_EXACTLY: ("__rpow__", "atan2", "float_power:torch.float64", "frexp", "nextafter", "pow"),
        VECTORIZED_FMOD: ("fmod", "remainder"),
        # x.__rmod__(y) is y % x, x.__rdiv__(y) y / x: the divisor is the first operand
        dataclasses.replace(VECTORIZED_FMOD, values=quotient_overflows(dividend=1, divisor=0)): ("__rmod__",),
        dataclasses.replace(SUBNORMAL_INTERMEDIATE, values=subnormal_reciprocal(divisor=0)): ("__rdiv__",),
    }),
    **on_paths(SPECIAL + REFERENCE, {cast(dtype): (op,) for op, dtype in _CASTS.items()}),
    **on_paths(REFERENCE, {FLOAT32_AIRY_PHASE: ("special.airy_ai:torch.float32",),
                           # OpInfo's extremal `where` samples for half include a complex half operand
                           dataclasses.replace(COMPLEX32, where=samples(5)): ("where:torch.float16",)}),
}
