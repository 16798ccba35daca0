"""Expected OpInfo failures of the shape family, every path's: none."""

from tests.conformance.expectations import Expected

EXPECTED_FAILURES: dict[str, Expected] = {}
