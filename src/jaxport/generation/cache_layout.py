"""The cache's layout and its checks: the pytree of preallocated arrays a `CausalLM` writes into,

    {"layers": [{"keys": [B, kv_heads, L, head_dim], "values": [...]}, ...],  # one per layer, as it
                                                           # caches (probe._STATES; a recurrent
                                                           # layer's "conv_0", "recurrent_0", ...)
     "mask": int32 [B, L],   # 1 where a slot holds a token, 0 for padding or unused slots
     "length": int32 []}     # slots used so far: where the next tokens go (shared by all rows)

where each step's tokens go in it (`write_slots`, rolling past `max_length` for a model whose
layers keep sliding windows only), the positions of a left-padded slot mask, and the refusals of
what the cache has no room for (at once where the length is known, through `checkify` when traced).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import checkify

from .. import dtypes
from ..errors import InputError


def positions(mask: jax.Array) -> jax.Array:
    """Hugging Face's position ids for a left-padded slot mask: tokens count from 0, padding is 0."""
    return jnp.where(mask == 0, 0, jnp.cumsum(mask, axis=-1) - 1)


class CacheLayout:
    """The cache of a model called `name`: each layer's states (`cache_specs`, shapes with the
    batch first, which `specs` drops), `max_batch` rows of `max_length` slots, whether decoding
    `rolls` past `max_length` and whether prefill and decode are two programs (`split`)."""

    def __init__(self, name: str, cache_specs: Sequence[dict[str, tuple[tuple[int, ...], Any]]], *,
                 max_batch: int, max_length: int, rolls: bool, split: bool):
        self.name = name
        self.specs = [{state: (tuple(shape[1:]), dtypes.jax_dtype(dtype)) for state, (shape, dtype) in layer.items()}
                      for layer in cache_specs]
        self.max_batch = max_batch
        self.max_length = max_length
        self.rolls = rolls
        self.split = split
        #: The most tokens one decode step may take: `max_length`, or where the cache `rolls`, the
        #: slots its widest window leaves.
        self.decode_room = max_length - max((layer["keys"][0][1] for layer in self.specs if "keys" in layer),
                                            default=0) if rolls else max_length

    def check_batch(self, batch: int) -> None:
        if not 1 <= batch <= self.max_batch:
            raise InputError(f"{self.name}: batch {batch} is outside 1..{self.max_batch} (max_batch of from_causal_lm)")

    def init(self, batch: int) -> dict:
        """An empty cache for `batch` rows: zeros, every slot unused."""
        self.check_batch(batch)
        return {
            "layers": [{name: jnp.zeros((batch, *shape), dtype) for name, (shape, dtype) in layer.items()}
                       for layer in self.specs],
            "mask": jnp.zeros((batch, self.max_length), jnp.int32),
            "length": jnp.zeros((), jnp.int32),
        }

    def check_prompts(self, rows: int, prompt: int, new: int, num_beams: int = 1) -> None:
        """Refuse `generate`'s `rows` prompts of `prompt` tokens and `new` new ones, `num_beams`
        cache rows each in beam search, where the cache has no room for them."""
        if self.rolls and prompt > self.max_length:
            raise InputError(f"{self.name}: a prompt of {prompt} tokens needs as many cache slots; "
                             f"max_length is {self.max_length}")
        if not self.rolls and prompt + new > self.max_length:
            raise InputError(f"{self.name}: a prompt of {prompt} tokens and {new} new ones need "
                             f"{prompt + new} cache slots; max_length is {self.max_length}")
        if num_beams > 1 and rows * num_beams > self.max_batch:
            raise InputError(f"{self.name}: {rows} prompts with num_beams={num_beams} need "
                             f"{rows * num_beams} cache rows; max_batch is {self.max_batch}")

    def check_room(self, cache: dict, count: int, checked: bool = False, decoding: bool = False) -> None:
        """Refuse `count` new tokens past the cache's `max_length` slots: at once when the length is
        known, through `checkify` when traced and `checked`; unchecked under a trace, XLA would
        clamp the write into the last slots, overwriting tokens. A model that `rolls` decodes
        past them, up to `decode_room` tokens a step."""
        length = cache["length"]
        if not isinstance(length, jax.core.Tracer) and any(
                getattr(leaf, "is_deleted", lambda: False)() for leaf in jax.tree.leaves(cache)):
            raise InputError(f"{self.name}: this cache was donated to an earlier prefill/decode; pass the "
                             "cache that call returned (a cache serves one sequence of calls, in one thread)")
        if decoding and self.rolls:
            if count > self.decode_room:
                raise InputError(f"{self.name}: {count} tokens in one decode step; its windows leave room for "
                                 f"{self.decode_room} at a time in max_length={self.max_length} slots")
            return
        if not isinstance(length, jax.core.Tracer):
            if int(length) + count > self.max_length:
                raise InputError(f"{self.name}: {count} more tokens after {int(length)} need {int(length) + count} "
                                 f"cache slots; max_length is {self.max_length}")
        elif checked:
            checkify.check(length + count <= self.max_length,
                           f"{self.name}: {count} more tokens after {{length}} overflow max_length={self.max_length}",
                           length=length)

    def check_empty(self, cache: dict, checked: bool = False) -> None:
        """Where prefill and decode are two programs (`split`), refuse to prefill a cache that holds
        tokens, as `check_room` refuses: at once when the length is known, through `checkify`
        when traced and `checked`."""
        if not self.split:
            return
        length = cache["length"]
        if not isinstance(length, jax.core.Tracer):
            if int(length):
                raise InputError(f"{self.name}: its prefill program starts from an empty cache (this one holds "
                                 f"{int(length)} tokens); continue with decode, one token at a time")
        elif checked:
            checkify.check(length == 0, f"{self.name}: its prefill program starts from an empty "
                           "cache; this one holds {length} tokens", length=length)

    def write_slots(self, cache: dict, flags: jax.Array) -> tuple[jax.Array, jax.Array]:
        """(slot mask, length): `flags` [B, T] (1 for a token, 0 for padding) written after the
        cache's `length` tokens, and the count of tokens before them that the program is given.

        Past `max_length`, a model that `rolls` keeps the flags of the last `max_length`
        positions: the mask is shifted left by the tokens that no longer fit, and the program is
        told that many fewer came before. Its windows keep the last tokens whatever their
        count, its positions come from the caller, and its masks compare positions with one
        another (transformers reads the slot mask at a window's positions, counted from that
        length), so it computes what it would at the true count."""
        length, count = cache["length"], flags.shape[1]
        if not self.rolls:
            return lax.dynamic_update_slice(cache["mask"], flags, (0, length)), length
        first = jnp.maximum(0, length - self.max_length)  # the position the mask's first slot holds
        then = jnp.maximum(0, length + count - self.max_length)
        mask = jnp.roll(cache["mask"], first - then, axis=1)  # what rolls round is overwritten below
        return lax.dynamic_update_slice(mask, flags, (0, length - then)), length - then

