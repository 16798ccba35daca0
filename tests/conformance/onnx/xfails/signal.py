"""Expected conformance failures of the signal ops: none."""

EXPECTED_FAILURES: dict[str, str] = {}
