"""Expected failures of control flow (If, Loop, Scan) and NonMaxSuppression: none. Every
case passes."""

EXPECTED_FAILURES: dict[str, str] = {}
