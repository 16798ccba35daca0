"""Generation (issue 19): `jaxport.from_causal_lm` against Hugging Face's own `generate`.

Tiny random models built from configs, each with its own seed: greedy decoding token for token
against `model.generate(do_sample=False)` on a left-padded batch of three prompts of different
lengths (sliding-window and hybrid models generate past their window), the cache after prefill
against PyTorch's `past_key_values`, the processed sampling distribution against transformers'
logits processors, EOS handling, and the eager frontend's `generate`.
"""

from __future__ import annotations

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
from transformers.generation.logits_process import (
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
}
NEW_TOKENS = 32
ROOT = Path(__file__).resolve().parents[2]


def tiny_model(model_type: str, seed: int = 0) -> transformers.PreTrainedModel:
    extra = CONFIGS[model_type]
    fields = extra if model_type == "gpt2" else {**SMALL, **extra}
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


@pytest.mark.parametrize("model_type", list(CONFIGS))
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
        for ours, theirs in ((layer["keys"], torch_layer.keys), (layer["values"], torch_layer.values)):
            kept = theirs.shape[2]  # a sliding layer's dynamic cache keeps only its window's last tokens
            ours, theirs = np.moveaxis(np.asarray(ours)[:, :, 7 - kept:7], 2, 1), np.moveaxis(theirs.numpy(), 2, 1)
            np.testing.assert_allclose(ours[real[:, 7 - kept:]], theirs[real[:, 7 - kept:]], rtol=1e-5, atol=1e-6)
        assert not np.asarray(layer["keys"])[:, :, 7:].any()  # slots past the prompt stay empty
    assert int(cache["length"]) == 7

    token = out.logits[:, -1].argmax(-1, keepdim=True)
    step_logits, cache = lm.decode(lm.params, cache, token.numpy(), positions[:, -1:].numpy() + 1)
    with torch.no_grad():
        step = model(token, attention_mask=torch.cat([mask, torch.ones(3, 1, dtype=torch.long)], 1),
                     position_ids=positions[:, -1:] + 1, past_key_values=out.past_key_values, use_cache=True)
    np.testing.assert_allclose(np.asarray(step_logits), step.logits.numpy(), rtol=1e-5, atol=1e-5)
    assert int(cache["length"]) == 8


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
]


@pytest.mark.parametrize("settings", SAMPLING, ids=lambda s: ",".join(f"{k}={v}" for k, v in s.items()))
def test_processed_logits_match_transformers(settings, rng):
    """The distribution sampled from: transformers' warpers in generate's order (temperature,
    top-k, top-p) against `process_logits`: the same tokens removed, the same kept logits."""
    scores = torch.from_numpy(rng.standard_normal((4, 100)).astype(np.float32) * 3)
    warpers = []
    if "temperature" in settings:
        warpers.append(TemperatureLogitsWarper(settings["temperature"]))
    if "top_k" in settings:
        warpers.append(TopKLogitsWarper(settings["top_k"]))
    if "top_p" in settings:
        warpers.append(TopPLogitsWarper(settings["top_p"]))
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


def test_generate_refuses_what_it_cannot_do():
    model = tiny_model("llama", seed=5)
    ids, mask = prompts()
    lm = jaxport.from_causal_lm(model, max_length=10, max_batch=2)
    with pytest.raises(jaxport.InputError, match="cache slots; max_length is 10"):
        lm.generate(ids[:2], mask[:2], max_new_tokens=4)
    with pytest.raises(jaxport.InputError, match=r"batch 3 is outside 1\.\.2"):
        lm.generate(ids, mask, max_new_tokens=2)
    model.generation_config.repetition_penalty = 1.3
    lm = jaxport.from_causal_lm(model, max_length=10, max_batch=3)
    with pytest.raises(jaxport.InputError, match="repetition_penalty=1.3"):
        lm.generate(ids, mask, max_new_tokens=2)
    with pytest.raises(jaxport.InputError, match="PreTrainedModel"):
        jaxport.from_causal_lm(torch.nn.Linear(2, 2), max_length=8)


@pytest.mark.parametrize("model_type", ["llama", "mistral"])
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
    keys = [np.asarray(layer["keys"]) for layer in cache["layers"]]
    values = [np.asarray(layer["values"]) for layer in cache["layers"]]
    token, position = np.array([[5], [6], [7]], np.int32), np.array([[7], [3], [5]], np.int32)
    slots = np.asarray(cache["mask"]).copy()
    slots[:, 7] = 1
    exported_logits = np.asarray(loaded(token, slots, position, np.int32(7), *keys, *values)[0])
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
