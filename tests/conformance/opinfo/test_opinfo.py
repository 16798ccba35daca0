"""OpInfo conformance: PyTorch's own op database, through torch.export -> jaxport vs PyTorch eager.

The default smoke level (CI, `make test`) runs one sample of each op: in float32 and one more
dtype on the graph path (int64, bool or float16, taking turns by op, so each is covered across
the library), in float32 on the eager and reference paths, and in float32 on the decompose-
everything ("core") path for every third op; converted samples run under `jax.jit` only (op by
op too where a model cannot be jitted). `--opinfo=standard` (`make opinfo-smoke`) runs all four
dtypes with two samples, op by op and jitted, every op on every path; `--opinfo=wide`
runs the first three samples of every tested dtype on the auto path and of
float32 on the core path; `--opinfo=full` runs every sample of those. `make
opinfo-report` runs a level and regenerates docs/opinfo.md from its results.

The reference paths run the extremal samples of OpInfo's `reference_inputs`
(NaN, infinities, very large and small values; `harness.reference_samples`)
that `sample_inputs` lacks, through the graph and the eager frontend.
"""

from __future__ import annotations

import os
import zlib

import pytest
import torch

from tests.conformance.expectations import Failure, judge
from tests.conformance.opinfo import harness
from tests.conformance.opinfo.expected_failures import expected_failure
from tests.conftest import OPINFO_RESULTS

#: The eager frontend runs each sample as the function, its in-place variant and its out= form.
EAGER_PATHS = {"eager": "op", "eager_inplace": "inplace", "eager_out": "out", "eager_reference": "op"}
#: The paths whose samples are `harness.reference_samples` rather than `harness.samples`.
REFERENCE_PATHS = ("reference", "eager_reference")

#: Per level and conversion path: the dtypes tested and at most how many samples of each (None: all).
#: The core path re-decomposes every sample with run_decompositions (~0.2 s each), so it is lighter.
#: At the smoke level the core path runs one op in this many (by name: the same ops every run).
SMOKE_CORE_SHARE = 3

#: `ROTATED` in place of dtypes: float32 and one more of `ROTATED_DTYPES` per op (`level_dtypes`).
ROTATED = "float32 and one more"
ROTATED_DTYPES = (torch.int64, torch.bool, torch.float16)

LEVELS = {
    "smoke": {
        "auto": (ROTATED, 1),
        "core": ((torch.float32,), 1),
        **{path: ((torch.float32,), 1) for path in EAGER_PATHS},
        **{path: ((torch.float32,), 1) for path in REFERENCE_PATHS},
    },
    "standard": {
        "auto": ((torch.float32, torch.int64, torch.bool, torch.float16), 2),
        "core": ((torch.float32,), 1),
        **{path: ((torch.float32, torch.int64, torch.bool, torch.float16), 2) for path in EAGER_PATHS},
        **{path: ((torch.float32,), 3) for path in REFERENCE_PATHS},
    },
    "wide": {
        "auto": (harness.DTYPES, 3),
        "core": ((torch.float32,), 3),
        **{path: (harness.DTYPES, 3) for path in EAGER_PATHS},
        **{path: (harness.DTYPES, 6) for path in REFERENCE_PATHS},
    },
    "full": {
        "auto": (harness.DTYPES, None),
        "core": ((torch.float32,), None),
        **{path: (harness.DTYPES, None) for path in EAGER_PATHS},
        **{path: (harness.DTYPES, None) for path in REFERENCE_PATHS},
    },
}
#: By default the graph paths, the eager function path and the reference paths; the eager in-place and out= paths
#: (another 5 minutes at the smoke level) run with `make opinfo-eager` or, e.g.,
#: JAXPORT_OPINFO_PATHS=eager,eager_inplace,eager_out.
PATHS = os.environ.get("JAXPORT_OPINFO_PATHS", "auto,core,eager,reference,eager_reference").split(",")


def _turn(op) -> int:
    """A number fixed by the op's name, for choices that take turns across the op library."""
    return zlib.crc32(harness.opinfo_id(op).encode())


def level_dtypes(level: str, path: str, op) -> list[torch.dtype]:
    """The dtypes `level` runs `op` in on `path`: those listed that the op supports, or, for
    `ROTATED`, float32 and the next of `ROTATED_DTYPES` the op supports, starting from one picked
    by the op's name (a stable choice: the same on every run and machine)."""
    dtypes, tested = LEVELS[level][path][0], harness.tested_dtypes(op)
    if dtypes != ROTATED:
        return [d for d in tested if d in dtypes]
    start = _turn(op) % len(ROTATED_DTYPES)
    turn = ROTATED_DTYPES[start:] + ROTATED_DTYPES[:start]
    return [d for d in tested if d == torch.float32] + [d for d in turn if d in tested][:1]


def level_cases(level: str, paths=None):
    """(op, dtype, path) for every case a level runs on `paths` (default: PATHS)."""
    for path in paths or PATHS:
        for op in harness.op_db():
            if path in REFERENCE_PATHS and op.reference_inputs_func is None:
                continue
            if path == "core" and level == "smoke" and _turn(op) % SMOKE_CORE_SHARE:
                continue
            for dtype in level_dtypes(level, path, op):
                if path in REFERENCE_PATHS and not dtype.is_floating_point:
                    continue
                yield op, dtype, path


def _cases(level: str):
    for op, dtype, path in level_cases(level):
        yield pytest.param((op, dtype, path), id=f"{path}-{harness.opinfo_id(op)}-{str(dtype)[6:]}")


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
    else:
        cases = harness.samples(op, dtype)[:limit]
    failures = []
    for i, sample in enumerate(cases):
        if path in EAGER_PATHS:
            outcome = harness.run_sample_eager(op, sample, dtype, variant=EAGER_PATHS[path])
        else:
            outcome = harness.run_sample(op, sample, dtype, decompose="auto" if path == "reference" else path,
                                         modes=harness.LEVEL_MODES[level])
        OPINFO_RESULTS.record({
            "path": path, "op": harness.opinfo_id(op), "dtype": str(dtype), "sample": i,
            "status": outcome.status, "detail": outcome.detail, "aten": list(outcome.aten_ops),
        })
        if outcome.status in ("failed", "unconvertible"):
            failures.append(Failure(outcome.kind, outcome.detail, f"sample {i}"))
    OPINFO_RESULTS.done(path, harness.opinfo_id(op), str(dtype))
    key, expected = expected_failure(harness.opinfo_id(op), str(dtype), path) or (None, None)
    # Only the full level runs every sample, so only it can tell that a listed case passes.
    judge(key, expected, failures, complete=level == "full")
