"""`make gpu-check`'s script in its `--device cpu --small` form: every section runs and every parity
check passes, so the script a GPU session runs cannot rot where no GPU is."""

from __future__ import annotations

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_gpu_check_runs_on_the_cpu(tmp_path):
    results = tmp_path / "rows.jsonl"
    done = subprocess.run(
        [sys.executable, os.path.join(ROOT, "benchmarks", "gpu_check.py"), "--device", "cpu", "--small",
         "--cores", "1", "--results", str(results)],
        capture_output=True, text=True, timeout=600, cwd=ROOT,
        env={**os.environ, "JAXPORT_CACHE_DIR": str(tmp_path / "xla")})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = [json.loads(line) for line in results.read_text().splitlines()]
    parity = [row for row in rows if row["section"] == "parity"]
    assert {row["check"] for row in parity} == {"module", "pt2", "compile", "causal_lm", "policy", "verify", "eager"}
    assert all(row["passed"] for row in parity), [row for row in parity if not row["passed"]]
    forward = [row for row in rows if row["section"] == "forward"]
    assert forward and all(set(row["ms"]) == {"eager", "jaxport", "frozen", "compile"} for row in forward)
    decode = [row for row in rows if row["section"] == "decode"]
    assert [row["batch"] for row in decode] == [1, 2] and all(row["tok_s"]["jaxport"] > 0 for row in decode)
    assert all(row["stamp"]["commit"] for row in rows)
