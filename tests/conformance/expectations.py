"""Expected failures as data, for the OpInfo and ONNX conformance suites and the special-values passes.

Each entry is an `Expected`: the reason the case cannot pass, and the cause, what its failure
must look like, as narrow as the reason: its kind, a pattern of its detail, the samples it is
about (`where`) and the operand values it is about (`values`). A listed case passes as an
expected failure only when every failure it shows has the stated cause; a failure of another
kind (a crash where values were expected to differ, say), or one in another sample or on other
values, fails the test, naming the entry, the stated cause and the failure seen. A listed case
that no longer fails fails too, and so does a sample an entry names that ran and passed, so
stale entries get removed.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Collection, Iterable, Sequence

import pytest

#: The kinds of failure, as `Failure.kind` reports them and `Expected.fails` names them.
KINDS = {
    "mismatch": "the case runs and the comparison reports outputs that differ from the reference",
    "missing": "conversion reports ops it has no lowering for (UnsupportedOpsError)",
    "error:<ExceptionName>": "conversion or the run raises that exception (by its class name)",
}

#: Whose limit an expected failure is, as `Expected.blame` names it. Reports count the samples
#: of the last two apart: they are not jaxport's to fix, and each entry's reason says how that
#: was shown (the type's absence, or a reference independent of both libraries).
BLAMES = {
    "jaxport": "jaxport's own: a lowering, a feature or an accuracy it lacks",
    "jax": "JAX has no such type (complex32), so no conversion can represent the sample",
    "pytorch": "PyTorch's result is wrong or undefined at the sample, and jaxport's is not",
}


@dataclasses.dataclass(frozen=True)
class Failure:
    """One observed failure: its `kind` ("mismatch", "missing" or "error:<ExceptionName>"), the
    harness's `detail`, `where` it happened ("sample 3", "call 0"; may be empty) and, where the
    harness can tell which operand elements each output element reads (elementwise ops, row
    reductions), the `operands` at every output element that differs: one array per floating
    operand, the differing elements along its first axis (empty when unknown)."""

    kind: str
    detail: str
    where: str = ""
    operands: tuple = dataclasses.field(default=(), compare=False, repr=False)

    def __str__(self) -> str:
        return f"{self.where}: {self.detail}" if self.where else self.detail


@dataclasses.dataclass(frozen=True)
class Values:
    """The operand values a reason is about: `description`, in words ("an operand is subnormal"),
    and `holds`, which is given a failure's `operands` (one array per floating operand, the
    differing output elements along the first axis) and says for each element whether its
    operands are such values (a boolean array, one entry per element)."""

    description: str
    holds: Callable


@dataclasses.dataclass(frozen=True)
class Expected:
    """A case expected to fail: `reason`, why it cannot pass; `fails`, the kind its failures must
    be ("mismatch", "missing" or "error:<ExceptionName>", see `KINDS`), or a tuple of kinds where
    one entry covers paths that fail differently for the one reason; `detail`, where the kind
    alone is too coarse, a regular expression every failure's detail must contain (`re.search`);
    `where`, the places the reason is about ("sample 1"; `Failure.where`), each of which must fail
    wherever it runs, and outside which no failure is explained (empty: any place); `values`, the
    operand values the reason is about: every element that differs must have them (`Values`;
    a failure whose operands the harness cannot tell is not explained); `blame`, whose limit the
    failure is (`BLAMES`)."""

    reason: str
    fails: str | tuple[str, ...]
    detail: str = ""
    where: tuple[str, ...] = ()
    values: Values | None = None
    blame: str = "jaxport"

    def __post_init__(self) -> None:
        for kind in self.kinds:
            if kind not in ("mismatch", "missing") and not re.fullmatch(r"error:[A-Za-z_]\w*", kind):
                raise ValueError(f"fails={kind!r}: expected one of {', '.join(KINDS)}")
        re.compile(self.detail)
        if isinstance(self.where, str):
            raise ValueError(f"where={self.where!r}: expected a tuple of places, e.g. ('sample 1',)")
        if self.blame not in BLAMES:
            raise ValueError(f"blame={self.blame!r}: expected one of {', '.join(BLAMES)}")

    @property
    def kinds(self) -> tuple[str, ...]:
        return (self.fails,) if isinstance(self.fails, str) else self.fails

    @property
    def cause(self) -> str:
        """The stated cause, in words: the kind, and the pattern, places and values where given."""
        return (" or ".join(self.kinds) + (f" matching /{self.detail}/" if self.detail else "")
                + (f" in {', '.join(self.where)}" if self.where else "")
                + (f" where {self.values.description}" if self.values else ""))

    def explains(self, failure: Failure) -> bool:
        """Whether `failure` is of the stated cause: its kind, its detail, its place and, for an
        entry about values, every differing element's operands."""
        if failure.kind not in self.kinds or (self.detail and re.search(self.detail, failure.detail) is None):
            return False
        if self.where and failure.where not in self.where:
            return False
        if self.values is None:
            return True
        return bool(failure.operands) and len(failure.operands[0]) > 0 and bool(self.values.holds(*failure.operands).all())


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


def judge(key: str | None, expected: Expected | None, failures: Sequence[Failure], *, complete: bool = True,
          ran: Collection[str] = ()) -> None:
    """Settle a case from its `failures` and its expected-failure entry (`key`, `expected`; None
    when it has none): passes when it has neither; xfails when it is listed and every failure
    has the stated cause; fails on a failure when it is not listed, on a failure of another cause
    when it is, on a place the entry names that `ran` (the places run) and did not fail, and on no
    failure when it is listed and `complete` (every sample the entry covers ran: a level that runs
    only some samples cannot say the entry is stale)."""
    if expected is None:
        assert not failures, "\n".join(map(str, failures[:5]))
        return
    other = [f for f in failures if not expected.explains(f)]
    if other:
        seen = "\n".join(f"  [{f.kind}] {f}" for f in other[:5])
        pytest.fail(f"{key} is expected to fail with {expected.cause} ({expected.reason}), but "
                    f"{len(other)} of {len(failures)} failures have another cause:\n{seen}")
    passed = sorted(set(expected.where) & set(ran) - {f.where for f in failures})
    if passed:
        pytest.fail(f"{key} names {', '.join(passed)} as failing with {expected.cause} ({expected.reason}), "
                    "but it passes: narrow or remove the entry", pytrace=False)
    if failures:
        pytest.xfail(expected.reason)
    if complete:
        pytest.fail(f"{key} is listed as an expected failure ({expected.reason}) but passes: remove the entry",
                    pytrace=False)
