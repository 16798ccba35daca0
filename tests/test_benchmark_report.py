"""The benchmarks' shared runner, `_report.measured_apart`: each row measured in a process of its
own, appended to the results file as it comes, stamped, and a worker's failure or timeout kept
as that row's one-line error. Run in a subprocess: importing `_report` pins the process's cores."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

PROGRAM = textwrap.dedent("""
    import json, sys
    sys.path.insert(0, "benchmarks")
    import _report

    results = sys.argv[1]
    worker = [sys.executable, "-c"]
    rows = [
        _report.measured_apart(worker + ["print('warming up'); print('{\\"ms\\": 1.5}')"], {"model": "a", "batch": 1},
                               results),
        _report.measured_apart(worker + ["raise ValueError('no such model')"], {"model": "b", "batch": 1}, results),
        _report.measured_apart(worker + ["import time; time.sleep(30)"], {"model": "c", "batch": 1}, results,
                               timeout=1),
    ]
    print(json.dumps(rows))
""")


def test_each_row_is_measured_apart_and_kept_as_it_comes(tmp_path):
    results = tmp_path / "out" / "rows.jsonl"
    done = subprocess.run([sys.executable, "-c", PROGRAM, str(results), "--cores", "1"], capture_output=True,
                          text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    returned = json.loads(done.stdout.strip().splitlines()[-1])
    written = [json.loads(line) for line in results.read_text().splitlines()]
    assert returned == written
    measured, failed, late = written
    assert {k: measured[k] for k in ("model", "batch", "ms")} == {"model": "a", "batch": 1, "ms": 1.5}
    assert failed["error"] == "ValueError: no such model" and failed["model"] == "b"
    assert late["error"] == "over 1 s" and late["model"] == "c"
    assert all(row["stamp"]["cores"] == [min(os.sched_getaffinity(0))] for row in written)
