"""Expected conformance failures of the quantization ops: none."""

from tests.conformance.expectations import Expected

EXPECTED_FAILURES: dict[str, Expected] = {}
