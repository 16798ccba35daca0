"""Expected OpInfo failures, as data: each entry an `Expected`, its reason and the cause its
failures must have (`tests/conformance/expectations.py`).

Keys are "opinfo_id" (every dtype and every path of test_opinfo.py), "opinfo_id:dtype" (one
dtype, e.g. "nonzero:torch.bool") or "opinfo_id:dtype:path" (one path, dtype may be "*"); the
special-values pass (tests/ops/aten/test_special_values.py) reads only its own path, "special",
and the gradient paths ("vjp", "jvp") only theirs.
Each entry is as narrow as its reason: the samples it names (`where`, "sample 1"), the operand
values it names (`values`) and a `detail` pattern. A listed case fails the suite when a failure
has another cause or lies outside those samples or values, when a sample it names runs and
passes, or when every sample passes (at the full level, which runs them all);
`test_opinfo.test_expected_failure_still_fails` runs every entry's named samples at every
level, and the special-values pass runs every listed op whole, so stale entries get removed.
Each op family keeps all its ops' entries, every path's, in `xfails/<family>.py`; this module
merges them.
"""

from tests.conformance.expectations import Expected, merge

from .xfails import elementwise, indexing, nn, reduction, shape

EXPECTED_FAILURES: dict[str, Expected] = merge(
    (family.__name__, family.EXPECTED_FAILURES) for family in (elementwise, indexing, nn, reduction, shape)
)

#: The special-values pass's path: entries for every path do not cover it.
SPECIAL = "special"
#: Paths that only their own entries ("op:dtype:vjp") cover: a value that fails is not a
#: derivative that fails, nor the other way round.
OWN_ENTRIES_ONLY = (SPECIAL, "vjp", "jvp")


def expected_failure(opinfo_id: str, dtype: str, path: str) -> tuple[str, Expected] | None:
    """(key, entry) of the most specific entry that expects (op, dtype, path) to fail, if any."""
    keys = [f"{opinfo_id}:{dtype}:{path}", f"{opinfo_id}:*:{path}"]
    if path not in OWN_ENTRIES_ONLY:
        keys += [f"{opinfo_id}:{dtype}", opinfo_id]
    return next(((key, EXPECTED_FAILURES[key]) for key in keys if key in EXPECTED_FAILURES), None)
