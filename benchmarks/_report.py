"""Timing on equal terms and the provenance every result carries.

`interleaved` times several backends in turns, wall and CPU time per call; `stamp` says which
commit, date, machine, library versions and thread settings a result comes from; `measured_apart`
runs one row's measurement in a process of its own and appends the row to the results file;
`publish` prints a table under the stamps of the rows it was made from.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import importlib.metadata
import json
import os
import platform
import re
import statistics
import subprocess
import time
from collections.abc import Callable, Iterable

import _setup

ROOT = os.path.join(os.path.dirname(__file__), "..")
#: The libraries whose versions a result depends on (those installed).
LIBRARIES = ("torch", "jax", "jaxlib", "onnxruntime", "transformers", "numpy")


@dataclasses.dataclass(frozen=True)
class Timing:
    """Median seconds per call, of the wall clock and of the process's CPU time (all its threads).
    `cpus` is how many cores the call kept busy: above the cores it was given means it was not
    confined to them, far below means it left them idle."""

    wall_s: float
    cpu_s: float

    @property
    def cpus(self) -> float:
        return self.cpu_s / self.wall_s


def interleaved(fns: list[Callable[[], object]], runs: int, block: int = 10) -> list[Timing]:
    """Time each of `fns`: `runs` calls each after a warm-up call, in blocks of `block` calls
    that take turns. Taking turns puts every side of a comparison in the same moments of a
    shared machine, whose speed drifts by 20% between back-to-back medians here; blocks keep
    each side's caches warm, as back-to-back calls would."""
    for fn in fns:
        fn()
    walls: list[list[float]] = [[] for _ in fns]
    cpus: list[list[float]] = [[] for _ in fns]
    while len(walls[0]) < runs:
        for fn, wall, cpu in zip(fns, walls, cpus):
            for _ in range(min(block, runs - len(wall))):
                start, start_cpu = time.perf_counter(), time.process_time()
                fn()
                cpu.append(time.process_time() - start_cpu)
                wall.append(time.perf_counter() - start)
    return [Timing(statistics.median(w), statistics.median(c)) for w, c in zip(walls, cpus)]


@functools.cache
def _commit() -> str:
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True).stdout.strip()

    commit = git("rev-parse", "--short=10", "HEAD") or "unknown"
    # The results files are not code: a run appending its rows must not mark its own later rows dirty.
    changed = git("status", "--porcelain", "--untracked-files=no", "src", "benchmarks", ":!benchmarks/results")
    return commit + ("+dirty" if changed else "")


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def stamp() -> dict:
    """Where a result comes from: commit (+dirty when src/ or benchmarks/ had changes), date,
    machine, library versions, and the cores and threads each backend was given."""
    versions = {}
    for name in LIBRARIES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            pass
    flags = {"xla_flags": os.environ["XLA_FLAGS"]} if os.environ.get("XLA_FLAGS") else {}
    return {"commit": _commit(), "date": datetime.date.today().isoformat(),
            "machine": f"{platform.machine()} {_cpu_model()}, {os.cpu_count()} cores",
            "versions": versions, **flags, **_setup.settings()}


def measured_apart(command: list[str], identity: dict, results: str, timeout: float | None = None,
                   env: dict | None = None) -> dict:
    """The row a worker (`command`: a benchmark script with its `--worker` arguments) prints as
    its last line of JSON, measured in a process of its own so that compiled programs and caches
    do not pile up from one row to the next, with the fields of `identity` (which row it is). A
    worker that fails, or runs past `timeout` seconds, gives `identity` with the error. The row is
    stamped (`stamp()` where the worker did not) and appended to the `results` file as it comes,
    so a long run keeps what it measured."""
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env)
        lines = done.stdout.strip().splitlines()
        row = {**identity, **json.loads(lines[-1])} if done.returncode == 0 and lines else {
            **identity, "error": _last_error(done.stderr)}
    except subprocess.TimeoutExpired:
        row = {**identity, "error": f"over {timeout:.0f} s"}
    row.setdefault("stamp", stamp())
    os.makedirs(os.path.dirname(results) or ".", exist_ok=True)
    with open(results, "a") as f:
        f.write(json.dumps(row) + "\n")
    return row


def _last_error(stderr: str) -> str:
    """The exception line of a worker's traceback (not JAX's note on filtered frames after it)."""
    lines = stderr.strip().splitlines() or ["no output"]
    errors = [line for line in lines if re.match(r"[\w.]+(Error|Exception|Exit)\b", line)]
    return (errors or lines)[-1][:200]


def describe(stamps: Iterable[dict]) -> str:
    """One line naming what a set of result rows was measured on (each fact once, several where
    the rows differ, so a table mixing commits or settings says so)."""
    stamps = list(stamps)

    def values(key: str, fmt=str) -> str:
        seen = list(dict.fromkeys(fmt(s[key]) for s in stamps if key in s))
        return " and ".join(seen) if seen else "?"

    cores = values("cores", lambda c: f"{len(c)} core{'s' * (len(c) > 1)} each (cpus {','.join(map(str, c))})")
    versions = values("versions", lambda v: ", ".join(f"{k} {v[k]}" for k in sorted(v)))
    # a process-wide XLA_FLAGS changes every XLA program, so a row measured under one says so
    flags = "; XLA_FLAGS " + " and ".join(sorted({s.get("xla_flags") or "unset" for s in stamps})) \
        if any(s.get("xla_flags") for s in stamps) else ""
    return (f"Measured {values('date')} at commit {values('commit')}; {values('machine')}; {cores}, "
            f"torch and onnxruntime threads to match, XLA sized by the affinity; {versions}{flags}")


def publish(table: str, markdown: str | None, timing: str, stamps: Iterable[dict] | None = None) -> None:
    """Print `table` under the line describing `stamps` (default: this run) and how it was
    timed; also write it to `markdown` if given."""
    text = f"{describe(stamps or [stamp()])}; {timing}\n\n{table}\n"
    print()
    print(text)
    if markdown:
        os.makedirs(os.path.dirname(markdown) or ".", exist_ok=True)
        with open(markdown, "w") as f:
            f.write(text)
