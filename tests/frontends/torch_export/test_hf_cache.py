"""Hugging Face's default `use_cache=True`: the cache comes back as arrays and goes back in.

Each model is a tiny random configuration of its architecture; PyTorch runs the same steps with
its own cache objects, and every step's logits and the cache after the first call must agree.
"""

from __future__ import annotations

import jax
import pytest
import torch

import jaxport
from tests.support.numeric import assert_close
from tests.support.zoo import cache_name

transformers = pytest.importorskip("transformers")

CACHE = cache_name()

_SMALL = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, vocab_size=100)

DECODERS = {
    "llama": {},  # DynamicCache
    "mistral": dict(sliding_window=4),  # sliding-window layers, decoded past the window
    "gemma2": dict(head_dim=8, sliding_window=4),  # hybrid: sliding and global layers alternate
    "qwen2": {},
}

ENCODER_DECODERS = {  # EncoderDecoderCache: self-attention and cross-attention caches
    "bart": dict(d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                 decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64),
    "t5": dict(d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4),
}


def _close(got, want) -> float:
    """max |got - want| <= 1e-4 * max(1, max |want|), dtypes not judged; returns that max."""
    return assert_close(got, want.detach(), rtol=1e-4, atol=0, per_tensor=True, check_dtype=False).max_abs


def _cache_arrays(cache) -> list:
    """A transformers cache's tensors as (keys, values) per layer, in order."""
    return [(layer.keys, layer.values) for layer in cache.layers]


@pytest.mark.parametrize("model_type", sorted(DECODERS))
def test_decoder_cache_round_trip(model_type):
    torch.manual_seed(0)
    config = transformers.AutoConfig.for_model(model_type, **_SMALL, **DECODERS[model_type])
    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    rng = torch.Generator().manual_seed(1)
    ids = torch.randint(0, 100, (2, 5), generator=rng)
    mask = torch.ones(2, 5, dtype=torch.long)
    mask[1, :2] = 0  # a left-padded row
    jm = jaxport.from_torch(model, kwargs={"input_ids": ids, "attention_mask": mask})
    out = jm(input_ids=ids, attention_mask=mask)
    with torch.no_grad():
        ref = model(input_ids=ids, attention_mask=mask)
    _close(out["logits"], ref.logits)
    layers = out[CACHE]["layers"]
    assert len(layers) == len(getattr(ref, CACHE).layers)
    for layer, (keys, values) in zip(layers, _cache_arrays(getattr(ref, CACHE))):
        # A sliding-window layer keeps the whole history here (transformers' exporter traces it as
        # a full layer and the mask applies the window); PyTorch keeps only the window's tail.
        kept = keys.shape[2]
        _close(layer["keys"][:, :, -kept:], keys)
        _close(layer["values"][:, :, -kept:], values)

    cache, torch_cache = out[CACHE], getattr(ref, CACHE)
    for _ in range(2):  # the prompt already fills the sliding window of 4
        token = torch.randint(0, 100, (2, 1), generator=rng)
        mask = torch.cat([mask, torch.ones(2, 1, dtype=torch.long)], dim=1)
        with torch.no_grad():
            ref = model(input_ids=token, attention_mask=mask, **{CACHE: torch_cache})
        out = jm(input_ids=token, attention_mask=mask, **{CACHE: cache})
        _close(out["logits"], ref.logits)
        cache, torch_cache = out[CACHE], getattr(ref, CACHE)
    assert cache["layers"][0]["keys"].shape[2] == 7


@pytest.mark.compat
def test_cache_step_is_pure_and_takes_torch_caches():
    """`apply` runs the cached step under jax.jit with explicit params; a transformers cache object
    is accepted in place of the arrays."""
    torch.manual_seed(0)
    config = transformers.AutoConfig.for_model("llama", **_SMALL)
    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    rng = torch.Generator().manual_seed(2)
    ids = torch.randint(0, 100, (1, 4), generator=rng)
    token = torch.randint(0, 100, (1, 1), generator=rng)
    mask = torch.ones(1, 5, dtype=torch.long)
    jm = jaxport.from_torch(model, kwargs={"input_ids": ids})
    with torch.no_grad():
        first = model(input_ids=ids)
        ref = model(input_ids=token, attention_mask=mask, **{CACHE: getattr(first, CACHE)})
        torch_cache = getattr(model(input_ids=ids), CACHE)
    cache = jm(input_ids=ids)[CACHE]
    step = jax.jit(lambda p, c: jm.apply(p, input_ids=token.numpy(), attention_mask=mask.numpy(),
                                         **{CACHE: c})["logits"])
    _close(step(jm.params, cache), ref.logits)
    _close(jm(input_ids=token, attention_mask=mask, **{CACHE: torch_cache})["logits"], ref.logits)


@pytest.mark.compat
def test_cache_of_the_wrong_structure_is_named():
    torch.manual_seed(0)
    config = transformers.AutoConfig.for_model("llama", **_SMALL)
    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    ids = torch.zeros(1, 4, dtype=torch.long)
    jm = jaxport.from_torch(model, kwargs={"input_ids": ids})
    cache = jm(input_ids=ids)[CACHE]
    broken = {"layers": cache["layers"][:1]}
    with pytest.raises(jaxport.InputError, match=rf"input '{CACHE}'\['layers'\] should be a list of 2"):
        jm(input_ids=ids[:, :1], **{CACHE: broken})


@pytest.mark.parametrize("model_type", [pytest.param(m, marks=pytest.mark.compat if m == "bart" else ())
                                        for m in sorted(ENCODER_DECODERS)])
def test_encoder_decoder_cache_round_trip(model_type):
    torch.manual_seed(0)
    config = transformers.AutoConfig.for_model(model_type, vocab_size=100, **ENCODER_DECODERS[model_type])
    model = transformers.AutoModelForSeq2SeqLM.from_config(config).eval()
    rng = torch.Generator().manual_seed(3)
    inputs = {
        "input_ids": torch.randint(3, 100, (2, 6), generator=rng),
        "attention_mask": torch.ones(2, 6, dtype=torch.long),
        "decoder_input_ids": torch.randint(3, 100, (2, 3), generator=rng),
    }
    jm = jaxport.from_torch(model, kwargs=inputs)
    out = jm(**inputs)
    with torch.no_grad():
        ref = model(**inputs)
    _close(out["logits"], ref.logits)
    assert set(out[CACHE]) == {"self_attention_cache", "cross_attention_cache"}
    for part in ("self_attention_cache", "cross_attention_cache"):
        ours = out[CACHE][part]["layers"]
        theirs = _cache_arrays(getattr(getattr(ref, CACHE), part))
        for layer, (keys, values) in zip(ours, theirs):
            _close(layer["keys"], keys)
            _close(layer["values"], values)
    cache, torch_cache = out[CACHE], getattr(ref, CACHE)
    for _ in range(2):
        step = dict(inputs, decoder_input_ids=torch.randint(3, 100, (2, 1), generator=rng))
        with torch.no_grad():
            ref = model(**step, **{CACHE: torch_cache})
        out = jm(**step, **{CACHE: cache})
        _close(out["logits"], ref.logits)
        cache, torch_cache = out[CACHE], getattr(ref, CACHE)
