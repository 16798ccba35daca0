"""OpInfo conformance: PyTorch's own op database, through torch.export -> jaxport vs PyTorch eager.

`pytest tests/test_opinfo.py --opinfo=full --opinfo-report=...` runs every
sample; the default smoke level runs a fixed, representative subset.
See docs/opinfo.md (generated) for the full results.
"""

from __future__ import annotations

import os

import pytest
import torch

from tests.conftest import OPINFO_RESULTS
from tests.opinfo import harness
from tests.opinfo.expected_failures import expected_failure

#: The smoke level (CI): per conversion path, these dtypes and at most this many samples each.
#: The core path re-decomposes every sample with run_decompositions (~0.2 s each), so it is lighter.
SMOKE = {
    "auto": ((torch.float32, torch.int64, torch.bool, torch.float16), 2),
    "core": ((torch.float32,), 1),
}
PATHS = os.environ.get("JAXPORT_OPINFO_PATHS", "auto,core").split(",")


def _cases(level: str):
    for path in PATHS:
        for op in harness.op_db():
            for dtype in harness.tested_dtypes(op):
                if level == "smoke" and dtype not in SMOKE[path][0]:
                    continue
                yield pytest.param((op, dtype, path), id=f"{path}-{harness.opinfo_id(op)}-{str(dtype)[6:]}")


def pytest_generate_tests(metafunc):
    if "opinfo_case" in metafunc.fixturenames:
        level = metafunc.config.getoption("--opinfo")
        metafunc.parametrize("opinfo_case", list(_cases(level)))


@pytest.mark.usefixtures("x64_strict")
def test_opinfo(opinfo_case, request):
    op, dtype, path = opinfo_case
    level = request.config.getoption("--opinfo")
    cases = harness.samples(op, dtype)
    if level == "smoke":
        cases = cases[: SMOKE[path][1]]
    failures = []
    for i, sample in enumerate(cases):
        outcome = harness.run_sample(op, sample, dtype, decompose=path)
        OPINFO_RESULTS.append({
            "path": path, "op": harness.opinfo_id(op), "dtype": str(dtype), "sample": i,
            "status": outcome.status, "detail": outcome.detail, "aten": list(outcome.aten_ops),
        })
        if outcome.status in ("failed", "unconvertible"):
            failures.append(f"sample {i}: {outcome.detail}")
    reason = expected_failure(harness.opinfo_id(op), str(dtype), path)
    if reason and failures:
        pytest.xfail(reason)
    if reason and not failures and level == "full":  # the smoke level runs only some samples
        pytest.fail(f"listed as an expected failure ({reason}) but every sample passes: remove the entry")
    assert not failures, "\n".join(failures[:5])
