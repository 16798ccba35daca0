"""Artifact export: one of a `CausalLM`'s step programs as a serializable `jax.export` artifact
(`jaxport.export`, an `ExportedModel`), traced from an example over an empty cache with the
batch and the number of new tokens symbolic, on the program's own weights."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..backends.model import JaxModel
from ..backends.serialization import ExportedModel, export


def export_step(program: JaxModel, cache: dict, *, tokens: int, decoder: bool,
                platforms: Sequence[str] | None = None) -> ExportedModel:
    """`program` exported from an example of `tokens` new tokens over `cache` (an empty one of
    two rows where the model takes two): `(input_ids, slot mask, positions, length, layer
    states) -> (logits, layer states)`, the states flat (each layer's arrays in turn, by sorted
    name). A `decoder`'s example length is 1, a prefill's 0."""
    batch = cache["mask"].shape[0]
    ids = np.zeros((batch, tokens), np.int32)
    example = (ids, np.asarray(cache["mask"]), ids, np.int32(1 if decoder else 0), list(cache["layers"]))
    return export(program, example, dynamic="auto", platforms=platforms)
