"""Expected failures as data, for the OpInfo and ONNX conformance suites and the special-values passes.

Each entry is an `Expected`: the reason the case cannot pass, and the cause, what its failure
must look like. A listed case passes as an expected failure only when every failure it shows
has the stated cause; a failure of another kind (a crash where values were expected to differ,
say) fails the test, naming the entry, the stated cause and the failure seen. A listed case
that no longer fails fails too, so stale entries get removed.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Sequence

import pytest

#: The kinds of failure, as `Failure.kind` reports them and `Expected.fails` names them.
KINDS = {
    "mismatch": "the case runs and the comparison reports outputs that differ from the reference",
    "missing": "conversion reports ops it has no lowering for (UnsupportedOpsError)",
    "error:<ExceptionName>": "conversion or the run raises that exception (by its class name)",
}


@dataclasses.dataclass(frozen=True)
class Failure:
    """One observed failure: its `kind` ("mismatch", "missing" or "error:<ExceptionName>"), the
    harness's `detail`, and `where` it happened ("sample 3", "call 0"; may be empty)."""

    kind: str
    detail: str
    where: str = ""

    def __str__(self) -> str:
        return f"{self.where}: {self.detail}" if self.where else self.detail


@dataclasses.dataclass(frozen=True)
class Expected:
    """A case expected to fail: `reason`, why it cannot pass; `fails`, the kind its failures must
    be ("mismatch", "missing" or "error:<ExceptionName>", see `KINDS`), or a tuple of kinds where
    one entry covers paths that fail differently for the one reason; `detail`, where the kind
    alone is too coarse, a regular expression every failure's detail must contain (`re.search`)."""

    reason: str
    fails: str | tuple[str, ...]
    detail: str = ""

    def __post_init__(self) -> None:
        for kind in self.kinds:
            if kind not in ("mismatch", "missing") and not re.fullmatch(r"error:[A-Za-z_]\w*", kind):
                raise ValueError(f"fails={kind!r}: expected one of {', '.join(KINDS)}")
        re.compile(self.detail)

    @property
    def kinds(self) -> tuple[str, ...]:
        return (self.fails,) if isinstance(self.fails, str) else self.fails

    @property
    def cause(self) -> str:
        """The stated cause, in words: the kind, and the pattern where there is one."""
        return " or ".join(self.kinds) + (f" matching /{self.detail}/" if self.detail else "")

    def explains(self, failure: Failure) -> bool:
        """Whether `failure` is of the stated cause."""
        return failure.kind in self.kinds and (not self.detail or re.search(self.detail, failure.detail) is not None)


def merge(tables: Iterable[tuple[str, dict[str, Expected]]]) -> dict[str, Expected]:
    """One table of the (name, table) pairs given; an entry listed twice, or one that is not an
    `Expected`, is an error at import."""
    merged: dict[str, Expected] = {}
    for name, table in tables:
        overlap = merged.keys() & table.keys()
        assert not overlap, f"expected failures listed twice ({name} and before it): {sorted(overlap)}"
        wrong = [key for key, entry in table.items() if not isinstance(entry, Expected)]
        assert not wrong, f"{name}: entries that are not an Expected(reason, fails=...): {wrong}"
        merged.update(table)
    return merged


def judge(key: str | None, expected: Expected | None, failures: Sequence[Failure], *, complete: bool = True) -> None:
    """Settle a case from its `failures` and its expected-failure entry (`key`, `expected`; None
    when it has none): passes when it has neither; xfails when it is listed and every failure
    has the stated cause; fails on a failure when it is not listed, on a failure of another cause
    when it is, and on no failure when it is listed and `complete` (every sample the entry
    covers ran: a level that runs only some samples cannot say the entry is stale)."""
    if expected is None:
        assert not failures, "\n".join(map(str, failures[:5]))
        return
    if failures:
        other = [f for f in failures if not expected.explains(f)]
        if other:
            seen = "\n".join(f"  [{f.kind}] {f}" for f in other[:5])
            pytest.fail(f"{key} is expected to fail with {expected.cause} ({expected.reason}), but "
                        f"{len(other)} of {len(failures)} failures have another cause:\n{seen}")
        pytest.xfail(expected.reason)
    if complete:
        pytest.fail(f"{key} is listed as an expected failure ({expected.reason}) but passes: remove the entry",
                    pytrace=False)
