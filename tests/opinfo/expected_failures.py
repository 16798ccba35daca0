"""Expected OpInfo failures, as data: each entry says why.

Keys are "opinfo_id" (every dtype) or "opinfo_id:dtype" (one dtype, e.g.
"nonzero:torch.bool"). A listed (op, dtype) whose samples all pass fails the
suite, so stale entries get removed. Each op family keeps its entries in
`xfails/<family>.py`; this module merges them.
"""

from .xfails import elementwise, indexing, nn, reduction, shape

EXPECTED_FAILURES: dict[str, str] = {}
for _family in (elementwise, indexing, nn, reduction, shape):
    _overlap = EXPECTED_FAILURES.keys() & _family.EXPECTED_FAILURES.keys()
    assert not _overlap, f"expected failures listed twice: {_overlap}"
    EXPECTED_FAILURES.update(_family.EXPECTED_FAILURES)
