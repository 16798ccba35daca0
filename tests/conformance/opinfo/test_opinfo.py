"""OpInfo conformance: PyTorch's own op database, through torch.export -> jaxport vs PyTorch eager.

The default smoke level (CI, `make test`) runs one sample of each op: in float32 and one more
dtype on the graph path (int64, bool, float16, complex64 or float64, taking turns by op, so each
is covered across the library), in float32 on the eager and reference paths, and in float32 on the
decompose-everything ("core") path for every third op; converted samples run under `jax.jit` only
(op by op too where a model cannot be jitted). `make test` runs a share of these
(`in_make_test`): the graph path's every case, the eager and gradient paths' every second op, one
of the two reference paths per op, taking turns, and not the core path; the rest are `slow`
(`make test-slow`). `--opinfo=standard` (`make opinfo-smoke`) runs all four
dtypes with two samples, op by op and jitted, every op on every path; `--opinfo=wide`
runs the first three samples of every tested dtype on the auto path and of
float32 on the core path; `--opinfo=full` runs every sample of those. `make
opinfo-report` runs a level and regenerates docs/opinfo.md from its results.

The reference paths run the extremal samples of OpInfo's `reference_inputs`
(NaN, infinities, very large and small values; `harness.reference_samples`)
that `sample_inputs` lacks, through the graph and the eager frontend.

The gradient paths (`gradients.py`) compare derivatives of the converted program with PyTorch's:
"vjp" (`jax.vjp` against `torch.autograd.grad`, every op with autograd) and "jvp" (`jax.jvp`
against forward-mode AD, where the op supports it), in the floating and complex dtypes PyTorch
differentiates the op in; at the smoke level one float32 sample of each op, on one of the two
(`smoke_gradient_path`).

A listed case (`expected_failures.py`) xfails when every failure has its entry's cause, including
the samples and operand values the entry names. `test_expected_failure_still_fails` runs, at every
level, the samples each entry names (sample 0 where it names none), op by op and jitted, and
requires each to fail as stated, so an entry that goes stale fails `make test` (about 40 s on two
cores); a level that runs a named sample in every mode requires it to fail too.
"""

from __future__ import annotations

import os
import zlib

import pytest
import torch

from tests.conformance.expectations import Expected, Failure, Values, judge
from tests.conformance.opinfo import gradients, harness
from tests.conformance.opinfo.expected_failures import EXPECTED_FAILURES, SPECIAL, expected_failure
from tests.conftest import OPINFO_RESULTS

#: The eager frontend runs each sample as the function, its in-place variant and its out= form.
EAGER_PATHS = {"eager": "op", "eager_inplace": "inplace", "eager_out": "out", "eager_reference": "op"}
#: The paths whose samples are `harness.reference_samples` rather than `harness.samples`.
REFERENCE_PATHS = ("reference", "eager_reference")
#: The paths that compare derivatives (`gradients.py`), on `gradients.gradient_samples` in the
#: floating and complex dtypes PyTorch differentiates the op in.
GRADIENT_PATHS = gradients.GRADIENT_PATHS

#: Per level and conversion path: the dtypes tested and at most how many samples of each (None: all).
#: The core path re-decomposes every sample with run_decompositions (~0.2 s each), so it is lighter.
#: At the smoke level the core path runs one op in this many (by name: the same ops every run), and
#: `make test` runs the eager and gradient paths' cases of one op in `SMOKE_SHARE` (`in_make_test`).
SMOKE_CORE_SHARE = 3
SMOKE_SHARE = 2

#: `ROTATED` in place of dtypes: float32 and one more of `ROTATED_DTYPES` per op (`level_dtypes`).
ROTATED = "float32 and one more"
ROTATED_DTYPES = (torch.int64, torch.bool, torch.float16, torch.complex64, torch.float64)

LEVELS = {
    "smoke": {
        "auto": (ROTATED, 1),
        "core": ((torch.float32,), 1),
        **{path: ((torch.float32,), 1) for path in EAGER_PATHS},
        **{path: ((torch.float32,), 1) for path in REFERENCE_PATHS},
        **{path: ((torch.float32,), 1) for path in GRADIENT_PATHS},
    },
    "standard": {
        "auto": ((torch.float32, torch.int64, torch.bool, torch.float16), 2),
        "core": ((torch.float32,), 1),
        **{path: ((torch.float32, torch.int64, torch.bool, torch.float16), 2) for path in EAGER_PATHS},
        **{path: ((torch.float32,), 3) for path in REFERENCE_PATHS},
        **{path: ((torch.float32, torch.complex64), 2) for path in GRADIENT_PATHS},
    },
    "wide": {
        "auto": (harness.DTYPES, 3),
        "core": ((torch.float32,), 3),
        **{path: (harness.DTYPES, 3) for path in EAGER_PATHS},
        **{path: (harness.DTYPES, 6) for path in REFERENCE_PATHS},
        **{path: (harness.DTYPES, 3) for path in GRADIENT_PATHS},
    },
    "full": {
        "auto": (harness.DTYPES, None),
        "core": ((torch.float32,), None),
        **{path: (harness.DTYPES, None) for path in EAGER_PATHS},
        **{path: (harness.DTYPES, None) for path in REFERENCE_PATHS},
        **{path: (harness.DTYPES, None) for path in GRADIENT_PATHS},
    },
}
#: By default the graph paths, the eager function path, the reference paths and the gradient paths; the eager in-place and out= paths
#: (another 5 minutes at the smoke level) run with `make opinfo-eager` or, e.g.,
#: JAXPORT_OPINFO_PATHS=eager,eager_inplace,eager_out.
PATHS = os.environ.get("JAXPORT_OPINFO_PATHS", "auto,core,eager,reference,eager_reference,vjp,jvp").split(",")


def _turn(op) -> int:
    """A number fixed by the op's name, for choices that take turns across the op library."""
    return zlib.crc32(harness.opinfo_id(op).encode())


def level_dtypes(level: str, path: str, op) -> list[torch.dtype]:
    """The dtypes `level` runs `op` in on `path`: those listed that the op supports, or, for
    `ROTATED`, float32 and the next of `ROTATED_DTYPES` the op supports, starting from one picked
    by the op's name (a stable choice: the same on every run and machine)."""
    dtypes = LEVELS[level][path][0]
    tested = gradients.gradient_dtypes(op, path) if path in GRADIENT_PATHS else harness.tested_dtypes(op)
    if dtypes != ROTATED:
        return [d for d in tested if d in dtypes]
    start = _turn(op) % len(ROTATED_DTYPES)
    turn = ROTATED_DTYPES[start:] + ROTATED_DTYPES[:start]
    return [d for d in tested if d == torch.float32] + [d for d in turn if d in tested][:1]


def smoke_gradient_path(op) -> str:
    """The one gradient path the smoke level runs `op` on: reverse and forward mode take turns by
    op (a JAX derivative rule is one linear map; its transpose is checked on the other ops), reverse
    mode where PyTorch has no forward mode."""
    return "jvp" if _turn(op) % 2 and op.supports_forward_ad else "vjp"


def smoke_reference_path(op) -> str:
    """The one reference path `make test` runs `op`'s extremal samples on (`in_make_test`): the
    graph's and the eager frontend's take turns by op."""
    return REFERENCE_PATHS[(_turn(op) >> 1) % 2]


def level_cases(level: str, paths=None):
    """(op, dtype, path) for every case a level runs on `paths` (default: PATHS)."""
    for path in paths or PATHS:
        for op in harness.op_db():
            if path in REFERENCE_PATHS and op.reference_inputs_func is None:
                continue
            if path == "core" and level == "smoke" and _turn(op) % SMOKE_CORE_SHARE:
                continue
            if path in GRADIENT_PATHS and level == "smoke" and path != smoke_gradient_path(op):
                continue
            if path in EAGER_PATHS and not _has_variant(op, EAGER_PATHS[path]):
                continue  # nothing to run: no case, rather than a case that checks nothing
            for dtype in level_dtypes(level, path, op):
                if path in REFERENCE_PATHS and not dtype.is_floating_point:
                    continue
                yield op, dtype, path


def _has_variant(op, variant: str) -> bool:
    """Whether `op` has the eager form a path runs (`harness.run_sample_eager`'s variants)."""
    if variant == "inplace":
        return op.inplace_variant is not None
    if variant == "out":
        return bool(op.supports_out)
    return True


def in_make_test(op, path: str) -> bool:
    """Whether `make test` runs `op` on `path` at the smoke level; the other smoke cases are `slow`
    (these shares took the smoke level from 2,173 to 1,448 s of test time in `make test`)."""
    if path == "eager":
        return not (_turn(op) >> 2) % SMOKE_SHARE
    if path in GRADIENT_PATHS:
        return not (_turn(op) >> 3) % SMOKE_SHARE
    if path in REFERENCE_PATHS:
        return path == smoke_reference_path(op)
    return path != "core"


def _cases(level: str):
    for op, dtype, path in level_cases(level):
        slow = level == "smoke" and not in_make_test(op, path)
        yield pytest.param((op, dtype, path), id=f"{path}-{harness.opinfo_id(op)}-{str(dtype)[6:]}",
                           marks=[pytest.mark.slow] if slow else [])


def pytest_generate_tests(metafunc):
    if "opinfo_case" in metafunc.fixturenames:
        level = metafunc.config.getoption("--opinfo")
        metafunc.parametrize("opinfo_case", list(_cases(level)))


@pytest.mark.usefixtures("x64_strict")
def test_opinfo(opinfo_case, request):
    op, dtype, path = opinfo_case
    if (path, harness.opinfo_id(op), str(dtype)) in OPINFO_RESULTS.finished:
        pytest.skip("recorded by an earlier part of this run (--opinfo-resume)")
    level = request.config.getoption("--opinfo")
    limit = LEVELS[level][path][1]
    if path in REFERENCE_PATHS:
        cases = harness.reference_samples(op, dtype, limit=limit)
        if not cases:
            OPINFO_RESULTS.done(path, harness.opinfo_id(op), str(dtype))
            pytest.skip("reference_inputs holds no extremal sample for this dtype")
    elif path in GRADIENT_PATHS:
        cases = gradients.gradient_samples(op, dtype, limit)
    else:
        cases = harness.samples(op, dtype, limit)
    key, expected = expected_failure(harness.opinfo_id(op), str(dtype), path) or (None, None)
    modes = harness.LEVEL_MODES[level]
    failures, ran, out_of_reach = [], [], set()
    for i, sample in enumerate(cases):
        outcome = run_path(op, sample, dtype, path, modes)
        if outcome.status != "unexportable":
            ran.append(f"sample {i}")
        else:
            out_of_reach.add(outcome.detail)
        failure = (Failure(outcome.kind, outcome.detail, f"sample {i}", outcome.operands)
                   if outcome.status in ("failed", "unconvertible") else None)
        OPINFO_RESULTS.record({
            "path": path, "op": harness.opinfo_id(op), "dtype": str(dtype), "sample": i,
            "status": outcome.status, "detail": outcome.detail, "aten": list(outcome.aten_ops),
            **({"expected": expected.explains(failure)} if failure and expected else {}),
        })
        if failure:
            failures.append(failure)
    OPINFO_RESULTS.done(path, harness.opinfo_id(op), str(dtype))
    if not ran:  # nothing was checked: said so, never counted as a pass
        why = "; ".join(sorted(out_of_reach)[:3]) or "no samples"
        if key is not None and level == "full":  # every sample ran: the entry explains nothing
            pytest.fail(f"expected failure {key!r} is listed, but no sample of this case runs ({why})")
        pytest.skip(f"not covered: no sample runs on this path ({why})")
    # Only the full level runs every sample, so only it can tell that a listed case passes (where
    # any sample ran: an op without an in-place or out= form runs none there); a sample the entry
    # names must fail wherever it ran in every mode (jitted only, a sample that fails op by op
    # passes: test_expected_failure_still_fails runs it both ways).
    every_mode = path in EAGER_PATHS or modes == harness.MODES
    judge(key, expected, failures, complete=level == "full" and bool(ran), ran=ran if every_mode else ())


def run_path(op, sample, dtype, path: str, modes=harness.MODES) -> harness.Outcome:
    """One sample on one path: its derivatives (`GRADIENT_PATHS`), the eager frontend's
    (`EAGER_PATHS`) or the graph's (auto, core; reference through auto), the graph's run in
    `modes`; a failure names the operand values where it differs for elementwise ops
    (`harness.layout`)."""
    if path in GRADIENT_PATHS:
        return gradients.run_gradient_sample(op, sample, dtype, path)
    layout = harness.layout(op)
    if path in EAGER_PATHS:
        return harness.run_sample_eager(op, sample, dtype, variant=EAGER_PATHS[path], layout=layout)
    return harness.run_sample(op, sample, dtype, decompose="auto" if path == "reference" else path,
                              modes=modes, layout=layout)


def path_samples(op, dtype, path: str) -> list:
    """Every sample `path` runs `op` in `dtype` with (the full level's)."""
    if path in REFERENCE_PATHS:
        return harness.reference_samples(op, dtype, limit=None)
    if path in GRADIENT_PATHS:
        return gradients.gradient_samples(op, dtype)
    return harness.samples(op, dtype)


def entry_cases() -> list[tuple[str, object, torch.dtype, str]]:
    """(key, op, dtype, path) for each OpInfo entry outside the special-values pass (whose test
    checks its own): the case `test_expected_failure_still_fails` checks it in, its key's dtype
    and path, where the key names every dtype float32 (else the op's first tested dtype) and where
    it names every path "auto"."""
    ops = {harness.opinfo_id(op): op for op in harness.op_db()}
    cases = []
    for key in sorted(EXPECTED_FAILURES):
        opinfo_id, dtype, path = (key.split(":") + ["*", "auto"])[:3]
        if path == SPECIAL:
            continue
        op = ops[opinfo_id]
        tested = gradients.gradient_dtypes(op, path) if path in GRADIENT_PATHS else harness.tested_dtypes(op)
        if dtype == "*":
            dtype = torch.float32 if torch.float32 in tested else tested[0]
        else:
            dtype = next(d for d in tested if str(d) == dtype)
        cases.append((key, op, dtype, path))
    return cases


@pytest.mark.usefixtures("x64_strict")
@pytest.mark.parametrize(("key", "op", "dtype", "path"), [pytest.param(*case, id=case[0]) for case in entry_cases()])
def test_expected_failure_still_fails(key, op, dtype, path):
    """Each OpInfo entry's named samples (sample 0 where it names none), run op by op and jitted
    at every level, still fail, each with the entry's stated cause: an entry that goes stale, or
    whose failure changes, fails here and not only at `--opinfo=full`."""
    entry = EXPECTED_FAILURES[key]
    places = entry.where or ("sample 0",)
    cases = path_samples(op, dtype, path)
    indices = [int(place.removeprefix("sample ")) for place in places]
    assert max(indices) < len(cases), f"{key} names {places}, but {path} runs {len(cases)} samples of {dtype}"
    failures = {}
    for i in indices:
        outcome = run_path(op, cases[i], dtype, path)
        if outcome.status in ("failed", "unconvertible"):
            failures[i] = Failure(outcome.kind, outcome.detail, f"sample {i}", outcome.operands)
    passing = [f"sample {i}" for i in indices if i not in failures]
    other = [f for f in failures.values() if not entry.explains(f)]
    assert not passing, f"{key} ({entry.reason}): {', '.join(passing)} of {dtype} on {path} passes: narrow or remove the entry"
    assert not other, (f"{key} is expected to fail with {entry.cause}, but on {path} in {dtype}:\n"
                       + "\n".join(f"  [{f.kind}] {f}" for f in other))


def test_entries_explain_only_their_samples_and_values():
    """`Expected.where` and `Expected.values` narrow what an entry explains, and `judge` fails a
    listed case on a failure elsewhere and on a named sample that ran and passed."""
    negative = Values("x < 0", lambda x: x < 0)
    entry = Expected("reason", fails="mismatch", detail="not close", where=("sample 1",), values=negative)
    at = torch.tensor([-1.0, -2.0])
    assert entry.explains(Failure("mismatch", "jit: not close", "sample 1", (at,)))
    assert not entry.explains(Failure("mismatch", "jit: not close", "sample 2", (at,)))  # another sample
    assert not entry.explains(Failure("mismatch", "jit: not close", "sample 1", (torch.tensor([-1.0, 3.0]),)))
    assert not entry.explains(Failure("mismatch", "jit: not close", "sample 1"))  # operands unknown
    assert not entry.explains(Failure("mismatch", "jit: zeros of the wrong sign", "sample 1", (at,)))
    assert entry.cause == "mismatch matching /not close/ in sample 1 where x < 0"
    with pytest.raises(ValueError, match="tuple of places"):
        Expected("reason", fails="mismatch", where="sample 1")

    explained = Failure("mismatch", "not close", "sample 1", (at,))
    with pytest.raises(pytest.xfail.Exception):
        judge("op", entry, [explained], complete=False, ran=["sample 0", "sample 1"])
    with pytest.raises(pytest.fail.Exception, match="another cause"):
        judge("op", entry, [explained, Failure("mismatch", "not close", "sample 0", (at,))], complete=False)
    with pytest.raises(pytest.fail.Exception, match="names sample 1 .* but it passes"):
        judge("op", entry, [], complete=False, ran=["sample 0", "sample 1"])
    judge("op", entry, [], complete=False, ran=["sample 0"])  # sample 1 did not run: not stale here
    with pytest.raises(ValueError, match="blame='torch'"):
        Expected("reason", fails="mismatch", blame="torch")


def test_normwise_derivatives_are_judged_against_each_matrix_largest_entry():
    """`NORMWISE` derivatives pass where each matrix is within rtol of its own largest entry, and
    fail where one matrix is off by more than that, or a NaN appears, even beside a larger one."""
    want = torch.tensor([[[7.4e4, -105.0], [3.0, 1.0]], [[1.0, 0.5], [0.25, 0.0]]])
    rounded = want.clone()
    rounded[0, 1, 1] += 1.6e-3  # 2e-8 of its matrix's largest entry, 1.6e-3 of its own
    assert gradients._judge([rounded], [want], torch.float32, "tangent", normwise=True) == ""
    assert gradients._judge([rounded], [want], torch.float32, "tangent") != ""
    off = want.clone()
    off[1, 1, 1] += 1e-3  # the second matrix reaches 1.0: 1e-3 of it, though 1e-8 of the first's
    assert "1 of 8 entries" in gradients._judge([off], [want], torch.float32, "tangent", normwise=True)
    off[1, 1, 1] = float("nan")
    assert "1 of 8 entries" in gradients._judge([off], [want], torch.float32, "tangent", normwise=True)


def test_report_counts_what_is_not_jaxports_apart():
    """The generated tables count expected failures whose limit is JAX's missing type or PyTorch's
    own wrong result in their own columns, and give the pass rate without them beside the plain
    one; jaxport's own expected failures count against both rates."""
    from tests.conformance.opinfo import report

    def row(op, sample, status, detail=""):
        return {"path": "vjp", "op": op, "dtype": "torch.float32", "sample": sample, "status": status,
                "detail": detail, "aten": []}

    rows = [row("abs", i, "passed") for i in range(7)] + [
        row("chalf", 0, "failed", "conversion crashed: TypeError: jaxport does not support torch dtype torch.complex32"),
        row("as_strided_scatter", 0, "failed", "vjp: gradient 0: Tensor-likes are not close!"),
        row("sparse.sampled_addmm", 0, "unconvertible", "missing aten.sparse_sampled_addmm.default"),
    ]
    assert [report.blame(r) for r in rows[7:]] == ["jax", "pytorch", "jaxport"]
    table = report.summarize(rows, "test")
    assert "| float32 | 10 | 7 | 70.00% | 1 | 1 | 87.50% |" in table
    assert "| chalf | float32 | vjp | 1 | error:TypeError" in table


@pytest.mark.parametrize("decompose", ["auto", "core"])
def test_a_conversion_crash_on_any_path_is_a_failure(monkeypatch, decompose):
    """jaxport crashing on a sample PyTorch exports (and, on the core path, decomposes) is a
    failure of that sample, never "unexportable": only PyTorch's own refusals are out of reach."""
    def crash(*args, **kwargs):
        raise RuntimeError("planted crash")

    monkeypatch.setattr(harness.jaxport, "from_exported_program", crash)
    model, outcome = harness.convert_sample(torch.nn.Tanh(), [torch.randn(3)], decompose)
    assert model is None and (outcome.status, outcome.detail) == ("failed", "conversion crashed: RuntimeError: "
                                                                             "planted crash")
