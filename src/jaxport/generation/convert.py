"""Conversion of a Hugging Face causal LM for generation: its step (`step.CausalLMStep`) exported
with `torch.export`, the batch and the number of new tokens symbolic, and converted; a model with
recurrent layers (Mamba, Jamba, Qwen3-Next, ...), or whose code branches on whether its cache is
empty (GIT), as two programs (a prefill from an empty cache and a one-token decoder), and where its
code loops over the prompt in Python, a prefill program per prompt length, made when first asked
for. Each layer's attention kind, and the weights the programs share."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from ..backends.model import JaxModel
from ..convert import from_torch
from ..devices import module_device
from ..errors import ExportError, InputError, MaxBatchError
from ..frontends import transformers_adapter
from ..frontends.hugging_face import is_model
from ..precision import precision_policy
from .settings import model_generation_config
from .step import CausalLMStep


def share_weights(program: JaxModel, params: dict) -> JaxModel:
    """`program` (another export of the same step: a decoder, a prefill for one prompt length)
    holding the CausalLM's own weights instead of its own copy of them. Its conversion copied any
    weight DLPack could not share (unaligned, or from another device), and every step is run on
    the CausalLM's `params` anyway; a copy kept here would only hold memory."""
    if set(program.params) == set(params) and all(
            np.shape(program.params[name]) == np.shape(value) for name, value in params.items()):
        program.params = params
    return program


def convert(model: torch.nn.Module, *, max_length: int, max_batch: int, dtype: Any) -> dict[str, Any]:
    """`from_causal_lm`'s conversion: the arguments of its `CausalLM` (the programs, the cache's
    layers, the layer types, the generation config, the name, whether decoding rolls)."""
    if not is_model(model):
        raise InputError(f"from_causal_lm takes a transformers PreTrainedModel, got {type(model).__name__}")
    transformers_adapter.require()
    if max_length < 2 or max_batch < 1:
        raise InputError(f"from_causal_lm: max_length should be at least 2 and max_batch at least 1, "
                         f"got {max_length} and {max_batch}")
    policy = precision_policy(dtype)
    if policy is None:
        return _convert(model, max_length, max_batch, contextlib.nullcontext)
    autocast = functools.partial(policy.autocast, module_device(model))  # autocast of the model's device
    with autocast():  # the cache probe and the exports all run under it
        return _convert(policy.prepare(model), max_length, max_batch, autocast)


class _FixedCount(ExportError):
    """torch.export fixed the number of new tokens of a step meant to take any number."""


def _convert(model, max_length: int, max_batch: int, autocast: Callable) -> dict[str, Any]:
    if callable(getattr(model, "build_delay_pattern_mask", None)):
        # MusicGen: its preparation of each step's inputs overwrites them with a delay pattern
        # over its codebooks (each codebook one step behind the one before), which a step over
        # given tokens does not apply
        raise InputError(f"{type(model).__name__}: its generate lays each step's codebooks out in a delay "
                         "pattern (build_delay_pattern_mask), which from_causal_lm does not reproduce")
    step = CausalLMStep(model, max_length)
    if max_batch > 1 and step.decoding_mixes_rows():
        raise MaxBatchError(f"{type(model).__name__}: decoding two rows at once mixes their states in transformers' "
                            "code (a [B, H] state added to [B, 1, H] activations), so its batched tokens are not its "
                            "own row by row; from_causal_lm takes it with max_batch=1", max_batch=1)
    batch = min(2, max_batch)  # 2 keeps torch.export from specializing the batch to 1
    specs = step.cache_specs(batch)
    rows = torch.export.Dim("batch", min=1, max=max_batch) if max_batch > 1 else torch.export.Dim.STATIC
    try:
        step, converted, decoder, prefill_for = _convert_steps(step, specs, rows, autocast)
    except ExportError:
        if step.decoding_ignores_mask():
            raise InputError(f"{type(model).__name__}: its decoder builds no attention mask once it has a cache, so "
                             "over a cache of fixed slots it would attend to the empty ones; from_causal_lm does "
                             "not take it") from None
        raise
    return dict(step=converted, cache_specs=step.cache_specs(1), decoder=decoder, prefill_for=prefill_for,
                max_batch=max_batch, max_length=max_length, layer_types=_layer_types(step.text_config),
                generation_config=model_generation_config(model), name=type(model).__name__,
                rolls=step.windows_only)


def _layer_types(config) -> list[str]:
    """Each layer's attention: the config's `layer_types`, else as transformers' cache reads a
    config without them (Mistral's): a `sliding_window` makes every layer a sliding one, an
    `attention_chunk_size` a chunked one."""
    kinds = getattr(config, "layer_types", None)
    if kinds:
        return list(kinds)
    if getattr(config, "sliding_window", None) is not None:
        kind = "sliding_attention"
    elif getattr(config, "attention_chunk_size", None) is not None:
        kind = "chunked_attention"
    else:
        kind = "full_attention"
    return [kind] * config.num_hidden_layers


def _convert_steps(step: CausalLMStep, specs, rows, autocast: Callable):
    """(step, converted, decoder, prefill_for): one program for prefill and decode where
    torch.export keeps the token count symbolic, else a decoder and a prefill program per prompt
    length (`step` then its split variant)."""
    converted = decoder = prefill_for = None
    if not step.split:
        try:
            converted = _convert_step(step, specs, rows, tokens=2)
        except ExportError as e:
            # code that branches on whether the cache holds tokens (GIT's `past_length > 0`): a
            # prefill from an empty cache and a decode after it are each one program
            if "GuardOnDataDependentSymNode" not in str(e):
                raise
            step = step.variant(split=True)
    if step.split:
        decoder = _convert_step(step.variant(decoding=True), specs, rows, tokens=1)

        def prefill_for(count: int) -> JaxModel:
            with autocast():
                return _convert_step(step, specs, rows, tokens=count, fixed=True)
        try:
            converted = _convert_step(step, specs, rows, tokens=2)
        except _FixedCount:
            pass  # a scan over the prompt in Python: `prefill_for` makes a program per prompt length
    return step, converted, decoder, prefill_for


def _convert_step(step: CausalLMStep, specs, rows, *, tokens: int, fixed: bool = False) -> JaxModel:
    """`step` exported and converted: the batch symbolic (`rows`), and the number of new tokens
    symbolic from an example of `tokens`, or fixed at `tokens` when `fixed` or 1 (a one-token
    decoder); `_FixedCount` where torch.export fixes a count meant to be symbolic."""
    batch = next(shape[0] for layer in specs for shape, _ in layer.values())
    device = module_device(step.model)  # examples where the model is: cuda, cpu, or meta
    states = [{name: torch.zeros(shape, dtype=dtype, device=device) for name, (shape, dtype) in layer.items()}
              for layer in specs]
    ids = torch.zeros(batch, tokens, dtype=torch.long, device=device)
    example = (ids, torch.ones(batch, step.max_length, dtype=torch.long, device=device), torch.zeros_like(ids),
               torch.tensor(1 if step.decoding else 0, device=device), states)
    per_layer = [{name: {0: rows} for name in layer} for layer in states]

    def convert(count):
        count = count or torch.export.Dim.STATIC
        dynamic = ({0: rows, 1: count}, {0: rows}, {0: rows, 1: count}, None, per_layer)
        converted = from_torch(step, example, dynamic_shapes=dynamic, train=False)
        converted.name = type(step.model).__name__  # errors name the user's model, not the wrapper
        return converted

    if fixed or tokens == 1:
        return convert(None)
    try:
        return convert(torch.export.Dim("tokens", min=1, max=step.max_length))
    except ExportError as e:
        # torch.export's solver cannot always prove a guard that holds for every token count
        # (Aria's `T * min(64, 64 * T) == 64 * T`); let it keep the count dynamic under its guards
        if "Constraints violated (tokens)" not in str(e):
            raise
        try:
            converted = convert(torch.export.Dim.AUTO)
        except ExportError as again:
            if "Constraints violated" not in str(again):
                raise
            converted = None  # the count fixed, and the batch with it
        # fixed, or kept dynamic over fewer counts than the cache holds (MiniMax's blocks of
        # tokens, looped over in Python: 2 to 4 tokens, one block)
        symbol = converted.program.user_inputs[0].dims.get(1) if converted is not None else None
        low, high = converted.program.dim_ranges.get(symbol, (1, None)) if symbol is not None else (1, None)
        if symbol is None or low > 2 or (high is not None and high < step.max_length):
            raise _FixedCount(f"{type(step.model).__name__}: torch.export fixes the number of new tokens of its "
                              f"step, so it cannot serve both prefill and decode ({e})") from None
        return converted

