"""A representative slice of the transformers catalogue sweep (docs/transformers-catalogue.md).

Each case runs `tests.catalogue.harness.check`, the function the sweep runs per model in
`python -m tests.catalogue.sweep`: the model built from its shrunk default config (seed 0),
exported, converted and compared, run on the eager frontend and compared, and (causal LMs)
generated from through `jaxport.from_causal_lm`, token for token against transformers.
"""

from __future__ import annotations

import pytest

from tests.catalogue import harness

#: One model per kind of output and cache; the sweep (`make catalogue`) runs every one. BART's cache
#: round trip and ViT run in other tests (tests/frontends/torch_export/test_hf_cache.py, the zoo's).
#: `make test` runs the first five (decoders with their caches, a classifier); the rest, 30 to 60 s
#: each, are `slow` (`make test-slow`): tests/ops/aten/test_moe.py runs the experts' models in
#: `make test`, tests/frontends/torch_export/test_hf_cache.py an encoder-decoder's cache.
REPRESENTATIVE = [
    ("causal-lm", "llama"),  # use_cache on: the output carries a DynamicCache
    ("causal-lm", "gpt2"),
    ("sequence-classification", "bert"),
    # sliding-window layers whose cache keeps its window, under a decoder mask that ignores it
    ("causal-lm", "moshi"),
    # a multimodal decoder generating text: its mask pads image-block ids by a sliding layer's offset
    ("causal-lm", "gemma4_unified"),
    ("causal-lm", "mixtral"),  # mixture of experts
    ("causal-lm", "qwen2_moe"),  # experts plus a shared expert
    ("seq2seq-lm", "t5"),
    ("speech-seq2seq", "whisper"),
    ("audio-classification", "wav2vec2"),
]
CASES = [pytest.param(task, model, id=f"{task}-{model}", marks=[pytest.mark.slow] if i >= 5 else [])
         for i, (task, model) in enumerate(REPRESENTATIVE)]


@pytest.mark.parametrize("task,model_type", CASES)
def test_catalogue_model(task, model_type):
    row = harness.check(task, model_type)
    stages = row["stages"]
    for stage, result in stages.items():
        assert result["status"] == "ok", f"{stage}: {result['status']}: {result.get('error', '')}"
    assert stages["convert"]["shape"] == stages["eager"]["shape"] == row["output_shape"]
