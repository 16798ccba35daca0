"""The dated, machine-stamped table every benchmark script prints (and writes for the README)."""

from __future__ import annotations

import datetime
import os
import platform

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
