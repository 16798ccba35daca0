"""Expected conformance failures of the quantization ops: none."""

EXPECTED_FAILURES: dict[str, str] = {}
