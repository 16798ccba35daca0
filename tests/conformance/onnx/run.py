"""Run ONNX conformance cases by op, for quick loops while writing lowerings:

    python -m tests.conformance.onnx.run Reshape Slice [--case test_slice_neg] [-v]

Prints each case's outcome (x64 and strict promotion on, as in the test suite), the kind of
each failure, and the expected-failure entry if one matches: XFAIL only when the failure has
the entry's stated cause.
"""

from __future__ import annotations

import argparse
import traceback

import jax

from tests.conformance.onnx import conformance
from tests.conformance.onnx.expected_failures import expected_failure


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("ops", nargs="*", help="op types (as in ONNX: Reshape)")
    parser.add_argument("--case", action="append", default=[], help="a case name (repeatable)")
    parser.add_argument("-v", action="store_true", help="print tracebacks")
    opts = parser.parse_args()
    jax.config.update("jax_enable_x64", True)
    jax.config.update("jax_numpy_dtype_promotion", "strict")
    cases = conformance.node_cases()
    chosen = [n for n, c in sorted(cases.items())
              if n in opts.case or conformance.op_under_test(c) in opts.ops]
    passed = 0
    for name in chosen:
        key, expected = expected_failure(name) or (None, None)
        try:
            mode = conformance.run_case(cases[name])
            passed += 1
            print(f"PASS  {name} ({mode})" + (f"  [listed as xfail: {expected.reason}]" if expected else ""))
        except Exception as e:  # noqa: BLE001
            failure = conformance.failure(e)
            line = " ".join(failure.detail.split())[:300]
            if expected is None:
                print(f"FAIL  {name}: [{failure.kind}] {line}")
            elif expected.explains(failure):
                print(f"XFAIL {name}: [{failure.kind}] {line}\n      {expected.reason}")
            else:
                print(f"FAIL  {name}: [{failure.kind}] {line}\n      listed as {key}, but expected to fail "
                      f"with {expected.cause}: {expected.reason}")
            if opts.v:
                traceback.print_exc()
    print(f"{passed}/{len(chosen)} passed")


if __name__ == "__main__":
    main()
