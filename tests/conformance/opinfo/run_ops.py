"""Run the OpInfo conformance for a few ops from the command line, printing failures.

    python -m tests.conformance.opinfo.run_ops add mul --dtypes float32,int64 --samples 3 [--path core]

A quick loop for developing lowerings; the test suite is tests/conformance/opinfo/test_opinfo.py.
For a listed case it prints the expected-failure entry and marks each failure that has the
entry's stated cause "[expected]", any other "[<kind>: not the stated cause]".
"""

from __future__ import annotations

import argparse
import collections
import time

import jax
import torch

from tests.conformance.expectations import Failure
from tests.conformance.opinfo import harness
from tests.conformance.opinfo.expected_failures import expected_failure


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("ops", nargs="+", help="OpInfo ids (name or name.variant); a trailing * matches a prefix")
    parser.add_argument("--dtypes", default="", help="comma-separated, e.g. float32,int64 (default: all supported)")
    parser.add_argument("--samples", type=int, default=0, help="at most this many samples per dtype")
    parser.add_argument("--path", default="auto", choices=["auto", "core"])
    parser.add_argument("-v", "--verbose", action="store_true")
    opts = parser.parse_args()
    jax.config.update("jax_enable_x64", True)
    jax.config.update("jax_numpy_dtype_promotion", "strict")
    wanted = [getattr(torch, d) for d in opts.dtypes.split(",") if d]
    db = {harness.opinfo_id(op): op for op in harness.op_db()}
    names = []
    for pattern in opts.ops:
        if pattern.endswith("*"):
            names += [n for n in db if n.startswith(pattern[:-1])]
        elif pattern in db:
            names.append(pattern)
        else:
            print(f"no OpInfo named {pattern}")
    total = collections.Counter()
    for name in names:
        op = db[name]
        for dtype in harness.tested_dtypes(op):
            if wanted and dtype not in wanted:
                continue
            start = time.perf_counter()
            counts = collections.Counter()
            details = []
            samples = harness.samples(op, dtype, opts.samples or None)
            key, expected = expected_failure(name, str(dtype), opts.path) or (None, None)
            for i, sample in enumerate(samples):
                outcome = harness.run_sample(op, sample, dtype, decompose=opts.path, layout=harness.layout(op))
                counts[outcome.status] += 1
                if outcome.status != "passed":
                    line = f"    [{i}] {outcome.status}: {outcome.detail}"
                    if expected and outcome.status in ("failed", "unconvertible"):
                        explained = expected.explains(Failure(outcome.kind, outcome.detail, f"sample {i}", outcome.operands))
                        line += " [expected]" if explained else f" [{outcome.kind}: not the stated cause]"
                    details.append(line)
            total.update(counts)
            print(f"{name:40s} {str(dtype)[6:]:9s} {dict(counts)} {time.perf_counter() - start:.1f}s")
            if expected:
                print(f"    listed as {key}: fails with {expected.cause}; {expected.reason}")
            for line in details[: None if opts.verbose else 3]:
                print(line)
    print("total", dict(total))


if __name__ == "__main__":
    main()
