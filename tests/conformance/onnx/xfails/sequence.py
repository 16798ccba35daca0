"""Expected failures of the sequence and optional ops: none. Every case passes."""

EXPECTED_FAILURES: dict[str, str] = {}
