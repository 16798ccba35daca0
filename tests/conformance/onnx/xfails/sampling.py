"""Expected conformance failures of the sampling ops: none."""

EXPECTED_FAILURES: dict[str, str] = {}
