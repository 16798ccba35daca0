"""The dated, machine-stamped table every benchmark script prints (and writes for the README)."""

from __future__ import annotations

import datetime
import os
import platform
import statistics
import time
from collections.abc import Callable

import jax
import torch


def publish(table: str, runs: int, markdown: str | None, timing: str = "") -> None:
    """Print `table` under a line saying when, where and how it was measured; also write it to
    `markdown` if given."""
    header = (
        f"{datetime.date.today()}, {platform.machine()} {os.cpu_count()} cores, one thread each; "
        f"torch {torch.__version__}, jax {jax.__version__}; {timing or f'median of {runs} runs'}"
    )
    text = header + "\n\n" + table + "\n"
    print()
    print(text)
    if markdown:
        with open(markdown, "w") as f:
            f.write(text)


def interleaved_medians(fns: list[Callable[[], object]], runs: int, block: int = 10) -> list[float]:
    """Median seconds of a call of each of `fns`: `runs` calls each after a warm-up call, made
    in blocks of `block` calls that take turns. Taking turns puts every side of a comparison
    in the same moments of a shared machine, whose speed drifts by 20% between back-to-back
    medians here; blocks keep each side's caches warm, as back-to-back calls would."""
    for fn in fns:
        fn()
    times: list[list[float]] = [[] for _ in fns]
    while len(times[0]) < runs:
        for fn, spent in zip(fns, times):
            for _ in range(min(block, runs - len(spent))):
                start = time.perf_counter()
                fn()
                spent.append(time.perf_counter() - start)
    return [statistics.median(t) for t in times]
