"""Generation (issue 19): `jaxport.from_causal_lm` against Hugging Face's own `generate`.

Tiny random models built from configs, each with its own seed: greedy decoding token for token
against `model.generate(do_sample=False)` on a left-padded batch of three prompts of different
lengths (sliding-window and hybrid models generate past their window), the cache after prefill
against PyTorch's `past_key_values`, the processed sampling distribution against transformers'
logits processors, EOS handling, and the eager frontend's `generate`.
"""

from __future__ import annotations

import copy
import functools
import json
import os
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import transformers
from jax.experimental import checkify
from transformers.generation.logits_process import (
    MinPLogitsWarper,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

import jaxport
from jaxport.generation import process_logits

SMALL = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, vocab_size=100)
#: Per model type: what its tiny config needs beyond SMALL. Windows of 4 slots make the sliding
#: layers drop old tokens within the prompt already.
CONFIGS = {
    "llama": {},
    "gpt2": dict(n_embd=32, n_layer=2, n_head=4, vocab_size=100, n_positions=128),
    "mistral": dict(sliding_window=4),
    "qwen2": {},
    "gemma2": dict(head_dim=8, sliding_window=4),
    "gemma3_text": dict(head_dim=8, sliding_window=4, layer_types=["sliding_attention", "full_attention"]),
    "phi3": dict(pad_token_id=0),
    "mixtral": dict(num_local_experts=4, num_experts_per_tok=2),
    # linear-attention layers whose states its cache keeps beside its layers (`linear_cache`)
    "minimax": dict(head_dim=8, num_local_experts=2, num_experts_per_tok=1, block_size=4,
                    layer_types=["full_attention", "linear_attention"]),
    # experts of attention and MLP that split their rows by sizes read out of a tensor
    "jetmoe": dict(num_local_experts=4, num_experts_per_tok=2, kv_channels=8, num_attention_heads=4,
                   num_key_value_heads=4),
    # recurrent layers: a prefill program per prompt length (Mamba's scan loops in Python), and a
    # hybrid of Mamba and attention layers
    "mamba": dict(state_size=4, expand=2, conv_kernel=4),
    "jamba": dict(attn_layer_period=2, attn_layer_offset=1, num_experts=2, expert_layer_period=2,
                  expert_layer_offset=1, mamba_d_state=4, mamba_expand=2, pad_token_id=0),
    # BERT-style decoders: positions from arange(cache length, cache length + T); a cache that
    # is an EncoderDecoderCache with its cross-attention half empty
    "roformer": dict(is_decoder=True, embedding_size=32, max_position_embeddings=64),
    "rembert": dict(is_decoder=True, input_embedding_size=16, output_embedding_size=16, pad_token_id=0,
                    bos_token_id=1, eos_token_id=2),
    # no cache at all: each step runs the model over every token so far, as transformers does
    "openai-gpt": dict(n_embd=32, n_layer=2, n_head=4, vocab_size=100, n_positions=64),
    # no cache, and its generate runs the model over the tokens and a mask token after them, with
    # each position's language (langs) and no attention mask (positions counted past its padding)
    "xlm": dict(emb_dim=32, n_layers=2, n_heads=4, vocab_size=100, n_langs=2, use_lang_emb=True, lang_id=1),
    # no cache returned either: its recurrent and local-attention states live in its modules
    "recurrent_gemma": dict(lru_width=32, attention_window_size=4, block_types=["recurrent", "attention"],
                            head_dim=8),
}
#: Model types whose configs name their sizes their own way (no SMALL).
OWN_SIZES = ("gpt2", "openai-gpt", "xlm")
#: Qwen3-Next: a gated-delta-rule linear-attention layer beside a full-attention one.
QWEN3_NEXT = dict(layer_types=["linear_attention", "full_attention"], linear_num_value_heads=2,
                  linear_num_key_heads=2, linear_key_head_dim=8, linear_value_head_dim=8, head_dim=8,
                  num_experts=2, num_experts_per_tok=1, moe_intermediate_size=16,
                  shared_expert_intermediate_size=16)
NEW_TOKENS = 32
#: The model types `make test-compat` generates with: a key/value cache, and a recurrent state.
COMPAT = ("llama", "mamba")
ROOT = Path(__file__).resolve().parents[2]


def tiny_model(model_type: str, seed: int = 0) -> transformers.PreTrainedModel:
    extra = CONFIGS[model_type]
    fields = extra if model_type in OWN_SIZES else {**SMALL, **extra}
    config = transformers.AutoConfig.for_model(model_type, **fields)
    torch.manual_seed(seed)
    return transformers.AutoModelForCausalLM.from_config(config).eval()


def prompts() -> tuple[torch.Tensor, torch.Tensor]:
    """Three prompts of 7, 3 and 5 tokens, left-padded with 0 as transformers pads for generation."""
    ids = torch.tensor([[11, 12, 13, 14, 15, 16, 17], [0, 0, 0, 0, 21, 22, 23], [0, 0, 31, 32, 33, 34, 35]])
    mask = (torch.arange(7)[None] >= torch.tensor([[0], [4], [2]])).long()
    return ids, mask


def hf_generate(model, ids, mask, **kwargs) -> np.ndarray:
    with torch.no_grad():
        return model.generate(ids, attention_mask=mask, pad_token_id=0, **kwargs).numpy()


#: Jamba (43 s: Mamba's layers, experts and attention together) is `slow`; its parts run here.
SLOW = ("jamba",)


@pytest.mark.parametrize("model_type", [
    pytest.param(t, marks=[pytest.mark.compat] if t in COMPAT else [pytest.mark.slow] if t in SLOW else [])
    for t in CONFIGS])
def test_greedy_matches_transformers(model_type):
    model = tiny_model(model_type)
    ids, mask = prompts()
    lm = jaxport.from_causal_lm(model, max_length=ids.shape[1] + NEW_TOKENS, max_batch=4)
    got = np.asarray(lm.generate(ids, mask, max_new_tokens=NEW_TOKENS, pad_token_id=0))
    want = hf_generate(model, ids, mask, do_sample=False, max_new_tokens=NEW_TOKENS)
    assert got.shape == want.shape
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("model_type", ["llama", "gemma2"])
def test_prefill_cache_and_decode_logits_match_pytorch(model_type):
    """The cache after prefill holds PyTorch's `past_key_values` in its first slots, and prefill's
    and one decode step's logits are PyTorch's dynamic-cache forward's (gemma2: hybrid
    sliding/global layers)."""
    model = tiny_model(model_type, seed=1)
    ids, mask = prompts()
    lm = jaxport.from_causal_lm(model, max_length=16, max_batch=3)
    logits, cache = lm.prefill(lm.params, lm.init_cache(3), ids.numpy(), mask.numpy())
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        out = model(ids, attention_mask=mask, position_ids=positions, use_cache=True)
    # what padding computes (queries that may attend to nothing) depends on how many slots the
    # cache has, so only real tokens' logits, keys and values are compared
    real = mask.bool().numpy()
    np.testing.assert_allclose(np.asarray(logits)[real], out.logits.numpy()[real], rtol=1e-5, atol=1e-5)
    for layer, torch_layer in zip(cache["layers"], out.past_key_values.layers):
        slots = layer["keys"].shape[2]  # a sliding layer's: its window's but one, the newest token last
        last = 7 if slots == 16 else slots
        for ours, theirs in ((layer["keys"], torch_layer.keys), (layer["values"], torch_layer.values)):
            kept = theirs.shape[2]  # a sliding layer's dynamic cache keeps its window's last tokens but one
            ours, theirs = np.moveaxis(np.asarray(ours)[:, :, last - kept:last], 2, 1), np.moveaxis(theirs.numpy(), 2, 1)
            np.testing.assert_allclose(ours[real[:, 7 - kept:]], theirs[real[:, 7 - kept:]], rtol=1e-5, atol=1e-6)
        assert not np.asarray(layer["keys"])[:, :, last:].any()  # slots past the prompt stay empty
    assert int(cache["length"]) == 7

    token = out.logits[:, -1].argmax(-1, keepdim=True)
    step_logits, cache = lm.decode(lm.params, cache, token.numpy(), positions[:, -1:].numpy() + 1)
    with torch.no_grad():
        step = model(token, attention_mask=torch.cat([mask, torch.ones(3, 1, dtype=torch.long)], 1),
                     position_ids=positions[:, -1:] + 1, past_key_values=out.past_key_values, use_cache=True)
    np.testing.assert_allclose(np.asarray(step_logits), step.logits.numpy(), rtol=1e-5, atol=1e-5)
    assert int(cache["length"]) == 8


#: Sliding-window layers of 4 tokens (3 slots): every layer (Mistral), alternating with full ones (Gemma 2),
#: in a pattern (Gemma 3), and from `max_window_layers` on (Qwen2).
WINDOWED = {
    "mistral": {},
    "gemma2": {},
    "gemma3_text": {},
    "qwen2": dict(use_sliding_window=True, sliding_window=4, max_window_layers=1),
}


@pytest.mark.parametrize("model_type", list(WINDOWED))
def test_sliding_window_layers_keep_their_window(model_type):
    """A sliding-window layer's cache holds its window's earlier tokens (3 slots for a window of
    4), not max_length: memory O(window); greedy tokens equal transformers' 32 tokens past
    prompts that already fill the window."""
    extra = {**CONFIGS.get(model_type, {}), **WINDOWED[model_type]}
    config = transformers.AutoConfig.for_model(model_type, **{**SMALL, **extra})
    torch.manual_seed(3)
    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    ids, mask = prompts()
    max_length = ids.shape[1] + NEW_TOKENS
    lm = jaxport.from_causal_lm(model, max_length=max_length, max_batch=4)
    sliding = transformers.DynamicCache(config=model.config).is_sliding
    assert any(sliding)
    assert [layer["keys"].shape[2] for layer in lm.init_cache(3)["layers"]] == [
        3 if windowed else max_length for windowed in sliding]
    got = np.asarray(lm.generate(ids, mask, max_new_tokens=NEW_TOKENS, pad_token_id=0))
    np.testing.assert_array_equal(got, hf_generate(model, ids, mask, do_sample=False, max_new_tokens=NEW_TOKENS))


#: Models whose every layer keeps a window only: Mistral-style, and Qwen2 with no full layer.
ONLY_WINDOWS = {
    "mistral": dict(sliding_window=4),
    "qwen2": dict(use_sliding_window=True, sliding_window=4, max_window_layers=0),
}


@pytest.mark.parametrize("model_type", list(ONLY_WINDOWS))
def test_a_model_of_windows_only_decodes_past_max_length(model_type):
    """Where every layer keeps its window only, nothing a step computes depends on how many tokens
    came before: 30 new tokens after prompts of 7 from a cache of 8 slots, equal to
    transformers'; `decode` past max_length too, while a model with a full layer is refused.
    One prompt is padded up to its last token, so that its padding is still in the window when
    the sequence passes max_length."""
    config = transformers.AutoConfig.for_model(model_type, **{**SMALL, **ONLY_WINDOWS[model_type]})
    torch.manual_seed(3)
    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    ids, mask = prompts()
    ids[1, :6], mask[1, :6] = 0, 0
    lm = jaxport.from_causal_lm(model, max_length=8, max_batch=3)
    assert lm.rolls and [layer["keys"].shape[2] for layer in lm.init_cache(3)["layers"]] == [3, 3]
    assert lm.layer_types == ("sliding_attention", "sliding_attention")
    got = np.asarray(lm.generate(ids, mask, max_new_tokens=30, pad_token_id=0))
    want = hf_generate(model, ids, mask, do_sample=False, max_new_tokens=30)
    np.testing.assert_array_equal(got, want)

    # each decode step's logits, up to 37 tokens in 10 slots, against the model over the whole sequence
    whole = torch.cat([mask, torch.ones(3, 30, dtype=mask.dtype)], dim=1)
    with torch.no_grad():
        expected = model(input_ids=torch.from_numpy(want), attention_mask=whole,
                         position_ids=(whole.cumsum(1) - 1).clamp(min=0)).logits.numpy()
    _, cache = lm.prefill(lm.params, lm.init_cache(3), ids.numpy(), mask.numpy())
    positions = (mask.sum(1, keepdim=True) - 1).numpy()
    for step in range(1, 30):
        logits, cache = lm.decode(lm.params, cache, want[:, 6 + step:7 + step], positions + step)
        np.testing.assert_allclose(np.asarray(logits)[:, 0], expected[:, 6 + step], rtol=1e-4, atol=1e-5)
    assert int(cache["length"]) == 36
    with pytest.raises(jaxport.InputError, match="6 tokens in one decode step; its windows leave room for 5"):
        lm.decode(lm.params, cache, np.zeros((3, 6), np.int32), np.zeros((3, 6), np.int32))

    mixed = transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.for_model(
        "qwen2", **{**SMALL, **WINDOWED["qwen2"]})).eval()
    short = jaxport.from_causal_lm(mixed, max_length=8, max_batch=3)
    assert not short.rolls
    with pytest.raises(jaxport.InputError, match="need 37 cache slots; max_length is 8"):
        short.generate(ids, mask, max_new_tokens=30, pad_token_id=0)


def test_prefill_and_decode_donate_the_cache():
    model = tiny_model("llama", seed=2)
    ids, mask = prompts()
    lm = jaxport.from_causal_lm(model, max_length=12, max_batch=3)
    cache = lm.init_cache(3)
    logits, new_cache = lm.prefill(lm.params, cache, ids.numpy(), mask.numpy())
    assert cache["layers"][0]["keys"].is_deleted()  # written in place, not copied
    _, newer = lm.decode(lm.params, new_cache, np.zeros((3, 1), np.int32), np.full((3, 1), 7, np.int32))
    assert new_cache["layers"][0]["keys"].is_deleted() and int(newer["length"]) == 8


SAMPLING = [
    dict(temperature=0.7),
    dict(top_k=5),
    dict(top_p=0.8),
    dict(temperature=1.3, top_k=20, top_p=0.9),
    dict(temperature=0.5, top_k=1),
    dict(top_p=0.01),  # keeps only the most likely token (min_tokens_to_keep)
    dict(min_p=0.1),
    dict(temperature=0.8, top_k=30, top_p=0.95, min_p=0.05),
    dict(min_p=1.0),  # only the most likely token (ties with it kept)
]


@pytest.mark.parametrize("settings", SAMPLING, ids=lambda s: ",".join(f"{k}={v}" for k, v in s.items()))
@pytest.mark.compat
def test_processed_logits_match_transformers(settings, rng):
    """The distribution sampled from: transformers' warpers in generate's order (temperature,
    top-k, top-p, min-p) against `process_logits`: the same tokens removed, the same kept logits."""
    scores = torch.from_numpy(rng.standard_normal((4, 100)).astype(np.float32) * 3)
    warpers = []
    if "temperature" in settings:
        warpers.append(TemperatureLogitsWarper(settings["temperature"]))
    if "top_k" in settings:
        warpers.append(TopKLogitsWarper(settings["top_k"]))
    if "top_p" in settings:
        warpers.append(TopPLogitsWarper(settings["top_p"]))
    if "min_p" in settings:
        warpers.append(MinPLogitsWarper(settings["min_p"]))
    want = scores.clone()
    for warper in warpers:
        want = warper(None, want)
    got = np.asarray(process_logits(jnp.asarray(scores.numpy()), **settings))
    np.testing.assert_array_equal(np.isinf(got), np.isinf(want.numpy()))
    kept = ~np.isinf(got)
    # XLA:CPU's division is within an ulp of IEEE's, not always equal to it
    np.testing.assert_allclose(got[kept], want.numpy()[kept], rtol=1e-6)


def test_sampling_is_reproducible_and_follows_its_settings():
    model = tiny_model("llama", seed=3)
    ids, mask = prompts()
    lm = jaxport.from_causal_lm(model, max_length=20, max_batch=3)
    sample = dict(max_new_tokens=12, do_sample=True, temperature=1.5, top_k=10, pad_token_id=0)
    first = np.asarray(lm.generate(ids, mask, rng=jax.random.key(7), **sample))
    again = np.asarray(lm.generate(ids, mask, rng=jax.random.key(7), **sample))
    other = np.asarray(lm.generate(ids, mask, rng=jax.random.key(8), **sample))
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(first, other)
    # top_k=1 leaves one token to draw: sampling is greedy decoding then
    greedy = np.asarray(lm.generate(ids, mask, max_new_tokens=12, do_sample=False, pad_token_id=0))
    top1 = np.asarray(lm.generate(ids, mask, max_new_tokens=12, do_sample=True, top_k=1, pad_token_id=0))
    np.testing.assert_array_equal(top1, greedy)


def test_rows_stop_at_eos_independently():
    """A row that produces EOS is padded afterwards while the others go on; generation ends
    when every row has stopped, with transformers' output length."""
    model = tiny_model("qwen2", seed=4)
    ids, mask = prompts()
    lm = jaxport.from_causal_lm(model, max_length=30, max_batch=3)
    greedy = np.asarray(lm.generate(ids, mask, max_new_tokens=20, pad_token_id=0))
    eos = int(greedy[0, 7 + 2])  # the third token row 0 generates
    got = np.asarray(lm.generate(ids, mask, max_new_tokens=20, eos_token_id=eos, pad_token_id=0))
    want = hf_generate(model, ids, mask, do_sample=False, max_new_tokens=20, eos_token_id=eos)
    assert got.shape == want.shape
    np.testing.assert_array_equal(got, want)
    assert (got[0, 7 + 3:] == 0).all()


@pytest.fixture(scope="module")
def greedy_llama():
    """A tiny Llama converted for 16 new tokens, with its plain greedy tokens. (Each setting's
    own comparison with transformers is in test_settings.py.)"""
    model = tiny_model("llama", seed=3)
    ids, mask = prompts()
    lm = jaxport.from_causal_lm(model, max_length=7 + 16, max_batch=4)
    base = hf_generate(model, ids, mask, do_sample=False, max_new_tokens=16)
    return model, lm, base


def test_settings_come_from_the_generation_config(greedy_llama):
    """A setting in the model's generation config (or a `generation_config=` passed in) applies
    as the call's keyword would; the call's keyword wins."""
    model, lm, _ = greedy_llama
    ids, mask = prompts()
    want = hf_generate(model, ids, mask, do_sample=False, max_new_tokens=16, repetition_penalty=1.3)
    config = transformers.GenerationConfig(repetition_penalty=1.3, max_new_tokens=16)
    np.testing.assert_array_equal(np.asarray(lm.generate(ids, mask, generation_config=config, pad_token_id=0)), want)
    plain = np.asarray(lm.generate(ids, mask, max_new_tokens=16, pad_token_id=0))
    got = lm.generate(ids, mask, generation_config=config, repetition_penalty=1.0, pad_token_id=0)
    np.testing.assert_array_equal(np.asarray(got), plain)


def test_num_return_sequences_samples_each_prompt_several_times(greedy_llama):
    _, lm, _ = greedy_llama
    ids, mask = prompts()
    out = np.asarray(lm.generate(ids[:1], mask[:1], max_new_tokens=8, do_sample=True, num_return_sequences=3,
                                 pad_token_id=0, rng=jax.random.key(1)))
    assert out.shape[0] == 3
    np.testing.assert_array_equal(out[:, :7], np.repeat(ids[:1].numpy(), 3, axis=0))
    assert len({tuple(row) for row in out[:, 7:]}) > 1  # independent draws
    with pytest.raises(jaxport.InputError, match="num_return_sequences=3 needs do_sample=True"):
        lm.generate(ids[:1], mask[:1], max_new_tokens=8, num_return_sequences=3)
    with pytest.raises(jaxport.InputError, match=r"batch 6 is outside 1\.\.4"):
        lm.generate(ids[:2], mask[:2], max_new_tokens=8, do_sample=True, num_return_sequences=3)


BEAMS = {
    "two": lambda b: dict(num_beams=2),
    "four,return_two": lambda b: dict(num_beams=4, num_return_sequences=2),
    "eos": lambda b: dict(num_beams=3, eos_token_id=int(b[0, 9])),
    "eos,early_stopping": lambda b: dict(num_beams=3, eos_token_id=int(b[0, 9]), early_stopping=True),
    "two_eos,negative_penalty,never": lambda b: dict(num_beams=3, eos_token_id=[int(b[0, 9]), int(b[1, 10])],
                                                     length_penalty=-1.0, early_stopping="never"),
    "penalty,processors": lambda b: dict(num_beams=4, eos_token_id=int(b[0, 9]), length_penalty=2.0,
                                         num_return_sequences=4, repetition_penalty=1.2),
}


@pytest.mark.parametrize("case", [pytest.param(c, marks=pytest.mark.compat if c == "two" else ()) for c in BEAMS])
def test_beam_search_matches_transformers(case):
    """Beam search as its own jitted loop: transformers' hypotheses, for each stopping rule
    (`early_stopping` True, False, "never"), length penalties of both signs, several EOS ids,
    several returned beams and a processor on the beams' log-probabilities."""
    model = tiny_model("llama", seed=3)
    ids, mask = prompts()
    lm = jaxport.from_causal_lm(model, max_length=7 + 12, max_batch=12)
    base = hf_generate(model, ids, mask, do_sample=False, max_new_tokens=12)
    settings = BEAMS[case](base)
    want = hf_generate(model, ids, mask, do_sample=False, max_new_tokens=12, **settings)
    got = np.asarray(lm.generate(ids, mask, max_new_tokens=12, pad_token_id=0, **settings))
    assert got.shape == want.shape
    np.testing.assert_array_equal(got, want)


def test_beam_search_refuses_what_it_cannot_hold():
    model = tiny_model("llama", seed=3)
    ids, mask = prompts()
    lm = jaxport.from_causal_lm(model, max_length=7 + 4, max_batch=6)
    with pytest.raises(jaxport.InputError, match="3 prompts with num_beams=3 need 9 cache rows; max_batch is 6"):
        lm.generate(ids, mask, max_new_tokens=4, num_beams=3)
    with pytest.raises(jaxport.InputError, match="num_return_sequences=3 is more than num_beams=2"):
        lm.generate(ids, mask, max_new_tokens=4, num_beams=2, num_return_sequences=3)
    with pytest.raises(jaxport.InputError, match="beam sampling"):
        lm.generate(ids, mask, max_new_tokens=4, num_beams=2, do_sample=True)


@pytest.mark.parametrize("setting", [dict(typical_p=0.9), dict(stop_strings=["end"]), dict(dola_layers="low"),
                                     dict(output_scores=True), dict(num_beam_groups=2), dict(penalty_alpha=0.6)],
                         ids=lambda s: next(iter(s)))
def test_generate_refuses_settings_it_does_not_implement(greedy_llama, setting):
    """The allow-list: a GenerationConfig field that would change the output and that jaxport
    does not implement is refused by name, whether the call or the model's config sets it."""
    model, lm, _ = greedy_llama
    ids, mask = prompts()
    name = next(iter(setting))
    with pytest.raises(jaxport.InputError, match=name):
        lm.generate(ids, mask, max_new_tokens=4, **setting)
    config = copy.deepcopy(lm.generation_config)
    setattr(config, name, setting[name])
    with pytest.raises(jaxport.InputError, match=name):
        lm.generate(ids, mask, max_new_tokens=4, generation_config=config)
    with pytest.raises(jaxport.InputError, match="unknown settings temprature"):
        lm.generate(ids, mask, max_new_tokens=4, temprature=0.5)


def test_generate_refuses_what_it_cannot_do():
    model = tiny_model("llama", seed=5)
    ids, mask = prompts()
    lm = jaxport.from_causal_lm(model, max_length=10, max_batch=2)
    with pytest.raises(jaxport.InputError, match="cache slots; max_length is 10"):
        lm.generate(ids[:2], mask[:2], max_new_tokens=4)
    with pytest.raises(jaxport.InputError, match=r"batch 3 is outside 1\.\.2"):
        lm.generate(ids, mask, max_new_tokens=2)
    model.generation_config.typical_p = 0.5
    lm = jaxport.from_causal_lm(model, max_length=10, max_batch=3)
    with pytest.raises(jaxport.InputError, match="typical_p=0.5"):
        lm.generate(ids, mask, max_new_tokens=2)
    with pytest.raises(jaxport.InputError, match="PreTrainedModel"):
        jaxport.from_causal_lm(torch.nn.Linear(2, 2), max_length=8)


@pytest.mark.parametrize("model_type", ["llama", pytest.param("mistral", marks=pytest.mark.slow)])
def test_eager_generate_matches_the_cpu(model_type):
    """`model.to("jax").generate(...)` under jaxport.eager(), with transformers' default dynamic
    cache, gives the CPU's tokens."""
    model = tiny_model(model_type, seed=6)
    ids, mask = prompts()
    want = hf_generate(model, ids, mask, do_sample=False, max_new_tokens=6)
    with jaxport.eager(), torch.no_grad():
        got = model.to("jax").generate(ids.to("jax"), attention_mask=mask.to("jax"), do_sample=False,
                                       max_new_tokens=6, pad_token_id=0).to("cpu")
    np.testing.assert_array_equal(got.numpy(), want)


def test_decode_step_exports_with_symbolic_batch(tmp_path):
    """`lm.export()`: the step as a serialized `jax.export` artifact whose batch and token count
    are symbolic; loaded back, it decodes a batch size it was not exported at as `lm.decode` does."""
    model = tiny_model("llama", seed=7)
    ids, mask = prompts()
    lm = jaxport.from_causal_lm(model, max_length=12, max_batch=4)
    loaded = jaxport.load_exported(lm.export().save(tmp_path / "step"))
    _, cache = lm.prefill(lm.params, lm.init_cache(3), ids.numpy(), mask.numpy())
    states = [np.asarray(layer[name]) for layer in cache["layers"] for name in sorted(layer)]
    token, position = np.array([[5], [6], [7]], np.int32), np.array([[7], [3], [5]], np.int32)
    slots = np.asarray(cache["mask"]).copy()
    slots[:, 7] = 1
    exported_logits = np.asarray(loaded(token, slots, position, np.int32(7), *states)[0])
    logits, _ = lm.decode(lm.params, cache, token, position)
    np.testing.assert_allclose(exported_logits, np.asarray(logits), rtol=1e-6, atol=1e-6)


def test_tensor_parallel_decode_matches_one_device():
    """Greedy generation with the parameters split by `jaxport.sharding.tensor_parallel()` over a
    (data=2, model=4) mesh of 8 CPU devices gives one device's tokens (a subprocess: the device
    count is fixed when JAX starts)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
           "JAX_PLATFORMS": "cpu"}
    proc = subprocess.run([sys.executable, "-m", "tests.distributed.sharded_decode"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    run = json.loads(proc.stdout.strip().splitlines()[-1])
    assert run["devices"] == 8
    assert run["sharded"] == run["single"]
    assert run["q_proj"] == "P('model', None)" and not run["keys_replicated"]


def test_tokens_stream_as_they_are_made(greedy_llama):
    """A streamer gets the prompt, then each step's tokens, then end(), from inside the jitted
    loop; `stream` yields the same steps; the tokens are generate's."""
    _, lm, _ = greedy_llama
    ids, mask = prompts()
    want = np.asarray(lm.generate(ids, mask, max_new_tokens=10, pad_token_id=0))

    class Recorder:
        def __init__(self):
            self.calls = []

        def put(self, value):
            self.calls.append(np.asarray(value))

        def end(self):
            self.calls.append("end")

    recorder = Recorder()
    got = np.asarray(lm.generate(ids, mask, max_new_tokens=10, pad_token_id=0, streamer=recorder))
    np.testing.assert_array_equal(got, want)
    assert recorder.calls[-1] == "end" and len(recorder.calls) == 1 + 10 + 1
    np.testing.assert_array_equal(recorder.calls[0], ids.numpy())
    np.testing.assert_array_equal(np.stack(recorder.calls[1:-1], axis=1), want[:, 7:])
    steps = list(lm.stream(ids, mask, max_new_tokens=10, pad_token_id=0))
    np.testing.assert_array_equal(np.stack(steps, axis=1), want[:, 7:])
    with pytest.raises(jaxport.InputError, match="streamer cannot follow beam search"):
        lm.generate(ids[:1], mask[:1], max_new_tokens=4, num_beams=2, streamer=recorder)
    with pytest.raises(jaxport.InputError, match="typical_p"):  # raised in the caller's thread
        list(lm.stream(ids, mask, max_new_tokens=4, typical_p=0.5))


def test_steps_refuse_to_write_past_max_length(greedy_llama):
    """prefill/decode refuse tokens past max_length (the cache is left as it was); inside a
    caller's jit, `checked=True` makes it a checkify error instead of a clamped write."""

    _, lm, _ = greedy_llama  # max_length 23
    ids, mask = prompts()
    _, cache = lm.prefill(lm.params, lm.init_cache(3), ids.numpy(), mask.numpy())
    over = np.zeros((3, 17), np.int32)
    with pytest.raises(jaxport.InputError, match="17 more tokens after 7 need 24 cache slots; max_length is 23"):
        lm.decode(lm.params, cache, over, over)
    assert not cache["layers"][0]["keys"].is_deleted()
    with pytest.raises(jaxport.InputError, match="max_length is 23"):
        lm.prefill(lm.params, cache, np.zeros((3, 17), np.int32))

    def step(params, cache, tokens, positions):
        return lm.decode_step(params, cache, tokens, positions, checked=True)

    checked = jax.jit(checkify.checkify(step))
    error, _ = checked(lm.params, cache, over, over)
    assert "17 more tokens after 7 overflow max_length=23" in error.get()
    error, _ = checked(lm.params, cache, over[:, :16], over[:, :16])
    assert error.get() is None


def test_recurrent_layers_prefill_fresh_and_decode_one_token(tmp_path, monkeypatch):
    """A model with recurrent layers (Qwen3-Next's linear attention) has a prefill and a
    one-token decode program, as transformers runs them: greedy tokens equal to transformers',
    its conv and recurrent states in the cache, and what those programs cannot do refused."""
    # Under torch.export the chunked rule solves its triangular system by a Python loop over the
    # chunk: 64 rows by default, about 40 s per exported program here. A chunk of 8 computes the
    # same function (transformers' tokens below come from the same rule) in an eighth of the loop.
    from transformers.models.qwen3_next import modeling_qwen3_next as qwen3_next

    monkeypatch.setattr(qwen3_next, "torch_chunk_gated_delta_rule",
                        functools.partial(qwen3_next.torch_chunk_gated_delta_rule, chunk_size=8))
    config = transformers.AutoConfig.for_model("qwen3_next", **{**SMALL, **QWEN3_NEXT})
    torch.manual_seed(11)
    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    ids, mask = prompts()
    lm = jaxport.from_causal_lm(model, max_length=ids.shape[1] + 10, max_batch=3)
    # its chunked rule loops over blocks of the prompt in Python: a prefill program per length
    assert lm.split and lm.step is None
    np.testing.assert_array_equal(np.asarray(lm.generate(ids, mask, max_new_tokens=10, pad_token_id=0)),
                                  hf_generate(model, ids, mask, do_sample=False, max_new_tokens=10))
    cache = lm.init_cache(3)
    assert {"conv_0", "recurrent_0"} <= set(cache["layers"][0]) and set(cache["layers"][1]) == {"keys", "values"}

    logits, cache = lm.prefill(lm.params, cache, ids.numpy(), mask.numpy())
    with pytest.raises(jaxport.InputError, match="starts from an empty cache"):
        lm.prefill(lm.params, cache, ids.numpy(), mask.numpy())
    with pytest.raises(jaxport.InputError, match="one token at a time, got 2"):
        lm.decode(lm.params, cache, np.zeros((3, 2), np.int32), np.zeros((3, 2), np.int32))
    checked = jax.jit(checkify.checkify(functools.partial(lm.prefill_step, checked=True)))
    error, _ = checked(lm.params, cache, ids.numpy(), mask.numpy())
    with pytest.raises(checkify.JaxRuntimeError, match="holds 7 tokens"):
        error.throw()

    # the decoder exported on its own decodes as lm.decode does
    token, position = np.array([[5], [6], [7]], np.int32), np.array([[7], [3], [5]], np.int32)
    loaded = jaxport.load_exported(lm.export(decoder=True).save(tmp_path / "decoder"))
    states = [np.asarray(layer[name]) for layer in cache["layers"] for name in sorted(layer)]
    slots = np.asarray(cache["mask"]).copy()
    slots[:, 7] = 1
    exported_logits = np.asarray(loaded(token, slots, position, np.int32(7), *states)[0])
    np.testing.assert_allclose(exported_logits, np.asarray(lm.decode(lm.params, cache, token, position)[0]),
                               rtol=1e-6, atol=1e-6)


def test_prefill_programs_per_prompt_length():
    """Mamba's reference scan loops over the prompt in Python, so each prompt length gets its own
    prefill program, made the first time it is needed (also under a caller's jit)."""
    model = tiny_model("mamba", seed=12)
    lm = jaxport.from_causal_lm(model, max_length=12, max_batch=2)
    assert lm.step is None
    with pytest.raises(jaxport.InputError, match="export\\(prompt_length=...\\)"):
        lm.export()
    ids = np.array([[3, 4, 5], [6, 7, 8]], np.int32)
    logits, _ = jax.jit(lm.prefill_step)(lm.params, lm.init_cache(2), ids)
    with torch.no_grad():
        want = model(torch.from_numpy(ids).long()).logits.numpy()
    np.testing.assert_allclose(np.asarray(logits), want, rtol=1e-5, atol=1e-5)
    assert lm.prefill_program(3) is lm.prefill_program(3) and lm.prefill_program(2) is not lm.prefill_program(3)


class _PermutingGPT(transformers.OpenAIGPTLMHeadModel):
    """GPT-1 with a preparation for generate that hands its forward an input of its own that
    varies along the tokens, as XLNet's permutation mask does."""

    def prepare_inputs_for_generation(self, input_ids, **kwargs):
        return {"input_ids": input_ids, "token_type_ids": torch.arange(input_ids.shape[1]).expand_as(input_ids)}


def test_models_without_a_cache_keep_their_tokens_and_refuse_inputs_of_their_own():
    """GPT-1 keeps no cache: its one state is the tokens so far. XLM's keeps one slot more, for
    the mask token its generate appends (`test_greedy_matches_transformers` runs it); a model
    whose preparation adds an input that varies along the tokens is refused by name."""
    lm = jaxport.from_causal_lm(tiny_model("openai-gpt", seed=13), max_length=10, max_batch=2)
    ids = np.array([[3, 4, 5], [6, 7, 8]], np.int32)
    logits, cache = lm.prefill(lm.params, lm.init_cache(2), ids)
    assert logits.shape == (2, 3, 100) and [set(layer) for layer in cache["layers"]] == [{"tokens"}]
    np.testing.assert_array_equal(np.asarray(cache["layers"][0]["tokens"])[:, :3], ids)
    xlm = jaxport.from_causal_lm(tiny_model("xlm", seed=13), max_length=10, max_batch=2)
    assert xlm.init_cache(2)["layers"][0]["tokens"].shape == (2, 11)
    torch.manual_seed(13)
    permuting = _PermutingGPT(transformers.OpenAIGPTConfig(**CONFIGS["openai-gpt"])).eval()
    with pytest.raises(jaxport.InputError, match="_PermutingGPT: .*prepare_inputs_for_generation adds token_type_ids"):
        jaxport.from_causal_lm(permuting, max_length=10)


def test_rwkv_generates_row_by_row_and_refuses_batches():
    """RWKV passes its recurrent states in a list of its own (`state`): with one row, jaxport
    generates transformers' tokens for each prompt (a prefill program per prompt length: its
    scan loops in Python). transformers' own batched decoding adds a [B, H] state to [B, 1, H]
    activations, mixing the rows (its two-row tokens differ from its one-row ones), so
    max_batch > 1 is refused by name."""
    config = transformers.RwkvConfig(hidden_size=32, num_hidden_layers=2, attention_hidden_size=32,
                                     intermediate_size=64, vocab_size=100, context_length=64)
    torch.manual_seed(15)
    model = transformers.RwkvForCausalLM(config).eval()
    lm = jaxport.from_causal_lm(model, max_length=7 + NEW_TOKENS, max_batch=1)
    ids, mask = prompts()
    for row in range(2):
        prompt = ids[row:row + 1, mask[row].argmax():]
        got = np.asarray(lm.generate(prompt, torch.ones_like(prompt), max_new_tokens=NEW_TOKENS, pad_token_id=0))
        want = hf_generate(model, prompt, torch.ones_like(prompt), do_sample=False, max_new_tokens=NEW_TOKENS)
        np.testing.assert_array_equal(got, want)
    with pytest.raises(jaxport.MaxBatchError, match=r"RwkvForCausalLM: decoding two rows at once mixes their states") as refusal:
        jaxport.from_causal_lm(model, max_length=10, max_batch=2)
    assert refusal.value.max_batch == 1


class _LlamaWithStatesOutside(transformers.LlamaForCausalLM):
    """A Llama whose cache keeps a tensor of its own beside its layers, in a field jaxport does
    not know."""

    def forward(self, *args, **kwargs):
        out = super().forward(*args, **kwargs)
        out.past_key_values.memory = torch.zeros(1, 4)
        return out


def test_a_cache_with_unknown_states_outside_its_layers_is_refused_by_name():
    """A cache that keeps tensors beside its layers in a field jaxport does not carry (MiniMax's
    `linear_cache` it does) is refused by name, not left to fail inside torch.export."""
    config = transformers.LlamaConfig(**SMALL)
    torch.manual_seed(14)
    model = _LlamaWithStatesOutside(config).eval()
    with pytest.raises(jaxport.InputError, match=r"_LlamaWithStatesOutside: its cache \(DynamicCache\) keeps states "
                       r"outside its layers \(memory\)"):
        jaxport.from_causal_lm(model, max_length=10)


#: Models `from_causal_lm` refuses by name once it has probed them: (model class, config, message).
REFUSED = [
    # CPM-Ant caches prompt tokens of its own ahead of the text and masks by counting tokens back
    # from the end of a growing sequence: nothing a cache of fixed slots lays out
    pytest.param("CpmAntForCausalLM", lambda: transformers.CpmAntConfig(
        hidden_size=32, num_attention_heads=4, dim_head=8, dim_ff=64, num_hidden_layers=2, vocab_size=100,
        prompt_length=4, prompt_types=3),
        r"CpmAntForCausalLM: layer 0 \(DynamicLayer\) cached keys of 6 tokens for the 2 it was given", id="cpmant"),
    # ProphetNet's decoder builds no attention mask once it has a cache: over a cache of fixed slots
    # it would attend to the empty ones. torch.export stops at its `int()` of the cache's length;
    # the refusal says why the model cannot be taken, not where the export stopped
    pytest.param("ProphetNetForCausalLM", lambda: transformers.ProphetNetConfig(
        hidden_size=32, num_encoder_attention_heads=4, num_decoder_attention_heads=4, encoder_ffn_dim=64,
        decoder_ffn_dim=64, num_encoder_layers=2, num_decoder_layers=2, vocab_size=100, ngram=2,
        decoder_start_token_id=0),
        r"ProphetNetForCausalLM: its decoder builds no attention mask once it has a cache", id="prophetnet"),
    # MusicGen's generate rewrites each step's inputs in a delay pattern over its codebooks
    pytest.param("MusicgenForCausalLM", lambda: transformers.MusicgenDecoderConfig(
        hidden_size=32, ffn_dim=64, num_hidden_layers=2, num_attention_heads=4, vocab_size=100, num_codebooks=2),
        r"MusicgenForCausalLM: its generate lays each step's codebooks out in a delay pattern", id="musicgen"),
]


@pytest.mark.parametrize("model_class,config,message", REFUSED)
def test_a_model_whose_generation_a_cache_of_fixed_slots_cannot_follow_is_refused_by_name(model_class, config,
                                                                                          message):
    torch.manual_seed(16)
    model = getattr(transformers, model_class)(config()).eval()
    with pytest.raises(jaxport.InputError, match=message):
        jaxport.from_causal_lm(model, max_length=10)


def test_layers_the_text_never_fills_cache_nothing():
    """Mllama's cross-attention layer, without an image, never fills its cache: the step carries
    nothing for it, and text-only generation matches transformers'."""
    config = transformers.MllamaTextConfig(**SMALL, cross_attention_layers=[1], pad_token_id=0, bos_token_id=1,
                                           eos_token_id=2)
    torch.manual_seed(13)
    model = transformers.MllamaForCausalLM(config).eval()
    ids, mask = prompts()
    lm = jaxport.from_causal_lm(model, max_length=ids.shape[1] + 12, max_batch=3)
    assert lm.init_cache(1)["layers"][1] == {} and set(lm.init_cache(1)["layers"][0]) == {"keys", "values"}
    np.testing.assert_array_equal(np.asarray(lm.generate(ids, mask, max_new_tokens=12, pad_token_id=0)),
                                  hf_generate(model, ids, mask, do_sample=False, max_new_tokens=12))
