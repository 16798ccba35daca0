"""Whole models: the real MiniLM and small random Hugging Face models match PyTorch in float32."""

from __future__ import annotations

import functools

import jax
import numpy as np
import pytest
import torch
import torch.utils._pytree as pytree

import jaxport
from tests.support.zoo import MODELS

#: The output compared to 1e-4 for each model.
MAIN_OUTPUT = {
    "minilm": "last_hidden_state",
    "bert": "last_hidden_state",
    "gpt2": "logits",
    "llama": "logits",
    "vit": "last_hidden_state",
    "resnet": "last_hidden_state",
    "cnn": None,
}


@functools.cache
def converted(name: str):
    module, args, kwargs = MODELS[name]()
    model = jaxport.from_torch(module, args, kwargs)
    model.strict = True  # every node's dtype must match torch.export's record, no silent casts
    with torch.no_grad():
        expected = module(*args, **kwargs)
    return module, args, kwargs, model, expected


def _leaves(tree):
    if hasattr(tree, "to_tuple") and hasattr(tree, "keys"):  # a Hugging Face ModelOutput
        tree = {k: tree[k] for k in tree.keys()}
    return pytree.tree_flatten(tree)[0]


@pytest.mark.parametrize("name", list(MODELS))
def test_model_matches_pytorch(name):
    module, args, kwargs, model, expected = converted(name)
    actual = model(*args, **kwargs)
    key = MAIN_OUTPUT[name]
    if key is not None:
        assert isinstance(actual, dict) and key in actual, f"outputs are {type(actual)}"
        main_actual, main_expected = actual[key], expected[key]
    else:
        main_actual, main_expected = actual, expected
    assert tuple(main_actual.shape) == tuple(main_expected.shape)
    assert np.dtype(main_actual.dtype) == np.float32 and main_expected.dtype == torch.float32
    err = float(np.max(np.abs(np.asarray(main_actual) - main_expected.numpy())))
    assert err <= 1e-4, f"{name}: max abs error {err:.2e}"
    # Every other output too: same structure, shapes, and values.
    actual_leaves, expected_leaves = _leaves(actual), _leaves(expected)
    assert len(actual_leaves) == len(expected_leaves)
    for a, e in zip(actual_leaves, expected_leaves):
        assert tuple(a.shape) == tuple(e.shape)
        np.testing.assert_allclose(np.asarray(a), e.numpy(), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", ["bert", "gpt2"])
def test_model_params_are_the_state_dict(name):
    module, _, _, model, _ = converted(name)
    state = module.state_dict()
    assert set(state) <= set(model.params) | set(model.tied)
    for key, tensor in state.items():
        np.testing.assert_array_equal(np.asarray(model.params[model.tied.get(key, key)]), tensor.numpy())
    assert set(model.parameter_names) == {k for k, _ in module.named_parameters()}
    if name == "gpt2":
        assert model.tied == {"lm_head.weight": "transformer.wte.weight"}


@pytest.mark.compat
def test_minilm_real_weights_give_sensible_embeddings():
    """Paraphrases are closer than unrelated sentences under the real pretrained weights."""
    from transformers import AutoTokenizer

    from tests.support.zoo import minilm_path

    sentences = ["A man is playing a guitar.", "Someone plays the guitar.", "Stocks fell sharply today."]
    tokenizer = AutoTokenizer.from_pretrained(minilm_path())
    batch = dict(tokenizer(sentences, padding=True, return_tensors="pt"))
    module = converted("minilm")[0]
    model = jaxport.from_torch(module, kwargs=batch)
    hidden = model(**batch)["last_hidden_state"]
    mask = np.asarray(batch["attention_mask"])[..., None]
    pooled = (np.asarray(hidden) * mask).sum(1) / mask.sum(1)
    pooled /= np.linalg.norm(pooled, axis=-1, keepdims=True)
    sim = pooled @ pooled.T
    assert sim[0, 1] > 0.6 > sim[0, 2]


@pytest.mark.compat
def test_apply_is_pure_and_jittable():
    module, args, kwargs, model, expected = converted("gpt2")
    args = [jaxport.interop.to_jax(a) for a in args]  # jax.jit takes JAX arrays, not torch tensors
    apply = jax.jit(model.apply)
    a = apply(model.params, *args, **kwargs)["logits"]
    b = model.apply(model.params, *args, **kwargs)["logits"]
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-5)
