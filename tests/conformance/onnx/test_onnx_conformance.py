"""ONNX's node conformance suite: every case `onnx.backend.test.case.node` ships, through
`jaxport.from_onnx`, compared with the expected outputs at each case's tolerance.

The cases ONNX names `*_expanded*` (480: an op's function body, its primitive ops spelled out, each
of which has cases of its own) are `slow`: `make test-slow` and `make onnx-report` run them.

A case listed in `tests/conformance/onnx/xfails/<family>.py` xfails only when it fails with the
entry's stated cause (`conformance.failure` tells a mismatch, missing ops and errors apart).
`make onnx-report` runs it and regenerates docs/onnx-conformance.md from the results.
"""

from __future__ import annotations

import pytest

from tests.conformance.expectations import judge
from tests.conformance.onnx import conformance
from tests.conformance.onnx.expected_failures import expected_failure
from tests.conftest import ONNX_RESULTS


def pytest_generate_tests(metafunc):
    if "onnx_case" in metafunc.fixturenames:
        metafunc.parametrize("onnx_case", [
            pytest.param(name, id=name, marks=[pytest.mark.slow] if "_expanded" in name else [])
            for name in sorted(conformance.node_cases())])


@pytest.mark.usefixtures("x64_strict")
def test_onnx_node(onnx_case):
    case = conformance.node_cases()[onnx_case]
    op = conformance.op_under_test(case)
    key, expected = expected_failure(onnx_case) or (None, None)
    try:
        mode = conformance.run_case(case)
    except Exception as e:  # noqa: BLE001 - every failure is recorded, then judged below
        failure = conformance.failure(e)
        explained = expected is not None and expected.explains(failure)
        detail = expected.reason if explained else failure.detail + (
            f" (listed as {key}, expected to fail with {expected.cause})" if expected else "")
        ONNX_RESULTS.record({"case": onnx_case, "op": op, "status": "xfailed" if explained else "failed",
                             "detail": detail})
        if expected is None:
            raise
        judge(key, expected, [failure])  # xfails, or fails naming the entry's cause and this one
    ONNX_RESULTS.record({"case": onnx_case, "op": op, "status": "passed", "detail": mode})
    judge(key, expected, [])  # fails if the case is listed
