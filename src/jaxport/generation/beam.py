"""Beam search as transformers' `generate` runs it (`num_beams > 1`, `do_sample=False`), as one
`lax.while_loop`.

The same algorithm as transformers' vectorised `_beam_search`, step for step, so the same
hypotheses come out: each step scores every continuation of every running beam by its
accumulated log-probability (after the logits processors, applied to log-softmaxed logits),
keeps the best `K = max(2, 1 + number of EOS ids) * num_beams`, moves those that end (EOS, or
the last slot) into the finished set with their score divided by `length ** length_penalty`,
continues the best `num_beams` of the others, and reorders the cache rows to follow their
beams. It stops on transformers' conditions: `early_stopping=True` once every prompt has
`num_beams` finished hypotheses; otherwise when no running beam can beat the worst finished one
(by the heuristic `early_stopping` selects), or when every continuation has ended.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from .sampling import Sampling, process_scores

#: transformers' stand-in for minus infinity in beam scores (finite, so sums stay ordered)
_NEVER = -1.0e9


@dataclasses.dataclass(frozen=True)
class Beams:
    """Beam search settings, as the `GenerationConfig` fields of the same names."""

    num_beams: int
    length_penalty: float = 1.0
    early_stopping: bool | str = False
    num_return_sequences: int = 1


def beam_search(prefill: Callable, decode: Callable, init_cache: Callable, params, ids: jax.Array,
                mask: jax.Array, *, beams: Beams, settings: Sampling, eos: tuple[int, ...], pad: int,
                new: int, positions: Callable, values: dict | None = None) -> tuple[jax.Array, jax.Array]:
    """`(sequences [B * num_return_sequences, P + new], generated length [])` for prompts
    `ids [B, P]` (left-padded, `mask` 1 on tokens). `prefill`/`decode`/`init_cache` are the
    model's pure steps; `positions(mask)` its position ids for a slot mask; `settings` and
    `values` as `process_scores` takes them. `new` shapes the search's buffers: one program each."""
    nb, k = beams.num_beams, max(2, 1 + len(eos)) * beams.num_beams
    batch, prompt = ids.shape
    size = prompt + new
    rows = batch * nb
    ids, mask = jnp.repeat(ids, nb, axis=0), jnp.repeat(mask, nb, axis=0)
    logits, cache = prefill(params, init_cache(rows), ids, mask)
    last = jnp.max(positions(mask), axis=-1, keepdims=True)
    padding = jnp.argmax(mask != 0, axis=1)
    eos_ids = jnp.asarray(eos, jnp.int32)
    # transformers' fill for unwritten slots: `pad_token_id or eos_token_id[0]` (0 counts as unset)
    fill = (pad or eos[0]) if eos else -1
    # `length ** length_penalty` as transformers divides by it: a Python float, then float32
    penalty = jnp.asarray(np.float32([max(n, 1) ** beams.length_penalty for n in range(size + 2)]))
    top = jnp.arange(k) < nb
    early = beams.early_stopping

    running = jnp.full((batch, nb, size), fill, jnp.int32).at[:, :, :prompt].set(ids.reshape(batch, nb, prompt))
    state = dict(
        step=jnp.asarray(0, jnp.int32), logits=logits[:, -1], last=last, cache=cache, running=running,
        running_scores=jnp.zeros((batch, nb), jnp.float32).at[:, 1:].set(_NEVER),
        sequences=running, scores=jnp.full((batch, nb), _NEVER, jnp.float32),
        lengths=jnp.zeros((batch, nb), jnp.int32), finished=jnp.zeros((batch, nb), bool),
        improvable=jnp.ones((batch, 1), bool), go=jnp.asarray(True),
    )

    def gather(x, index):  # x [B, n, ...] by index [B, m] along the beam axis
        return jnp.take_along_axis(x, index.reshape(index.shape + (1,) * (x.ndim - 2)), axis=1)

    def body(s):
        length = prompt + s["step"]  # tokens each running sequence holds
        flat = s["running"].reshape(rows, size)
        log_probs = jax.nn.log_softmax(s["logits"].astype(jnp.float32), axis=-1)
        log_probs = process_scores(log_probs, flat, length, settings=settings, eos=eos, prompt_length=prompt,
                                   max_length=size, prompt_start=padding, values=values)
        vocab = log_probs.shape[-1]
        total = (log_probs.reshape(batch, nb, vocab) + s["running_scores"][:, :, None]).reshape(batch, nb * vocab)
        top_scores, top_index = lax.top_k(total, k)
        source, token = top_index // vocab, (top_index % vocab).astype(jnp.int32)
        candidates = gather(s["running"], source)
        candidates = jnp.where(jnp.arange(size) == length, token[:, :, None], candidates)
        ended = (jnp.isin(token, eos_ids) if eos else jnp.zeros(token.shape, bool)) | (length + 1 >= size)

        # the best num_beams continuations that go on
        going = top_scores + ended.astype(jnp.float32) * _NEVER
        keep = lax.top_k(going, nb)[1]
        running, running_scores = gather(candidates, keep), gather(going, keep)
        origin = (gather(source, keep) + jnp.arange(batch)[:, None] * nb).reshape(rows)

        # those of the first num_beams that ended join the finished, if they beat them
        just = ended & top[None, :]
        final = top_scores / penalty[length + 1 - prompt]
        full = jnp.all(s["finished"], axis=-1, keepdims=True) & (early is True)
        final = final + full.astype(jnp.float32) * _NEVER
        final = final + (~s["improvable"]).astype(jnp.float32) * _NEVER
        final = final + (~just).astype(jnp.float32) * _NEVER
        merged = jnp.concatenate([s["scores"], final], axis=1)
        best = lax.top_k(merged, nb)[1]
        sequences = gather(jnp.concatenate([s["sequences"], candidates], axis=1), best)
        lengths = gather(jnp.concatenate([s["lengths"], jnp.full((batch, k), length + 1 - prompt)], axis=1), best)
        finished = gather(jnp.concatenate([s["finished"], just], axis=1), best)
        scores = gather(merged, best)

        # can a running beam still beat the worst finished one? (transformers' heuristic)
        if early == "never" and beams.length_penalty > 0.0:
            hypothetical = size - prompt
        else:
            hypothetical = length + 1 - prompt
        best_running = running_scores[:, :1] / penalty[hypothetical]
        worst = jnp.where(finished, jnp.min(scores, axis=1, keepdims=True), _NEVER)
        improvable = s["improvable"] & jnp.any(best_running > worst, axis=-1, keepdims=True)
        go = jnp.any(improvable) & ~(jnp.all(finished) & (early is True)) & ~jnp.all(ended)

        # the cache follows the beams; the next step feeds each running beam its new token
        cache = jax.tree.map(lambda x: x[origin] if x.ndim and x.shape[0] == rows else x, s["cache"])
        step_tokens = lax.dynamic_slice_in_dim(running.reshape(rows, size), length, 1, axis=1)
        logits, cache = lax.cond(go, lambda c: decode(params, c, step_tokens, s["last"] + 1),
                                 lambda c: (jnp.zeros((rows, 1, vocab), s["logits"].dtype), c), cache)
        return dict(step=s["step"] + 1, logits=logits[:, -1], last=s["last"] + 1, cache=cache, running=running,
                    running_scores=running_scores, sequences=sequences, scores=scores, lengths=lengths,
                    finished=finished, improvable=improvable, go=go)

    out = lax.while_loop(lambda s: s["go"] & (s["step"] < new), body, state)
    returned = beams.num_return_sequences
    sequences = out["sequences"][:, :returned].reshape(batch * returned, size)
    return sequences, jnp.max(out["lengths"][:, :returned])
