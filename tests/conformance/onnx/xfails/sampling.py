"""Expected conformance failures of the sampling ops: none."""

from tests.conformance.expectations import Expected

EXPECTED_FAILURES: dict[str, Expected] = {}
