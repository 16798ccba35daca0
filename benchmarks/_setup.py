"""What every benchmark needs before JAX and torch start; import it first.

The same cores for every backend. `--cores N` (default 1) or `--cores all` pins the process to
that many of the cores it may use, before any library starts a thread pool, and sizes each
library's pool to match: XLA:CPU sizes its own from the CPU affinity (it reads no thread flag),
PyTorch and onnxruntime are told (`torch.set_num_threads`, `ort_options`). Worker processes a
script starts inherit the affinity. Each backend's CPU time per call is recorded beside its wall
time (`_report.interleaved`), so a backend that used more than its share shows itself.

Also: Hugging Face offline and quiet, warnings and exporter logs off, and the repository root
on `sys.path` so the scripts can build the test zoo's models.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import warnings


def add_cores_argument(parser: argparse.ArgumentParser) -> None:
    """Let a script's own parser accept (and document) `--cores`, which this module has applied."""
    parser.add_argument("--cores", default="1",
                        help="pin every backend to this many cores, or 'all' (default 1)")


def parser(doc: str, runs: int) -> argparse.ArgumentParser:
    """A script's parser with the options every benchmark takes: `--runs` (calls timed per
    backend, default `runs`), `--markdown` and `--cores`; described by `doc`'s first line."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0] if doc else None)
    parser.add_argument("--runs", type=int, default=runs)
    parser.add_argument("--markdown", help="also write the table here")
    add_cores_argument(parser)
    return parser


def _pin() -> list[int]:
    parser = argparse.ArgumentParser(add_help=False)
    add_cores_argument(parser)
    value = parser.parse_known_args()[0].cores
    allowed = sorted(os.sched_getaffinity(0))
    count = len(allowed) if value == "all" else int(value)
    if not 1 <= count <= len(allowed):
        sys.exit(f"--cores {value}: this process may use {len(allowed)} cores ({allowed})")
    os.sched_setaffinity(0, allowed[:count])
    return allowed[:count]


#: The cores every backend runs on, and so the threads each library gets.
CORES = _pin()
THREADS = len(CORES)

os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import torch  # noqa: E402

torch.set_num_threads(THREADS)
torch.set_num_interop_threads(THREADS)
warnings.filterwarnings("ignore")
logging.disable(logging.WARNING)


def ort_options():
    """onnxruntime session options giving it the same threads as the other backends."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = THREADS
    options.inter_op_num_threads = 1
    return options


def settings() -> dict:
    """The resources each backend was given, for a result's stamp."""
    return {"cores": CORES, "torch_threads": torch.get_num_threads(), "onnxruntime_intra_op_threads": THREADS,
            "xla_cpu_threads": "from the affinity"}
