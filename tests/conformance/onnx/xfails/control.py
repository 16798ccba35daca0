"""Expected failures of control flow (If, Loop, Scan) and NonMaxSuppression: none. Every
case passes."""

from tests.conformance.expectations import Expected

EXPECTED_FAILURES: dict[str, Expected] = {}
