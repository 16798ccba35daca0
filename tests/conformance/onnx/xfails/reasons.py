"""Expected ONNX failures that several op families share, each an `Expected` (reason and cause).

The special-values entries ("special_values:<case>", tests/ops/onnx/test_special_values.py) are
places where jaxport and onnxruntime differ on purpose or by a known limit; each of their
differences reads "y0[<position>] on (<inputs>): jaxport <value>, onnxruntime <value>".
"""

from tests.conformance.expectations import Expected

#: A conformance case's failure when values differ and dtypes and shapes agree (NumPy's words).
VALUES_DIFFER = r"Not equal to tolerance"
#: A special-values difference between two zeros (of opposite signs); NumPy 2 writes the values
#: as np.float32(-0.0), NumPy 1 as -0.0.
ZERO_AGAINST_ZERO = r"jaxport (np\.float32\()?-?0\.0\)?, onnxruntime (np\.float32\()?-?0\.0\)?$"

ZERO_TIES = Expected(
    "onnxruntime returns one operand when two compare equal, so the sign of a zero result "
    "depends on operand order (Max(0.0, -0.0) = -0.0, Max(-0.0, 0.0) = 0.0); the spec leaves it "
    "open, jaxport follows IEEE 754 maximum/minimum (-0.0 < 0.0) as XLA and PyTorch do",
    fails="mismatch", detail=ZERO_AGAINST_ZERO,
)
#: A special-values difference on a row that holds a NaN (the row is printed by np.array2string).
ROW_WITH_NAN = r" on \(\[[^\]]*\bnan\b[^\]]*\]\): jaxport "

NAN_POSITION = Expected(
    "onnxruntime's comparisons skip a NaN unless it comes first in the row, so its answer "
    "depends on where the NaN is (ReduceMax([1, nan]) = 1, ReduceMax([nan, 1]) = nan; TopK passes "
    "over a leading NaN too); jaxport takes NaN as the largest value, as NumPy, PyTorch and ONNX's "
    "reference implementation do; every difference is on a row holding a NaN",
    fails="mismatch", detail=ROW_WITH_NAN,
)
STRINGS = Expected(
    "string tensors: JAX arrays hold numbers only, so jaxport refuses string values at load time",
    fails="error:UnsupportedDtypeError", detail="holds string tensors",
)
