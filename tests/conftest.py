"""Test configuration: x64 and strict promotion for op tests, and OpInfo result collection."""

from __future__ import annotations

import glob
import gzip
import json
import os
import shutil
import tempfile
import zlib
from pathlib import Path

import numpy as np
import pytest

# JAX's compilation cache (which importing jaxport turns on) in a directory of this run's own,
# not the user's ~/.cache: the suite does not depend on what an earlier run left there. xdist's
# workers inherit it from the controller, which removes it at the end.
_RUN_CACHE = None if "JAXPORT_CACHE_DIR" in os.environ else tempfile.mkdtemp(prefix="jaxport-test-xla-")
if _RUN_CACHE is not None:
    os.environ["JAXPORT_CACHE_DIR"] = _RUN_CACHE


def pytest_addoption(parser):
    parser.addoption("--opinfo", default=os.environ.get("JAXPORT_OPINFO", "smoke"),
                     choices=["smoke", "standard", "wide", "full"], help="OpInfo sweep size (default: smoke)")
    parser.addoption("--opinfo-report", default=os.environ.get("JAXPORT_OPINFO_REPORT"),
                     help="write per-sample OpInfo results as JSON to this path")
    parser.addoption("--opinfo-resume", action="store_true",
                     help="skip OpInfo cases the --opinfo-report files already hold (long runs in parts)")
    parser.addoption("--onnx-report", default=os.environ.get("JAXPORT_ONNX_REPORT"),
                     help="write per-case ONNX conformance results as JSON lines to this path")


class ResultRecorder:
    """Appends one JSON line per result to the file its option names (one file per xdist
    worker), so even an interrupted run leaves its results. For OpInfo, a line
    {"done": [path, op, dtype]} closes each case, which `--opinfo-resume` then skips (read from
    every file whose name starts with the report path, gzipped archives of earlier runs too)."""

    def __init__(self, option: str):
        self.option = option
        self.path: Path | None = None
        self.finished: set[tuple[str, str, str]] = set()

    def configure(self, config) -> None:
        path = config.getoption(self.option)
        if path:
            worker = getattr(config, "workerinput", {}).get("workerid")
            self.path = Path(f"{path}.{worker}" if worker else path)
            self.path.parent.mkdir(parents=True, exist_ok=True)
            if self.option == "--opinfo-report" and config.getoption("--opinfo-resume"):
                for part in glob.glob(path + "*"):
                    with (gzip.open if part.endswith(".gz") else open)(part, "rt") as f:
                        self.finished |= {tuple(row["done"]) for row in map(json.loads, f) if "done" in row}

    def record(self, row: dict) -> None:
        if self.path is not None:
            with self.path.open("a") as f:
                f.write(json.dumps(row) + "\n")

    def done(self, path: str, op: str, dtype: str) -> None:
        self.record({"done": [path, op, dtype]})


OPINFO_RESULTS = ResultRecorder("--opinfo-report")
ONNX_RESULTS = ResultRecorder("--onnx-report")


def pytest_configure(config):
    OPINFO_RESULTS.configure(config)
    ONNX_RESULTS.configure(config)


def pytest_unconfigure(config):
    if _RUN_CACHE is not None and not hasattr(config, "workerinput"):
        shutil.rmtree(_RUN_CACHE, ignore_errors=True)


@pytest.fixture(autouse=True)
def _torch_seeded_from_test_id(request):
    """PyTorch's global generator seeded from the test's own id: a test that draws with
    `torch.randn` (or builds a module with random weights) gets the same numbers in any order, on
    any worker, in every run, so a result near a tolerance cannot pass once and fail the next."""
    import torch

    torch.manual_seed(zlib.crc32(request.node.nodeid.encode()))


@pytest.fixture
def rng(request) -> np.random.Generator:
    """A NumPy generator seeded from the test's own id, so its inputs do not depend on which tests
    ran before it on the same worker (pytest-randomly shuffles the order on every run)."""
    return np.random.default_rng(zlib.crc32(request.node.nodeid.encode()))


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
