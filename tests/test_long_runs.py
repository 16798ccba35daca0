"""Long runs in short form (`benchmarks/bench_long_runs.py --short`): a converted model called
1,000 times, 200 `generate` calls, 200 eager training steps and 100 `generate` calls each with
new sampling settings, each in a process of its own, compile nothing after their warm-up and
keep resident memory flat."""

from __future__ import annotations

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: Resident memory a run may gain after its warm-up, MiB: 20 MiB over 180 generate calls would
#: be 110 KiB a call, which a leak of one cache or one prompt per call exceeds.
GROWTH_MIB = 20


def test_long_runs_stay_flat(tmp_path):
    results = tmp_path / "rows.jsonl"
    done = subprocess.run(
        [sys.executable, os.path.join(ROOT, "benchmarks", "bench_long_runs.py"), "--short", "--cores", "1",
         "--results", str(results)],
        capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    rows = {row["run"]: row for row in map(json.loads, results.read_text().splitlines())}
    assert set(rows) == {"generate", "model", "eager_training", "settings"}
    for name, row in rows.items():
        assert row["compilations"]["warmup"] > 0, name  # the count sees compilations at all
        assert row["compilations"]["after_warmup"] == 0, row
        assert row["rss_growth_mib"] <= GROWTH_MIB, row
