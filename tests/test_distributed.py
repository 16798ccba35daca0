"""Two processes, one mesh: multi-process training gives the single-process losses.

Two processes on 127.0.0.1 (two CPU devices each, gloo collectives) train the tiny GPT-2
with FSDP + tensor parallelism over a data=2 x model=2 mesh, each starting from its saved
checkpoint, read onto the mesh (each process reads only its own devices' slices), and feeding
its own half of every batch; a third process trains the same model alone on one device on the
whole batches. Both processes must report the reference losses.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from tests.distributed.gpt2 import tiny_gpt2

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = [sys.executable, "-m", "tests.distributed.train_gpt2", "--steps", "3"]
TIMEOUT = 300  # seconds for all three processes together


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env() -> dict:
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    # No proxies: the processes talk to each other on 127.0.0.1 only.
    env = {k: v for k, v in os.environ.items() if k.lower() not in ("http_proxy", "https_proxy", "grpc_proxy")}
    return {**env, "PYTHONPATH": path, "JAX_PLATFORMS": "cpu"}


def _start(args: list[str]) -> subprocess.Popen:
    return subprocess.Popen([*SCRIPT, *args], cwd=ROOT, env=_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)


def _result(proc: subprocess.Popen, what: str, deadline: float) -> dict:
    out, err = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
    if proc.returncode:
        pytest.fail(f"{what} exited with {proc.returncode}:\n{err[-6000:]}")
    return json.loads(out.strip().splitlines()[-1])


def test_two_processes_train_like_one(tmp_path):
    tiny_gpt2().save_pretrained(tmp_path / "checkpoint", max_shard_size="20KB")
    port = _free_port()
    common = ["--coordinator", f"127.0.0.1:{port}", "--num-processes", "2", "--local-devices", "2",
              "--mesh", "data=2,model=2", "--rules", "fsdp+tp", "--checkpoint", str(tmp_path / "checkpoint")]
    procs = []
    try:
        procs = [_start([*common, "--process-id", str(i)]) for i in range(2)]
        procs.append(_start([]))  # the reference: one process, one device, whole batches
        deadline = time.monotonic() + TIMEOUT
        workers = [_result(p, f"process {i}", deadline) for i, p in enumerate(procs[:2])]
        reference = _result(procs[2], "the single-process reference", deadline)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            proc.communicate()

    assert reference["devices"] == 1 and reference["sharded"] == {}
    for i, run in enumerate(workers):
        assert (run["process"], run["processes"], run["devices"]) == (i, 2, 4)
        assert run["rows"] == [4 * i, 4 * i + 4], "each process feeds its own half of the batch"
        assert not run["fully_addressable"], "the parameters live across both processes"
        assert run["sharded"]["transformer.h.0.attn.c_attn.weight"] == "P('data', 'model')"
        assert run["sharded"]["transformer.h.0.mlp.c_proj.weight"] == "P('model', 'data')"
        np.testing.assert_allclose(run["losses"], reference["losses"], rtol=1e-5)
        # its own devices' slices only: half the sharded weights, all of the few replicated ones
        assert 0 < run["elements_read"] < 0.7 * run["elements"], run
    assert workers[0]["losses"] == workers[1]["losses"]
