"""Expected failures of the indexing ops: none. Every case of them can pass; `*_expanded` cases
that fail do so only for want of other families' ops."""

from tests.conformance.expectations import Expected

EXPECTED_FAILURES: dict[str, Expected] = {}
