"""transformers' internals as jaxport's adapter reaches them (`jaxport.frontends.transformers_adapter`),
against the transformers this environment has: `make test` runs this file with the pinned release,
`make test-compat` with the floor and the newest, so a release that moves an internal fails here,
named, before generation or conversion fail somewhere further on."""

from __future__ import annotations

import os
import threading

import pytest
import torch

transformers = pytest.importorskip("transformers")
from transformers.cache_utils import DynamicCache, StaticCache  # noqa: E402
from transformers.integrations import sdpa_attention  # noqa: E402

from jaxport.frontends import transformers_adapter as adapter  # noqa: E402
from jaxport.frontends.transformers_adapter import grouped_query_attention  # noqa: E402
from tests.support.zoo import cache_name  # noqa: E402

pytestmark = pytest.mark.compat

CACHE = cache_name()
_SMALL = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, vocab_size=100)


def _asks(mask):
    """transformers' question: pass grouped-query heads to SDPA unrepeated?"""
    key = value = torch.zeros(1, 2, 3, 8)
    return sdpa_attention.use_gqa_in_sdpa(mask, key, value)


def test_grouped_query_attention_is_switched_for_the_context_only():
    original = sdpa_attention.use_gqa_in_sdpa
    mask = torch.ones(1, 1, 3, 3, dtype=torch.bool)
    environment = dict(os.environ)
    assert not _asks(mask)  # transformers repeats heads under a mask, for PyTorch's fused kernels
    seen_elsewhere = []
    with grouped_query_attention():
        assert _asks(mask)
        with grouped_query_attention():  # nested (a cached step converted inside another export)
            assert _asks(mask)
        assert _asks(mask) and sdpa_attention.use_gqa_in_sdpa is not original
        other = threading.Thread(target=lambda: seen_elsewhere.append(_asks(mask)))
        other.start()
        other.join()
        assert dict(os.environ) == environment
    assert seen_elsewhere == [False]  # another thread keeps transformers' own answer
    assert sdpa_attention.use_gqa_in_sdpa is original  # put back when the last context closes
    assert not _asks(mask)


def test_block_ids_are_padded_to_the_mask_inside_the_context_only():
    """Gemma 3/4's image-block ids: transformers pads them to `kv_length + kv_offset` (a sliding
    layer's offset is a value in a step); inside the context, to the 2-D mask's length."""
    from transformers import masking_utils

    original = masking_utils.maybe_pad_block_sequence_ids
    ids, mask = torch.tensor([[4, 4, -1]]), torch.ones(1, 8, dtype=torch.long)
    assert original(ids, mask, 5, 0).tolist() == [[4, 4, -1, -1, -1]]
    with adapter.block_ids_over_the_whole_mask():
        padded = masking_utils.maybe_pad_block_sequence_ids(ids, mask, 5, 0)
        assert padded.tolist() == [[4, 4, -1, -1, -1, -1, -1, -1]]
        assert masking_utils.maybe_pad_block_sequence_ids(ids, None, 5, 0).tolist() == [[4, 4, -1, -1, -1]]
    assert masking_utils.maybe_pad_block_sequence_ids is original


def _llama(seed=0):
    torch.manual_seed(seed)
    config = transformers.LlamaConfig(**_SMALL)
    return transformers.LlamaForCausalLM(config).eval()


def test_the_release_is_supported_and_an_older_one_is_refused_by_name(monkeypatch):
    installed = adapter.require()  # the module in sys.modules (transformers replaces its lazy one)
    assert installed.__version__ == transformers.__version__
    monkeypatch.setattr(installed, "__version__", "4.57.1")
    with pytest.raises(ImportError, match=r"jaxport\[hf\] needs transformers>=5\.14; this environment has "
                                          r"transformers 4\.57\.1 \(pip install -U 'transformers>=5\.14'\)"):
        adapter.require()


def test_the_cache_is_found_under_this_releases_name():
    model = _llama()
    assert adapter.cache_argument(model) == CACHE
    with torch.no_grad():
        out = model(input_ids=torch.tensor([[1, 2, 3]]), use_cache=True)
    assert isinstance(adapter.returned_cache(out), DynamicCache)
    assert adapter.cache_field(list(out.keys())) == CACHE
    mamba = transformers.MambaForCausalLM(transformers.MambaConfig(hidden_size=16, num_hidden_layers=1, vocab_size=50))
    assert adapter.cache_argument(mamba) in ("cache", "cache_params")


def test_default_generation_params_are_the_ones_generate_fills_in():
    defaults = adapter.default_generation_params()
    assert {"top_k": 50, "top_p": 1.0, "temperature": 1.0, "num_beams": 1}.items() <= defaults.items()


@pytest.mark.parametrize("seen", [0, 3])
def test_a_static_cache_filled_through_private_fields_continues_as_transformers_own(seen):
    """States written into transformers' static layers (`seen`, `cumulative_length`,
    `is_initialized`) give the logits of a step after `seen` tokens that a dynamic cache gives."""
    model = _llama(1)
    ids = torch.tensor([[5, 6, 7, 8]])
    with torch.no_grad():
        reference = model(input_ids=ids, use_cache=True)
    slots = 8
    states = []
    for layer in adapter.returned_cache(reference).layers:
        keys, values = (torch.zeros(1, *t.shape[1:2], slots, t.shape[-1]) for t in (layer.keys, layer.values))
        keys[:, :, :seen], values[:, :, :seen] = layer.keys[:, :, :seen], layer.values[:, :, :seen]
        states.append({"keys": keys, "values": values})
    cache = adapter.static_cache(model.config, slots, states, seen, torch.tensor(seen), decoding=False, name="llama")
    assert isinstance(cache, StaticCache) and cache.get_seq_length() == seen
    new = ids[:, seen:]
    mask = torch.ones(1, slots, dtype=torch.long)
    mask[:, ids.shape[1]:] = 0
    with torch.no_grad():
        out = model(input_ids=new, attention_mask=mask, position_ids=torch.arange(seen, ids.shape[1])[None],
                    use_cache=True, **{CACHE: cache})
    torch.testing.assert_close(out.logits, reference.logits[:, seen:], rtol=1e-5, atol=1e-5)
    written = adapter.layer_state(cache.layers[0], "keys")[:, :, :ids.shape[1]]
    torch.testing.assert_close(written, adapter.returned_cache(reference).layers[0].keys, rtol=1e-6, atol=1e-6)
    with pytest.raises(Exception, match="its static cache has 2 layers, but it cached 1"):
        adapter.static_cache(model.config, slots, states[:1], seen, torch.tensor(seen), decoding=False, name="llama")


@pytest.mark.parametrize("counts", [(4, 1, 1), (2, 1, 3)], ids=str)
def test_a_window_layer_keeps_its_window_and_continues_as_transformers_own(counts):
    """A sliding-window layer of 3 tokens keeps 2 slots through a prompt longer than the window,
    and one shorter, then further steps: each step's logits are those of one forward over every
    token (the slot mask padded by the step's tokens, as `CausalLMStep` pads it)."""
    config = transformers.AutoConfig.for_model("mistral", **_SMALL, sliding_window=3)
    torch.manual_seed(2)
    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    ids = torch.tensor([[5, 6, 7, 8, 9, 10]])
    with torch.no_grad():
        reference = model(input_ids=ids).logits
    slots = 8
    with torch.no_grad():
        probe = adapter.returned_cache(model(input_ids=ids[:, :2], use_cache=True))
    assert [adapter.window_slots(layer, slots) for layer in probe.layers] == [2, 2]
    assert adapter.window_slots(probe.layers[0], 3) == 3  # a window as long as max_length: every slot
    states = [{"keys": torch.zeros(1, 2, 2, 8), "values": torch.zeros(1, 2, 2, 8)} for _ in probe.layers]
    mask = torch.zeros(1, slots, dtype=torch.long)
    seen = 0
    for count in counts:
        cache = adapter.static_cache(model.config, slots, states, seen, torch.tensor(seen), decoding=False,
                                     name="mistral")
        mask[:, seen:seen + count] = 1
        with torch.no_grad():
            out = model(input_ids=ids[:, seen:seen + count], attention_mask=torch.nn.functional.pad(mask, (0, count)),
                        position_ids=torch.arange(seen, seen + count)[None], use_cache=True, **{CACHE: cache})
        torch.testing.assert_close(out.logits, reference[:, seen:seen + count], rtol=1e-5, atol=1e-5)
        states = [{name: adapter.layer_state(layer, name) for name in ("keys", "values")} for layer in cache.layers]
        assert [state["keys"].shape[2] for state in states] == [2, 2]
        seen += count
    with pytest.raises(Exception, match="window of 3 tokens, which keeps 2 slots, but its cache holds 8"):
        adapter.static_cache(model.config, slots, [{"keys": torch.zeros(1, 2, 8, 8), "values": torch.zeros(1, 2, 8, 8)}] * 2,
                             0, torch.tensor(0), decoding=False, name="mistral")
