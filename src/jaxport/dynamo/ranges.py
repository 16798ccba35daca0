"""The int64 range check of a compiled graph's inputs, read without waiting.

With JAX's x64 mode off, int64 inputs cross as their two int32 words and the jitted function
computes whether each one's values fit int32 (`inputs.unpacked`). The verdict is read once it is
ready, without waiting: at the end of the call where the outputs were already awaited (the CPU:
handing them to PyTorch waits for them), else at the graph's next call; an out-of-range value
raises `InputError` then.
"""

from __future__ import annotations

import threading

import jax
import numpy as np

from .. import dtypes
from ..errors import InputError


class RangeCheck:
    """The verdicts of one graph's calls on its int64 inputs (named `names`, in the order of the
    verdict's entries), those not yet ready kept in `pending`."""

    def __init__(self, names: tuple[str, ...]):
        self.names = names
        self.pending: list[jax.Array] = []
        # Threads share a compiled graph (Dynamo's cache is the process's).
        self._lock = threading.Lock()

    def settle(self, fits: jax.Array) -> None:
        """A call's verdict: raised now if it is ready and says a value does not fit, kept for the
        next call's `check_pending` if it is not ready."""
        if fits.is_ready():
            self.raise_if_out_of_range(fits)
        else:
            with self._lock:
                self.pending.append(fits)

    def check_pending(self) -> None:
        """Raise for the earlier calls' verdicts that are ready now; keep the others."""
        ready: list[jax.Array] = []
        with self._lock:
            pending, self.pending = self.pending, []
            for fits in pending:
                (ready if fits.is_ready() else self.pending).append(fits)
        for fits in ready:
            self.raise_if_out_of_range(fits)

    def raise_if_out_of_range(self, fits: jax.Array) -> None:
        """An `InputError` naming the inputs whose verdict is False (this waits for `fits`)."""
        verdict = np.asarray(fits)
        if verdict.all():
            return
        names = [name for name, ok in zip(self.names, verdict) if not ok]
        raise InputError(f"graph input(s) {', '.join(map(repr, names))} hold int64 values outside int32's "
                         f"range, and JAX stores int64 as int32 with its x64 mode off: {dtypes.X64_HINT}")
