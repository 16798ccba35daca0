"""Streaming generation: each step's tokens to a streamer from inside the jitted loop, and a way
to stop it.

A streaming `generate` runs its jitted loop in a thread of its own (the stream's *runner*),
registered here under an id the loop carries as an argument. At each step the loop calls `emit`
(an ordered `io_callback`) with that id and the step's tokens; `emit` hands them to the call's
streamer and answers whether the loop goes on, which the loop's condition reads. Cancelling a
stream sets its flag: the next callback answers "stop", so the loop ends once the decode step it
is in has finished, and no exception is ever thrown through XLA's callback machinery (an
exception there, or a callback that runs while the interpreter shuts down, aborts the process:
"terminate called ...", "Fatal Python error: PyGILState_Release"). What the streamer raises
(a `KeyboardInterrupt` too) is kept, stops the loop the same way, and is raised again in the
caller's thread.

The runner is never the main thread, where `KeyboardInterrupt` lands, so it always sees its
computation end before it unregisters the stream. At interpreter exit (an `atexit` handler,
registered after JAX's so that it runs before JAX tears its backends down) every stream still
registered is cancelled and waited for, and no new one starts.

Streams are independent: any number may run at once, each callback finding its own streamer by
the id its loop carries. One streamer object follows one call at a time (transformers' streamers
keep per-call state); a second concurrent call with the same streamer is refused.

`follow` runs a `generate` call's loop as its streamer follows it; `generator` is `stream`'s
Python generator over the steps' tokens.
"""

from __future__ import annotations

import atexit
import itertools
import queue
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from ..errors import InputError, JaxportError

#: How long interpreter exit waits, in all, for running streams to stop (a stream whose loop is
#: still compiling stops only once it runs its first step).
EXIT_WAIT_SECONDS = 60.0

#: How often a thread waiting for a stream wakes up. A signal can reach any thread of the
#: process (XLA's too), and then does not interrupt the main thread's untimed wait for a lock:
#: waking up runs Python's signal handlers, so a KeyboardInterrupt arrives within this.
POLL_SECONDS = 0.05

_LIVE: dict[int, Stream] = {}
_LOCK = threading.Lock()
_IDS = itertools.count(1)
_EXITING = False
_AT_EXIT_REGISTERED = False
_IN_CALLBACK = threading.local()


class Stream:
    """One streaming `generate` call: its streamer, its runner thread and the flag that stops its
    loop. In the caller's thread: `register()`, `start(run, args)` (the runner runs
    `run(*args, stream id)`), then `result()`; and on the way out, normal or not, `stop()`."""

    def __init__(self, name: str, streamer: Any, on_done: Callable[[], None] | None = None):
        self.name = name
        self.streamer = streamer
        self.on_done = on_done  # called in the runner once the loop has ended
        self.cancelled = threading.Event()
        self.done = threading.Event()
        self.id = 0
        self.runner: threading.Thread | None = None
        self.stopped = False  # a callback answered "stop"
        self.error: BaseException | None = None  # what the streamer raised
        self.failure: BaseException | None = None  # what running the loop raised
        self.outcome: tuple[Any, int] | None = None  # (tokens, steps)

    def register(self) -> None:
        """Give the stream its id; refuses a streamer already following a running call, and any
        new stream once the interpreter is exiting."""
        global _AT_EXIT_REGISTERED
        with _LOCK:
            if _EXITING:
                raise JaxportError(f"{self.name}: the interpreter is exiting; no new generation starts")
            if any(other.streamer is self.streamer for other in _LIVE.values()):
                raise InputError(f"{self.name}: this streamer is already following another generate call "
                                 "(a streamer keeps one call's state); give each concurrent call its own")
            if not _AT_EXIT_REGISTERED:
                # registered now, after JAX's own handlers (JAX is in use by then), so it runs before them
                atexit.register(_stop_all)
                _AT_EXIT_REGISTERED = True
            self.id = next(_IDS)
            _LIVE[self.id] = self

    def start(self, run: Callable, args: tuple) -> None:
        """Run `run(*args, stream id)` in the runner thread (a daemon: interpreter exit cancels it)."""
        with _LOCK:  # at exit, `_stop_all` waits for every runner started before it, and no other starts
            if _EXITING:
                raise JaxportError(f"{self.name}: the interpreter is exiting; no new generation starts")
            self.runner = threading.Thread(target=self._run, args=(run, args), daemon=True,
                                           name=f"jaxport-stream-{self.id}")
        self.runner.start()

    def _run(self, run: Callable, args: tuple) -> None:
        try:
            tokens, steps = run(*args, np.int32(self.id))
            self.outcome = (tokens, int(steps))  # waits for the loop: no callback of it is left after this
        except BaseException as e:  # noqa: BLE001 - raised again in the caller's thread
            self.failure = e
        finally:
            with _LOCK:
                _LIVE.pop(self.id, None)
            self.done.set()
            if self.on_done is not None:
                self.on_done()

    def stop(self) -> None:
        """Stop the loop at its next step and wait for the runner to end; a no-op once it has. Does
        not wait from inside a streaming callback (a generator collected there: waiting would
        deadlock) nor once the interpreter is exiting (`_stop_all` has waited for every loop,
        and a daemon thread may not run again): there the flag alone stops the loop."""
        self.cancelled.set()
        runner = self.runner
        if runner is None or runner.ident is None:  # never started
            with _LOCK:
                _LIVE.pop(self.id, None)
            return
        if (threading.current_thread() is runner or getattr(_IN_CALLBACK, "active", False) or _EXITING
                or sys.is_finalizing()):
            return
        runner.join()

    def result(self) -> tuple[Any, int]:
        """`(tokens, steps)` once the loop has ended; raises what the streamer or the loop raised.
        Waits in steps of `POLL_SECONDS`, so that a KeyboardInterrupt arrives while it waits."""
        while not self.done.wait(POLL_SECONDS):
            pass
        assert self.runner is not None
        self.runner.join()
        self.check()
        assert self.outcome is not None
        return self.outcome

    def check(self) -> None:
        """Raise what stopped the loop, if anything other than its owner did."""
        if self.error is not None:
            raise self.error
        if self.failure is not None:
            raise self.failure
        if self.stopped:
            raise JaxportError(f"{self.name}: generation was cancelled before it finished (the interpreter is exiting)")


def follow(name: str, streamer: Any, prompts: Any, run: Callable, args: tuple) -> tuple[Any, int]:
    """`(tokens, steps)` of `run(*args, stream id)` run as a stream `streamer` follows: given the
    prompts, then each step's tokens from the runner, then `end()`. Whatever is raised meanwhile
    (a `KeyboardInterrupt` while waiting too) stops the loop at its next step and is raised."""
    stream = Stream(name, streamer)
    try:
        stream.register()  # refuses a streamer another running call follows
        streamer.put(np.asarray(prompts))
        stream.start(run, args)
        outcome = stream.result()
    except BaseException:  # a KeyboardInterrupt while waiting too: the loop stops at its next step
        stream.stop()
        raise
    streamer.end()
    return outcome


class _Enqueue:
    """The streamer `generator` gives its loop: each step's tokens into the generator's queue."""

    def __init__(self, items: queue.SimpleQueue):
        self.put = items.put


def generator(name: str, run: Callable, args: tuple) -> Iterator[np.ndarray]:
    """Each step's tokens of `run(*args, stream id)` as a Python generator, the loop in its runner;
    closed (or collected, interrupted or finished), the loop is stopped and its runner waited for."""
    items: queue.SimpleQueue = queue.SimpleQueue()
    finished = object()
    stream = Stream(name, _Enqueue(items), on_done=lambda: items.put(finished))
    try:
        stream.register()
        stream.start(run, args)
        while True:
            try:
                item = items.get(timeout=POLL_SECONDS)  # timed, so that a KeyboardInterrupt arrives
            except queue.Empty:
                continue
            if item is finished:
                break
            yield item
    finally:  # closed, collected, interrupted, or finished
        stream.stop()  # a no-op once the loop has ended
    stream.check()


def emit(stream_id: np.ndarray, tokens: np.ndarray) -> np.ndarray:
    """The host side of a streaming loop's step: the tokens to the stream's streamer; returns
    whether the loop goes on (a bool scalar). Never raises: an exception thrown back into XLA's
    callback machinery can abort the process."""
    _IN_CALLBACK.active = True
    try:
        stream = _LIVE.get(int(stream_id))
        if stream is None:
            return np.asarray(False)
        if not stream.cancelled.is_set():
            try:
                stream.streamer.put(np.asarray(tokens))
            except BaseException as e:  # noqa: BLE001 - kept for the caller's thread
                stream.error = e
            if stream.error is None and not stream.cancelled.is_set():
                return np.asarray(True)
        stream.stopped = True
        return np.asarray(False)
    except BaseException:  # noqa: BLE001 - never into XLA
        return np.asarray(False)
    finally:
        _IN_CALLBACK.active = False


def live() -> int:
    """How many streams are running (registered and not yet ended)."""
    with _LOCK:
        return len(_LIVE)


def _stop_all() -> None:
    """At interpreter exit: cancel every running stream and wait for its loop to end, so that no
    streaming callback runs while the interpreter shuts down."""
    global _EXITING
    with _LOCK:
        _EXITING = True
        running = [stream for stream in _LIVE.values() if stream.runner is not None]
    for stream in running:
        stream.cancelled.set()
    deadline = time.monotonic() + EXIT_WAIT_SECONDS
    for stream in running:
        stream.done.wait(max(0.0, deadline - time.monotonic()))
