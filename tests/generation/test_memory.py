"""Host memory at the weights' size: a bfloat16 causal LM converted from its module shares the
module's weights (DLPack, no copy), and its compiled prefill, decode and generation loop hold
nothing weight-sized beyond their arguments (XLA's own accounting: before, the loop held a float32
copy of every weight, three times the model's size in all)."""

from __future__ import annotations

import jax
import numpy as np
import pytest
import torch

import jaxport


@pytest.fixture(scope="module")
def bfloat16_llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=4096, hidden_size=256, intermediate_size=704, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                         tie_word_embeddings=False)
    model = LlamaForCausalLM(config).to(torch.bfloat16).eval()
    return model, jaxport.from_causal_lm(model, max_length=32)


def _weight_bytes(params) -> int:
    return sum(a.size * a.dtype.itemsize for a in jax.tree.leaves(params))


def test_converted_weights_share_the_modules_memory(bfloat16_llama):
    model, lm = bfloat16_llama
    state = {**dict(model.named_parameters()), **dict(model.named_buffers())}
    shared = [name for name, array in lm.params.items()
              if array.unsafe_buffer_pointer() == state[name.removeprefix("model.")].data_ptr()]
    large = [name for name, array in lm.params.items() if array.size >= 2**16]
    assert set(large) <= set(shared), sorted(set(large) - set(shared))


def test_compiled_steps_hold_nothing_weight_sized(bfloat16_llama):
    _, lm = bfloat16_llama
    weights = _weight_bytes(lm.params)
    ids = np.array([[3, 14, 15, 92, 65, 35]])
    cache = lm.init_cache(1)
    compiled = {
        "prefill": lm._jitted_prefill.lower(lm.params, cache, ids, None).compile(),
        "decode": lm._jitted_decode.lower(lm.params, cache, ids[:, :1], np.zeros((1, 1), np.int32)).compile(),
    }
    call = lm._prepare(ids, None, None, {"max_new_tokens": 4}, rng=None, params=None, streaming=False)
    compiled["generate"] = call.run.lower(*call.args, 0).compile()
    for name, program in compiled.items():
        analysis = program.memory_analysis()
        if analysis is None:
            pytest.skip("this backend reports no memory analysis")
        assert analysis.temp_size_in_bytes < 0.05 * weights, (name, analysis.temp_size_in_bytes, weights)
