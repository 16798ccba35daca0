"""Test configuration: x64 and strict promotion for op tests, and OpInfo result collection."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=1")


def pytest_addoption(parser):
    parser.addoption("--opinfo", default=os.environ.get("JAXPORT_OPINFO", "smoke"),
                     choices=["smoke", "full"], help="OpInfo sweep size (default: smoke)")
    parser.addoption("--opinfo-report", default=os.environ.get("JAXPORT_OPINFO_REPORT"),
                     help="write per-sample OpInfo results as JSON to this path")


#: (path, opinfo id, dtype, sample index, status, detail, aten ops) rows gathered by test_opinfo.
OPINFO_RESULTS: list[dict] = []


def pytest_sessionfinish(session, exitstatus):
    path = session.config.getoption("--opinfo-report")
    if path and OPINFO_RESULTS:
        # Under pytest-xdist each worker writes its own part; the report merges `path*`.
        worker = getattr(session.config, "workerinput", {}).get("workerid")
        target = Path(f"{path}.{worker}" if worker else path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(OPINFO_RESULTS, indent=0))


@pytest.fixture
def x64_strict():
    """Exact 64-bit dtypes and JAX's strict promotion, so a silent promotion in a lowering fails."""
    import jax

    old_x64 = jax.config.jax_enable_x64
    old_promotion = jax.config.jax_numpy_dtype_promotion
    jax.config.update("jax_enable_x64", True)
    jax.config.update("jax_numpy_dtype_promotion", "strict")
    yield
    jax.config.update("jax_enable_x64", old_x64)
    jax.config.update("jax_numpy_dtype_promotion", old_promotion)
