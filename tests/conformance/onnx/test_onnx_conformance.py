"""ONNX's node conformance suite: every case `onnx.backend.test.case.node` ships, through
`jaxport.from_onnx`, compared with the expected outputs at each case's tolerance.

`make onnx-report` runs it and regenerates docs/onnx-conformance.md from the results.
"""

from __future__ import annotations

import pytest

from tests.conformance.onnx import conformance
from tests.conformance.onnx.expected_failures import expected_failure
from tests.conftest import ONNX_RESULTS


def pytest_generate_tests(metafunc):
    if "onnx_case" in metafunc.fixturenames:
        metafunc.parametrize("onnx_case", sorted(conformance.node_cases()))


@pytest.mark.usefixtures("x64_strict")
def test_onnx_node(onnx_case):
    case = conformance.node_cases()[onnx_case]
    op = conformance.op_under_test(case)
    reason = expected_failure(onnx_case)
    try:
        mode = conformance.run_case(case)
    except Exception as e:  # noqa: BLE001 - every failure is recorded, then judged below
        detail = f"{type(e).__name__}: {e}".strip().splitlines()
        detail = " ".join(line.strip() for line in detail if line.strip())[:400]
        ONNX_RESULTS.record({"case": onnx_case, "op": op, "status": "xfailed" if reason else "failed",
                             "detail": reason or detail})
        if reason:
            pytest.xfail(reason)
        raise
    ONNX_RESULTS.record({"case": onnx_case, "op": op, "status": "passed", "detail": mode})
    if reason:
        pytest.fail(f"listed as an expected failure ({reason}) but passes: remove the entry")
