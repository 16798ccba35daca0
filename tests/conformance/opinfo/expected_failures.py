"""Expected OpInfo failures, as data: each entry says why.

Keys are "opinfo_id" (every dtype and path), "opinfo_id:dtype" (one dtype,
e.g. "nonzero:torch.bool") or "opinfo_id:dtype:path" (one conversion path,
dtype may be "*"). A listed case whose samples all pass fails the suite, so
stale entries get removed. Each op family keeps its entries in
`xfails/<family>.py`; this module merges them.
"""

from .xfails import elementwise, indexing, nn, reduction, reference, shape, special_values

EXPECTED_FAILURES: dict[str, str] = {}
for _family in (elementwise, indexing, nn, reduction, reference, shape, special_values):
    _overlap = EXPECTED_FAILURES.keys() & _family.EXPECTED_FAILURES.keys()
    assert not _overlap, f"expected failures listed twice: {_overlap}"
    EXPECTED_FAILURES.update(_family.EXPECTED_FAILURES)


def expected_failure(opinfo_id: str, dtype: str, path: str) -> str | None:
    """The reason (op, dtype, path) is expected to fail, from the most specific entry that matches."""
    for key in (f"{opinfo_id}:{dtype}:{path}", f"{opinfo_id}:*:{path}", f"{opinfo_id}:{dtype}", opinfo_id):
        if key in EXPECTED_FAILURES:
            return EXPECTED_FAILURES[key]
    return None
