"""Expected failures of the indexing ops: none. Every case of them can pass; `*_expanded` cases
that fail do so only for want of other families' ops."""

EXPECTED_FAILURES: dict[str, str] = {}
