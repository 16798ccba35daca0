"""Expected OpInfo failures, as data: each entry says why.

Keys are "opinfo_id" (every dtype) or "opinfo_id:dtype" (one dtype, e.g.
"nonzero:torch.bool"). A listed (op, dtype) whose samples all pass fails the
suite, so stale entries get removed.
"""

EXPECTED_FAILURES: dict[str, str] = {}
