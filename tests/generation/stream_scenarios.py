"""Streams ended early, each scenario in a process of its own (`test_streaming.py` runs them).

    python -m tests.generation.stream_scenarios SCENARIO [SCENARIO ...]

A tiny Llama streams 150 greedy tokens for three prompts; each scenario, in turn, ends a stream
early (break, close, an exception in the consumer, the generator collected, a KeyboardInterrupt
from a streamer or from SIGINT), then streams and generates again. Prints one JSON line, a report
per scenario: whether the second stream and a plain `generate` gave transformers' tokens (which a
freshly converted model gives), what was left running, and how many decode steps' callbacks ran
after the stream was cancelled. The SIGINT scenarios print "ready" once they loop, for the
parent to send SIGINT; "exit_running" (last) leaves streams running for interpreter exit to stop.
"""

from __future__ import annotations

import gc
import json
import signal
import sys
import threading
import time

import jax
import numpy as np
import torch

import jaxport
from jaxport.generation import causal_lm, streaming
from tests.generation.test_generation import prompts, tiny_model

NEW = 150
#: Each streaming callback of the scenario's first stream sleeps this long, so that the loop is
#: still running when the consumer stops it (150 steps take 1.5 s; the consumer stops after 3).
SLOW = 0.01

callbacks: list[bool] = []  # per streaming callback: whether its stream was cancelled when it ran
slow = False
_emit = causal_lm.emit_to_host


def counted(stream_id, tokens):
    stream = streaming._LIVE.get(int(stream_id))
    callbacks.append(bool(stream is not None and stream.cancelled.is_set()))
    if slow:
        time.sleep(SLOW)
    return _emit(stream_id, tokens)


causal_lm.emit_to_host = counted  # read when the loop is traced, so before any stream


def runners() -> int:
    return sum(thread.name.startswith("jaxport-stream") for thread in threading.enumerate())


def main(names: list[str]) -> None:
    signal.signal(signal.SIGINT, signal.default_int_handler)  # whatever the parent process ignores
    model = tiny_model("llama", seed=3)
    ids, mask = prompts()
    with torch.no_grad():
        want = model.generate(ids, attention_mask=mask, do_sample=False, max_new_tokens=NEW, pad_token_id=0).numpy()
    lm = jaxport.from_causal_lm(model, max_length=7 + NEW, max_batch=3)
    settings = dict(max_new_tokens=NEW, pad_token_id=0)
    list(lm.stream(ids, mask, **settings))  # compiled before the scenarios
    lm.generate(ids, mask, **settings).block_until_ready()
    reports = {}
    for name in names:
        reports[name] = run(name, lm, ids, mask, settings, want)
    print(json.dumps(reports), flush=True)


def run(scenario: str, lm, ids, mask, settings: dict, want: np.ndarray) -> dict:
    gc.collect()
    arrays = len(jax.live_arrays())
    report: dict = {}
    global slow
    slow = True
    callbacks.clear()

    if scenario == "break":  # the script
        for i, _ in enumerate(lm.stream(ids, mask, **settings)):
            if i == 2:
                break
        del _  # a step's tokens can be a view of the loop's buffer
    elif scenario == "close":
        steps = lm.stream(ids, mask, **settings)
        next(steps), next(steps)
        steps.close()
    elif scenario == "raise":
        try:
            for i, _ in enumerate(lm.stream(ids, mask, **settings)):
                if i == 2:
                    raise ValueError("the consumer failed")
        except ValueError:
            del _
    elif scenario == "collect":
        steps = lm.stream(ids, mask, **settings)
        next(steps), next(steps)
        cycle = [steps]
        cycle.append(cycle)  # only the cyclic collector finds it
        del steps, cycle
        gc.collect()
    elif scenario == "put_interrupt":
        class Interrupting:
            puts, ended = 0, False

            def put(self, value):
                self.puts += 1
                if self.puts == 3:  # the prompt, then two steps
                    raise KeyboardInterrupt

            def end(self):
                self.ended = True

        streamer = Interrupting()
        try:
            lm.generate(ids, mask, streamer=streamer, **settings)
            report["raised"] = False
        except KeyboardInterrupt:
            report["raised"] = True
        report.update(puts=streamer.puts, ended=streamer.ended)
    elif scenario.startswith("sigint_"):
        slow = False

        class Counting:
            def put(self, value):
                pass

            def end(self):
                pass

        kind = scenario.removeprefix("sigint_")
        print("ready", flush=True)
        try:
            while True:
                if kind == "stream":
                    for _ in lm.stream(ids, mask, **settings):
                        pass
                elif kind == "streamer":
                    lm.generate(ids, mask, streamer=Counting(), **settings)
                else:
                    lm.generate(ids, mask, **settings).block_until_ready()
        except KeyboardInterrupt:
            report["interrupted"] = True
        time.sleep(0.5)  # a plain generate's loop may still be finishing: it cannot be stopped
    elif scenario == "exit_running":
        started = threading.Event()

        class Slow:
            puts = 0

            def put(self, value):
                self.puts += 1
                if self.puts > 1:  # the loop runs
                    started.set()
                time.sleep(0.05)

            def end(self):
                pass

        thread = threading.Thread(target=lm.generate, args=(ids, mask), kwargs=dict(streamer=Slow(), **settings),
                                  daemon=True)
        thread.start()
        started.wait()
        global suspended
        suspended = lm.stream(ids, mask, **settings)
        next(suspended)
        report.update(live=streaming.live(), runners=runners())
        return report  # with both running: interpreter exit must stop them
    else:
        raise SystemExit(f"unknown scenario {scenario}")

    slow = False
    report.update(steps_run=len(callbacks), after_cancel=sum(callbacks), live=streaming.live(), runners=runners())
    gc.collect()
    report["arrays_released"] = len(jax.live_arrays()) == arrays
    second = np.stack(list(lm.stream(ids, mask, **settings)), axis=1)
    report["second"] = bool(np.array_equal(second, want[:, 7:]))
    report["generate"] = bool(np.array_equal(np.asarray(lm.generate(ids, mask, **settings)), want))
    return report


if __name__ == "__main__":
    main(sys.argv[1:])
