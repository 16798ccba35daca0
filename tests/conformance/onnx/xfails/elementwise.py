"""Expected ONNX failures of the elementwise ops (math, comparison, logic, bitwise, casts,
Where), conformance and special values."""

from tests.conformance.expectations import Expected

from .reasons import ZERO_AGAINST_ZERO, ZERO_TIES

_NO_STRINGS = Expected("string tensors: JAX has no string dtype",
                       fails="error:UnsupportedDtypeError", detail="holds string tensors")

EXPECTED_FAILURES: dict[str, Expected] = {
    "test_equal_string": _NO_STRINGS,
    "test_equal_string_broadcast": _NO_STRINGS,
    **{f"special_values:{case}": ZERO_TIES for case in ("Max", "Min", "Max_3", "Min_3")},
    "special_values:Where": Expected(
        "onnxruntime's Where loses the sign of a -0.0 taken from X (Where(true, -0.0, y) = 0.0), "
        "against the spec's elementwise selection",
        fails="mismatch", detail=ZERO_AGAINST_ZERO,
    ),
}
