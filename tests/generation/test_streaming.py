"""Streaming that stops early, and generation from many threads (issue 42).

Ending a stream early (break, `close()`, an exception in the consumer, the generator collected, a
KeyboardInterrupt from a streamer or from SIGINT) runs in a process of its own
(`stream_scenarios.py`): the process must exit cleanly (status 0, no "terminate called" or
"Fatal Python error": what an exception thrown through XLA's callback machinery, or a callback
running at interpreter exit, gives), the loop must stop within one decode step of the
cancellation, and a second stream and a `generate` in the same process must give transformers'
tokens. In this process: the stop measured step by step, the runner thread and the device buffers
released, eight threads generating and streaming at once, and what is refused.
"""

from __future__ import annotations

import gc
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import jax
import numpy as np
import pytest

import jaxport
from jaxport.generation import causal_lm, streaming
from tests.generation.test_generation import hf_generate, prompts, tiny_model

ROOT = Path(__file__).resolve().parents[2]
FATAL = ("terminate called", "Fatal Python error", "FATAL: exception not rethrown", "Segmentation fault")


def scenarios(*names: str) -> tuple[dict, str]:
    """Run `stream_scenarios.py` with `names` in a fresh process: (its report per scenario, its
    stderr), after checking that it exited cleanly. Each time it says "ready" (a SIGINT
    scenario's loop runs) it gets a SIGINT."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
           "JAX_PLATFORMS": "cpu"}
    proc = subprocess.Popen([sys.executable, "-m", "tests.generation.stream_scenarios", *names], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    timer = threading.Timer(400, proc.kill)  # a hang fails the test instead of blocking it
    timer.start()
    try:
        lines = []
        for line in proc.stdout:
            lines.append(line)
            if line.strip() == "ready":
                time.sleep(0.5)  # well inside its loop of calls
                proc.send_signal(signal.SIGINT)
        err = proc.stderr.read()
        proc.wait()
    finally:
        timer.cancel()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, f"exit status {proc.returncode}: {err[-3000:]}"
    assert not any(fatal in err for fatal in FATAL), err[-3000:]
    return json.loads(lines[-1]), err


def test_streams_stopped_early_release_everything_and_the_process_exits_cleanly():
    """In one process, in turn: the consumer breaks, calls `close()`, raises, or drops the
    generator (collected by the cyclic collector) after 2-3 of 150 steps (each slowed to 10 ms, so
    the loop is still running), and a streamer's `put` raises KeyboardInterrupt on its third call
    (the prompt, two steps). Each time the loop stops: at most one decode step's callback runs
    after the cancellation (none after the raising `put`); the runner thread, the registration
    and the device buffers are released; the KeyboardInterrupt is raised in the caller and
    `end()` not called; then a stream and a generate give transformers' tokens. Last, a
    `generate(streamer=)` in a daemon thread and a suspended `stream` held in a global are left
    running: interpreter exit stops them (the daemon thread's call fails with the cancellation)
    and the process exits with status 0, nothing fatal on stderr."""
    closed = ("break", "close", "raise", "collect")
    reports, err = scenarios(*closed, "put_interrupt", "exit_running")
    for name in closed:
        report = reports[name]
        assert report["steps_run"] < 10, (name, report)  # of 150: stopped, not run to the end
        assert report["after_cancel"] <= 1, (name, report)
        assert report["live"] == 0 and report["runners"] == 0 and report["arrays_released"], (name, report)
        assert report["second"] and report["generate"], (name, report)
    report = reports["put_interrupt"]
    assert report["raised"] and report["puts"] == 3 and not report["ended"], report
    assert report["steps_run"] == 2, report
    assert report["live"] == 0 and report["runners"] == 0 and report["arrays_released"], report
    assert report["second"] and report["generate"], report
    assert reports["exit_running"] == {"live": 2, "runners": 2}
    assert "generation was cancelled before it finished (the interpreter is exiting)" in err


def test_sigint_while_generating_leaves_the_model_usable():
    """SIGINT lands wherever a loop of `stream`, `generate(streamer=)` or `generate` calls happens
    to be, each in turn in one process: a KeyboardInterrupt, the model's tokens transformers'
    afterwards, and a clean exit. (Plain `generate` has no callback to stop its loop: the
    interrupt arrives when the loop ends.)"""
    reports, _ = scenarios("sigint_stream", "sigint_streamer", "sigint_generate")
    for name, report in reports.items():
        assert report["interrupted"], (name, report)
        assert report["after_cancel"] <= 1, (name, report)
        assert report["live"] == 0 and report["runners"] == 0, (name, report)
        assert report["second"] and report["generate"], (name, report)


# -- in this process --------------------------------------------------------------------------

NEW = 40


@pytest.fixture(scope="module")
def llama():
    """A tiny Llama converted for a batch of 3 and 40 new tokens, with its transformers tokens."""
    model = tiny_model("llama", seed=21)
    ids, mask = prompts()
    lm = jaxport.from_causal_lm(model, max_length=7 + NEW, max_batch=3)
    return model, lm


def stream_runners() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("jaxport-stream")]


def test_closing_stops_within_one_decode_step(llama, monkeypatch):
    """Step by step: after `close()` one callback at most runs (the decode step in flight when
    the flag was set, which answers "stop"); close() returns with the runner joined."""
    _, lm = llama
    ids, mask = prompts()
    seen: list[bool] = []
    emit = causal_lm.emit_to_host

    def slowed(stream_id, tokens):
        stream = streaming._LIVE.get(int(stream_id))
        seen.append(bool(stream is not None and stream.cancelled.is_set()))
        time.sleep(0.02)  # 40 steps take 0.8 s: the consumer stops it long before
        return emit(stream_id, tokens)

    monkeypatch.setattr(causal_lm, "emit_to_host", slowed)
    settings = dict(max_new_tokens=NEW - 1, pad_token_id=0)  # a loop of its own, traced with `slowed`
    steps = lm.stream(ids, mask, **settings)
    next(steps)
    steps.close()
    assert seen.count(True) <= 1 and len(seen) < NEW // 2
    assert not stream_runners() and streaming.live() == 0
    # a closed stream does not yield again; a new one runs from the start
    assert next(steps, None) is None
    assert len(list(lm.stream(ids, mask, **settings))) > 0


def test_stream_releases_its_thread_and_buffers(llama):
    _, lm = llama
    ids, mask = prompts()
    list(lm.stream(ids, mask, max_new_tokens=NEW, pad_token_id=0))  # compiled
    gc.collect()
    arrays = len(jax.live_arrays())
    steps = lm.stream(ids, mask, max_new_tokens=NEW, pad_token_id=0)
    first = next(steps)
    assert stream_runners()
    del steps, first
    gc.collect()
    assert not stream_runners() and streaming.live() == 0
    assert len(jax.live_arrays()) == arrays


def test_eight_threads_generate_and_stream_at_once(llama):
    """Eight threads at once on one model (its loops not yet compiled, so they also trace and
    compile concurrently): greedy and sampled `generate`, `generate(streamer=)` and `stream`,
    different prompts, some with the same settings. Each gets what it gets alone; none waits for
    the others to finish (a deadlock would fail the timeout)."""
    model, lm = llama
    ids, mask = prompts()
    rows = [(ids[i:i + 1], mask[i:i + 1]) for i in range(3)] + [(ids[1:], mask[1:]), (ids, mask)]
    base = dict(max_new_tokens=NEW - 2, pad_token_id=0)
    sample = dict(base, do_sample=True, top_k=20, temperature=0.9)

    class Recorder:
        def __init__(self):
            self.steps = []

        def put(self, value):
            self.steps.append(np.asarray(value))

        def end(self):
            pass

    def run(kind, prompt, key):
        i, m = rows[prompt]
        if kind == "greedy":
            return np.asarray(lm.generate(i, m, **base))
        if kind == "sample":
            return np.asarray(lm.generate(i, m, rng=jax.random.key(key), **sample))
        if kind == "streamer":
            recorder = Recorder()
            out = np.asarray(lm.generate(i, m, streamer=recorder, **base))
            recorder.steps = recorder.steps[1:]  # the prompt
            return out, np.stack(recorder.steps, axis=1)
        return np.stack(list(lm.stream(i, m, **base)), axis=1)

    jobs = [("greedy", 0, 0), ("greedy", 1, 0), ("sample", 2, 1), ("sample", 2, 2), ("streamer", 3, 0),
            ("streamer", 4, 0), ("stream", 0, 0), ("stream", 4, 0)]
    results: dict[int, object] = {}
    failures: list[BaseException] = []
    barrier = threading.Barrier(len(jobs))

    def worker(n, job):
        try:
            barrier.wait(timeout=60)
            results[n] = run(*job)
        except BaseException as e:  # noqa: BLE001 - reported below
            failures.append(e)

    threads = [threading.Thread(target=worker, args=(n, job), daemon=True) for n, job in enumerate(jobs)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 240
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    assert not any(thread.is_alive() for thread in threads), "deadlock: threads still running after 240 s"
    assert not failures, failures
    for n, job in enumerate(jobs):  # serially, now
        want = run(*job)
        if job[0] == "streamer":
            np.testing.assert_array_equal(results[n][0], want[0])
            np.testing.assert_array_equal(results[n][1], want[0][:, 7:])
        else:
            np.testing.assert_array_equal(results[n], want)
    i, m = rows[4]
    np.testing.assert_array_equal(results[1], hf_generate(model, *rows[1], do_sample=False, max_new_tokens=NEW - 2))
    np.testing.assert_array_equal(results[7], hf_generate(model, i, m, do_sample=False, max_new_tokens=NEW - 2)[:, 7:])
    assert not np.array_equal(results[2], results[3])  # two keys, two draws


def test_one_streamer_follows_one_call_at_a_time(llama):
    """A streamer keeps one call's state (transformers' `TextStreamer` its token cache), so a
    second call with the same streamer while the first runs is refused by name; the first is
    unaffected, and once it has ended the streamer can be used again."""
    _, lm = llama
    ids, mask = prompts()
    entered, release = threading.Event(), threading.Event()

    class Blocking:
        def __init__(self):
            self.steps = []

        def put(self, value):
            if not entered.is_set():  # the prompt, in the first call's thread
                entered.set()
                release.wait(60)
            else:
                self.steps.append(value)

        def end(self):
            pass

    streamer = Blocking()
    results = []
    first = threading.Thread(target=lambda: results.append(lm.generate(ids, mask, max_new_tokens=5, pad_token_id=0,
                                                                       streamer=streamer)), daemon=True)
    first.start()
    assert entered.wait(60)
    try:
        with pytest.raises(jaxport.InputError, match="this streamer is already following another generate call"):
            lm.generate(ids, mask, max_new_tokens=5, pad_token_id=0, streamer=streamer)
    finally:
        release.set()
    first.join(120)
    assert not first.is_alive() and len(streamer.steps) == 5
    want = np.asarray(lm.generate(ids, mask, max_new_tokens=5, pad_token_id=0))
    np.testing.assert_array_equal(np.asarray(results[0]), want)
    streamer.steps.clear()
    lm.generate(ids, mask, max_new_tokens=5, pad_token_id=0, streamer=streamer)
    np.testing.assert_array_equal(streamer.steps[0], ids.numpy())  # the prompt, then the steps
    np.testing.assert_array_equal(np.stack(streamer.steps[1:], axis=1), want[:, 7:])


def test_a_donated_cache_is_refused_by_name(llama):
    """prefill/decode donate the cache: passing the old one again (a second thread's decode, or
    one thread's mistake) is an InputError naming the cure, not JAX's "deleted" error."""
    _, lm = llama
    ids, mask = prompts()
    cache = lm.init_cache(3)
    _, newer = lm.prefill(lm.params, cache, ids.numpy(), mask.numpy())
    with pytest.raises(jaxport.InputError, match="this cache was donated to an earlier prefill/decode"):
        lm.decode(lm.params, cache, np.zeros((3, 1), np.int32), np.full((3, 1), 7, np.int32))
    lm.decode(lm.params, newer, np.zeros((3, 1), np.int32), np.full((3, 1), 7, np.int32))
