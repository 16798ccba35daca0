"""The decode loops and their compiled programs: prefill and a `lax.while_loop` of decode steps
as one jitted function per structure of settings (`sampling.split`: a new number compiles
nothing), greedy or sampled here, beam search through `beam.beam_search`; compiled for XLA:CPU
without hoisting loop-invariant work out of the loop. A streaming loop hands each step's tokens to
the host through an ordered callback whose answer its condition reads (`streaming.emit`)."""

from __future__ import annotations

import threading
from collections.abc import Callable

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import io_callback

from .beam import Beams, beam_search
from .cache_layout import positions as _positions
from .sampling import Sampling, process_scores

#: How XLA:CPU compiles a generation loop: without hoisting loop-invariant work out of it. It runs
#: some ops on 16-bit floats (the embedding's gather, slices) by converting their operand to float32
#: first; inside one step the conversion fuses into the op, but hoisted out of the decode loop it is
#: a float32 copy of the whole operand for as long as the loop runs (a bfloat16 Llama of 150M
#: parameters: 125 MiB for its embedding; 470 MiB, every weight, before single-row products were
#: given two rows, `ops._products`). What stays in the loop is small (its masks and positions).
_CPU_LOOP_OPTIONS = {"xla_disable_hlo_passes": "while-loop-invariant-code-motion"}


def on_cpu(params) -> bool:
    """Whether `params` lie on the CPU (JAX's default device for arrays not yet placed)."""
    leaf = next(iter(jax.tree.leaves(params)), None)
    devices = leaf.devices() if isinstance(leaf, jax.Array) else {jax.devices()[0]}
    return all(device.platform == "cpu" for device in devices)


class Loops:
    """A model's jitted generation loops, one per structure of settings, over its pure steps:
    `prefill_step(params, cache, ids, mask)`, `decode_step(params, cache, tokens, positions)` and
    `init_cache(batch)`. `len()` counts the loops compiled so far."""

    def __init__(self, prefill_step: Callable, decode_step: Callable, init_cache: Callable):
        self.prefill_step = prefill_step
        self.decode_step = decode_step
        self.init_cache = init_cache
        self._loops: dict = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._loops)

    def get(self, settings: Sampling, beams: Beams, eos: tuple[int, ...], pad: int, new: int,
            streaming: bool = False, on_cpu: bool = False, to_host: Callable | None = None) -> Callable:
        """The jitted loop for a structure of settings (`sampling.split`); `new` the token buffer's
        size (the most new tokens it makes; how many it makes is the `values` argument's "new");
        `to_host(stream id, tokens) -> go on` the callback a streaming loop made now calls."""
        key = (settings, beams, eos, pad, new, streaming, on_cpu)
        with self._lock:
            if key not in self._loops:
                self._loops[key] = jax.jit(self._loop(settings, beams, eos, pad, new, streaming, to_host),
                                           compiler_options=_CPU_LOOP_OPTIONS if on_cpu else None)
            return self._loops[key]

    def _loop(self, settings: Sampling, beams: Beams, eos: tuple[int, ...], pad: int, new: int,
              streaming: bool, to_host: Callable | None) -> Callable:
        """`run(params, ids, mask, rng, values, stream id) -> (new tokens, steps)`, to be jitted."""
        if beams.num_beams > 1:
            def run(params, ids, mask, rng, values, stream):
                sequences, steps = beam_search(
                    self.prefill_step, self.decode_step, self.init_cache, params, ids, mask, beams=beams,
                    settings=settings, eos=eos, pad=pad, new=new, positions=_positions,
                    values={k: v for k, v in values.items() if k != "new"})
                return sequences[:, ids.shape[1]:], steps
        else:
            def run(params, ids, mask, rng, values, stream):
                return self._generate(params, ids, mask, rng, stream, settings, eos, pad, new, streaming, values,
                                      to_host)
        return run

    def _generate(self, params, ids, mask, rng, stream, settings: Sampling, eos, pad, room, streaming=False,
                  values=None, to_host=None):
        """Greedy or sampled decoding as one `while_loop` of `values["new"]` steps at most, into a
        buffer of `room` tokens. Streaming, each step's tokens go to the host (`to_host`, as
        `streaming.emit`, with the `stream` id), whose answer the loop's condition reads: a
        cancelled stream's loop ends after the step it is in."""
        values = dict(values)
        new = values.pop("new")
        batch, prompt = ids.shape
        logits, cache = self.prefill_step(params, self.init_cache(batch), ids, mask)
        last = jnp.max(_positions(mask), axis=-1, keepdims=True)
        eos_ids = jnp.asarray(eos, jnp.int32)
        padding = jnp.argmax(mask != 0, axis=1)  # each row's left padding: no repetition penalty there
        sequence = jnp.concatenate([ids, jnp.full((batch, room), pad, jnp.int32)], axis=1)

        def pick(logits, step, sequence):
            scores = process_scores(logits, sequence, prompt + step, settings=settings, eos=eos,
                                    prompt_length=prompt, max_length=prompt + new, prompt_start=padding,
                                    values=values)
            if not settings.do_sample:
                return jnp.argmax(scores, axis=-1).astype(jnp.int32)
            return jax.random.categorical(jax.random.fold_in(rng, step), scores, axis=-1).astype(jnp.int32)

        def finished(tokens):
            return jnp.isin(tokens, eos_ids) if eos else jnp.zeros(tokens.shape, bool)

        def emit(token):  # whether the loop goes on
            if not streaming:
                return jnp.asarray(True)
            return io_callback(to_host, jax.ShapeDtypeStruct((), jnp.bool_), stream, token, ordered=True)

        first = pick(logits[:, -1], 0, sequence)
        go = emit(first)
        sequence = sequence.at[:, prompt].set(first)

        def cond(state):
            step, _, done, _, _, go = state
            return (step < new) & ~jnp.all(done) & go

        def body(state):
            step, sequence, done, last, cache, _ = state
            previous = lax.dynamic_slice_in_dim(sequence, prompt + step - 1, 1, axis=1)
            logits, cache = self.decode_step(params, cache, previous, last + 1)
            token = jnp.where(done, pad, pick(logits[:, -1], step, sequence))
            go = emit(token)
            sequence = lax.dynamic_update_slice_in_dim(sequence, token[:, None], prompt + step, axis=1)
            return step + 1, sequence, done | finished(token), last + 1, cache, go

        state = (jnp.asarray(1, jnp.int32), sequence, finished(first), last, cache, go)
        steps, sequence, *_ = lax.while_loop(cond, body, state)
        return sequence[:, prompt:], steps
