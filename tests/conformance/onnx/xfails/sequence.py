"""Expected failures of the sequence and optional ops: none. Every case passes."""

from tests.conformance.expectations import Expected

EXPECTED_FAILURES: dict[str, Expected] = {}
