"""Every setting `generate` accepts acts as transformers' `generate` makes it act (issue 42).

One case at least per `GenerationConfig` field on the allow-list (`causal_lm._HONOURED`;
`test_every_honoured_field_has_a_case` keeps the two in step), on a tiny Llama and a left-padded
batch of three prompts, compared one of three ways:

- tokens: greedy or beam search; jaxport's tokens equal transformers', and transformers' tokens
  with the setting differ from its tokens at the setting's neutral value (so the case shows the
  setting acting, not two decoders that both ignore it).
- scores: sampling draws from torch's and JAX's generators, which differ, so the sampled tokens
  cannot be compared; instead transformers' `generate(do_sample=True, output_scores=True,
  output_logits=True)` gives each step's raw logits and the scores it sampled from (after every
  processor), and `process_scores`, with the `Sampling` jaxport's `generate` resolves for the
  same settings, must turn those raw logits, over transformers' own tokens so far, into the same
  scores (the same tokens removed, the others equal within float32 rounding), and into different
  scores at the setting's neutral value.
- sampled tokens where sampling is deterministic (top_k=1, a top_p or min_p that keeps one
  token, a temperature near 0, several return sequences of those): jaxport's sampled tokens equal
  transformers' sampled tokens, and differ from jaxport's draws at the neutral value.

No honoured field lacks a comparison with transformers. (`remove_invalid_values` needs a model
whose logits hold NaN: a tiny Llama whose output row for one token is NaN.)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

import jaxport
from jaxport.generation import process_scores
from jaxport.generation.causal_lm import _HONOURED
from jaxport.generation.sampling import split
from tests.generation.test_generation import prompts, tiny_model

NEW = 16
PROMPT = 7


@pytest.fixture(scope="module")
def llama():
    """A tiny Llama converted for 16 new tokens and up to 12 rows (3 prompts x 4 beams), with its
    plain greedy tokens (from which the cases pick EOS ids and banned tokens that fire)."""
    model = tiny_model("llama", seed=3)
    ids, mask = prompts()
    lm = jaxport.from_causal_lm(model, max_length=PROMPT + NEW, max_batch=12)
    return model, lm, hf(model, ids, mask)


def hf(model, ids, mask, **settings) -> np.ndarray:
    """transformers' generate: greedy and 16 new tokens, padding with 0, unless the settings say otherwise."""
    settings = {"do_sample": False, "max_new_tokens": NEW, "pad_token_id": 0, **settings}
    with torch.no_grad():
        return model.generate(ids, attention_mask=mask, **settings).numpy()


def ours(lm, ids, mask, **settings) -> np.ndarray:
    settings = {"max_new_tokens": NEW, "pad_token_id": 0, **settings}
    return np.asarray(lm.generate(ids, mask, **settings))


def differ(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape != b.shape or not np.array_equal(a, b)


@dataclasses.dataclass(frozen=True)
class Case:
    """`fields` shown acting by `settings(base)` against `neutral(base)` (`base`: plain greedy tokens)."""

    fields: tuple[str, ...]
    settings: Callable[[np.ndarray], dict]
    neutral: Callable[[np.ndarray], dict] = lambda b: {}
    one_token_prompts: bool = False  # prompts of one token (forced_bos_token_id acts at length 1 only)
    last_prompt_token: Callable[[np.ndarray], int] | None = None  # replaces every prompt's last token


def first(b):  # the first token row 0 generates
    return int(b[0, PROMPT])


def second(b):
    return int(b[0, PROMPT + 1])


def two_eos(b):  # tokens rows 0 and 1 reach early
    return [int(b[0, PROMPT + 2]), int(b[1, PROMPT + 3])]


#: Greedy decoding and beam search: the same tokens as transformers'.
TOKENS = {
    "max_new_tokens": Case(("max_new_tokens",), lambda b: dict(max_new_tokens=5)),
    "max_length": Case(("max_length",), lambda b: dict(max_new_tokens=None, max_length=PROMPT + 5)),
    "eos_token_id": Case(("eos_token_id",), lambda b: dict(eos_token_id=second(b))),
    "eos_token_id,several": Case(("eos_token_id",), lambda b: dict(eos_token_id=two_eos(b))),
    "pad_token_id": Case(("pad_token_id",), lambda b: dict(eos_token_id=second(b), pad_token_id=7),
                         lambda b: dict(eos_token_id=second(b))),
    "min_length": Case(("min_length",), lambda b: dict(eos_token_id=[second(b), 5], min_length=12),
                       lambda b: dict(eos_token_id=[second(b), 5])),
    "min_new_tokens": Case(("min_new_tokens",), lambda b: dict(eos_token_id=second(b), min_new_tokens=6),
                           lambda b: dict(eos_token_id=second(b))),
    "repetition_penalty>1": Case(("repetition_penalty",), lambda b: dict(repetition_penalty=1.3)),
    "repetition_penalty<1": Case(("repetition_penalty",), lambda b: dict(repetition_penalty=0.7)),
    "no_repeat_ngram_size=2": Case(("no_repeat_ngram_size",), lambda b: dict(no_repeat_ngram_size=2)),
    "no_repeat_ngram_size=1": Case(("no_repeat_ngram_size",), lambda b: dict(no_repeat_ngram_size=1)),
    "encoder_repetition_penalty": Case(("encoder_repetition_penalty",),
                                       lambda b: dict(encoder_repetition_penalty=50.0)),
    # the prompts' last token becomes what the model says first, which the setting then bans
    "encoder_no_repeat_ngram_size": Case(("encoder_no_repeat_ngram_size",),
                                         lambda b: dict(encoder_no_repeat_ngram_size=1), last_prompt_token=first),
    "bad_words_ids": Case(("bad_words_ids",),
                          lambda b: dict(bad_words_ids=[[first(b)], [int(b[1, PROMPT]), int(b[1, PROMPT + 1])]])),
    "sequence_bias": Case(("sequence_bias",), lambda b: dict(
        sequence_bias={(int(b[2, PROMPT + 2]),): -5.0, (int(b[1, PROMPT]), int(b[1, PROMPT + 1])): -9.0})),
    "suppress_tokens": Case(("suppress_tokens",), lambda b: dict(suppress_tokens=[int(b[0, PROMPT + 2])])),
    "begin_suppress_tokens": Case(("begin_suppress_tokens",), lambda b: dict(begin_suppress_tokens=[first(b)])),
    "forced_bos_token_id": Case(("forced_bos_token_id",), lambda b: dict(forced_bos_token_id=42),
                                one_token_prompts=True),
    "forced_eos_token_id": Case(("forced_eos_token_id",),
                                lambda b: dict(eos_token_id=second(b), forced_eos_token_id=second(b)),
                                lambda b: dict(eos_token_id=second(b))),
    "num_beams": Case(("num_beams",), lambda b: dict(num_beams=2)),
    "num_return_sequences,beams": Case(("num_return_sequences",), lambda b: dict(num_beams=4, num_return_sequences=2),
                                       lambda b: dict(num_beams=4)),
    "length_penalty": Case(("length_penalty",), lambda b: dict(num_beams=3, eos_token_id=[first(b)],
                                                               length_penalty=-1.0),
                           lambda b: dict(num_beams=3, eos_token_id=[first(b)])),
    "early_stopping=True": Case(("early_stopping",), lambda b: dict(num_beams=4, eos_token_id=two_eos(b),
                                                                    early_stopping=True),
                                lambda b: dict(num_beams=4, eos_token_id=two_eos(b))),
    "early_stopping=never": Case(("early_stopping",), lambda b: dict(num_beams=3, eos_token_id=two_eos(b),
                                                                     early_stopping="never"),
                                 lambda b: dict(num_beams=3, eos_token_id=two_eos(b))),
    # the case: LogitNormalization after the penalty changes what beams add up
    "renormalize_logits,beams": Case(("renormalize_logits",), lambda b: dict(num_beams=4, repetition_penalty=1.2,
                                                                             renormalize_logits=True),
                                     lambda b: dict(num_beams=4, repetition_penalty=1.2)),
}

#: Sampling: transformers' scores against `process_scores` on the same raw logits. The model's
#: generation config samples with top_k=50 unless a case says otherwise, as transformers' does.
SCORES = {
    "do_sample": Case(("do_sample",), lambda b: dict(do_sample=True), lambda b: dict(do_sample=False)),
    "temperature": Case(("temperature",), lambda b: dict(do_sample=True, temperature=0.6),
                        lambda b: dict(do_sample=True)),
    "top_k": Case(("top_k",), lambda b: dict(do_sample=True, top_k=5), lambda b: dict(do_sample=True, top_k=0)),
    "top_p": Case(("top_p",), lambda b: dict(do_sample=True, top_k=0, top_p=0.8), lambda b: dict(do_sample=True, top_k=0)),
    "min_p": Case(("min_p",), lambda b: dict(do_sample=True, top_k=0, min_p=0.7), lambda b: dict(do_sample=True, top_k=0)),
    "renormalize_logits": Case(("renormalize_logits",), lambda b: dict(do_sample=True, top_p=0.9, renormalize_logits=True),
                               lambda b: dict(do_sample=True, top_p=0.9)),
    "processors,sampling": Case(("repetition_penalty", "min_new_tokens"), lambda b: dict(
        do_sample=True, temperature=0.8, top_k=20, repetition_penalty=1.4, eos_token_id=second(b), min_new_tokens=4),
        lambda b: dict(do_sample=True, temperature=0.8, top_k=20, eos_token_id=second(b))),
}

#: Sampling made deterministic: jaxport's draws equal transformers'.
DRAWS = {
    "top_k=1": Case(("do_sample", "top_k"), lambda b: dict(do_sample=True, top_k=1), lambda b: dict(do_sample=True)),
    "top_p": Case(("top_p",), lambda b: dict(do_sample=True, top_k=0, top_p=0.01), lambda b: dict(do_sample=True, top_k=0)),
    "min_p=1": Case(("min_p",), lambda b: dict(do_sample=True, top_k=0, min_p=1.0), lambda b: dict(do_sample=True, top_k=0)),
    "temperature": Case(("temperature",), lambda b: dict(do_sample=True, temperature=1e-4),
                        lambda b: dict(do_sample=True)),
    "num_return_sequences": Case(("num_return_sequences",), lambda b: dict(do_sample=True, top_k=1, num_return_sequences=2),
                                 lambda b: dict(do_sample=True, top_k=1)),
}

#: `remove_invalid_values`, on a model whose logits hold NaN (`test_remove_invalid_values_...`).
ELSEWHERE = {"remove_invalid_values"}


def test_every_honoured_field_has_a_case():
    """Adding a field to the allow-list without a case here fails; so does a case for a field
    the allow-list does not hold."""
    covered = {field for table in (TOKENS, SCORES, DRAWS) for case in table.values() for field in case.fields}
    assert not set(_HONOURED) - covered - ELSEWHERE, sorted(set(_HONOURED) - covered - ELSEWHERE)
    assert covered | ELSEWHERE <= set(_HONOURED), sorted(covered | ELSEWHERE - set(_HONOURED))


def case_inputs(case: Case, base: np.ndarray, model) -> tuple[torch.Tensor, torch.Tensor, np.ndarray]:
    """The prompts a case runs on, and transformers' plain greedy tokens for them."""
    ids, mask = prompts()
    if case.one_token_prompts:
        ids, mask = ids[:, -1:], mask[:, -1:]
    elif case.last_prompt_token is not None:
        ids[:, -1] = case.last_prompt_token(base)
    else:
        return ids, mask, base
    return ids, mask, hf(model, ids, mask)


@pytest.mark.parametrize("name", list(TOKENS))
def test_greedy_and_beam_settings_give_transformers_tokens(llama, name):
    model, lm, base = llama
    case = TOKENS[name]
    ids, mask, base = case_inputs(case, base, model)
    settings, neutral = case.settings(base), case.neutral(base)
    want = hf(model, ids, mask, **settings)
    assert differ(want, hf(model, ids, mask, **neutral)), f"{name} does not change transformers' tokens here"
    got = ours(lm, ids, mask, **settings)
    assert got.shape == want.shape
    np.testing.assert_array_equal(got, want)


def hf_sampled(model, ids, mask, settings: dict, seed: int):
    """transformers' sampled generation: (sequences, raw logits per step, processed scores per step)."""
    torch.manual_seed(seed)
    settings = {"max_new_tokens": NEW, "pad_token_id": 0, **settings}
    with torch.no_grad():
        out = model.generate(ids, attention_mask=mask, output_scores=True, output_logits=True,
                             return_dict_in_generate=True, **settings)
    return (out.sequences.numpy(), [x.float().numpy() for x in out.logits], [x.float().numpy() for x in out.scores])


def processed(lm, settings: dict, sequences: np.ndarray, mask: np.ndarray, raw: list[np.ndarray],
              traced: bool = False) -> list[np.ndarray]:
    """`process_scores` with what jaxport's `generate` resolves for `settings`, step by step over
    transformers' raw logits and its tokens so far. `traced`: as `generate` runs it, the settings'
    structure compiled once and their numbers passed in as traced values (`sampling.split`)."""
    sampling, _, eos, _, new = lm._settings(lm._resolve(None, {"max_new_tokens": NEW, "pad_token_id": 0, **settings}),
                                            PROMPT)
    buffer = np.zeros((sequences.shape[0], PROMPT + new), np.int32)
    buffer[:, :sequences.shape[1]] = sequences
    start = jnp.argmax(jnp.asarray(mask) != 0, axis=1)
    structure, values = split(sampling) if traced else (sampling, None)
    run = jax.jit(lambda logits, length, values: process_scores(
        logits, jnp.asarray(buffer), length, settings=structure, eos=eos, prompt_length=PROMPT,
        max_length=PROMPT + new, prompt_start=start, values=values))
    return [np.asarray(run(jnp.asarray(logits), jnp.int32(PROMPT + step), values)) for step, logits in enumerate(raw)]


@pytest.mark.parametrize("name", list(SCORES))
def test_sampling_settings_give_transformers_scores(llama, name):
    model, lm, base = llama
    case = SCORES[name]
    ids, mask = prompts()
    settings, neutral = case.settings(base), case.neutral(base)
    sequences, raw, want = hf_sampled(model, ids, mask, settings, seed=len(name))
    got = processed(lm, settings, sequences, mask.numpy(), raw)
    assert len(got) == len(want) and got[0].shape == (3, 100)
    for traced in (False, True):  # the numbers as constants, and as generate's traced values
        got = processed(lm, settings, sequences, mask.numpy(), raw, traced=traced)
        for step, (g, w) in enumerate(zip(got, want)):
            np.testing.assert_array_equal(np.isneginf(g), np.isneginf(w), err_msg=f"step {step}: removed tokens")
            kept = ~np.isneginf(w)
            # XLA:CPU's division and exp are within an ulp or two of PyTorch's
            np.testing.assert_allclose(g[kept], w[kept], rtol=2e-6, atol=2e-6, err_msg=f"step {step}")
    plain = processed(lm, neutral, sequences, mask.numpy(), raw)
    assert any(not np.array_equal(a, b) for a, b in zip(got, plain)), f"{name} does not change the scores here"


@pytest.mark.parametrize("name", list(DRAWS))
def test_deterministic_sampling_gives_transformers_tokens(llama, name):
    model, lm, base = llama
    case = DRAWS[name]
    ids, mask = prompts()
    settings, neutral = case.settings(base), case.neutral(base)
    torch.manual_seed(0)
    want = hf(model, ids, mask, **settings)
    got = ours(lm, ids, mask, rng=jax.random.key(0), **settings)
    np.testing.assert_array_equal(got, want)
    assert differ(got, ours(lm, ids, mask, rng=jax.random.key(0), **neutral)), f"{name} does not change the draws here"


def test_remove_invalid_values_replaces_nan_logits_as_transformers_does():
    """A model whose logit for one token is always NaN: greedy decoding picks that token (NaN is
    the largest, for `torch.argmax` and `jnp.argmax` alike) unless `remove_invalid_values` turns
    NaN into 0 and clips infinities, as transformers' `InfNanRemoveLogitsProcessor` does."""
    model = tiny_model("llama", seed=4)
    with torch.no_grad():
        model.lm_head.weight[17] = float("nan")
    ids, mask = prompts()
    lm = jaxport.from_causal_lm(model, max_length=PROMPT + 8, max_batch=3)
    for settings in ({}, {"remove_invalid_values": True}):
        want = hf(model, ids, mask, max_new_tokens=8, **settings)
        np.testing.assert_array_equal(ours(lm, ids, mask, max_new_tokens=8, **settings), want)
    assert (hf(model, ids, mask, max_new_tokens=8)[:, PROMPT:] == 17).all()
    assert not (want[:, PROMPT:] == 17).any()


def test_new_numeric_settings_compile_nothing(llama):
    """A server taking users' settings: every temperature, top-k, top-p, min-p, penalty, minimum
    length and max_new_tokens after the first of its kind runs the same compiled loop."""
    _, lm, _ = llama
    ids, mask = prompts()
    compiles = []
    listener = lambda event, *a, **k: compiles.append(event) if event.endswith("backend_compile_duration") else None  # noqa: E731
    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
        def run(**settings):
            return ours(lm, ids, mask, rng=jax.random.key(1), do_sample=True, **settings)

        run(temperature=0.7, top_k=5, top_p=0.9, min_p=0.05, repetition_penalty=1.2, max_new_tokens=8,
            min_new_tokens=2)
        before, programs = len(compiles), len(lm._generators)
        for i in range(5):
            run(temperature=0.5 + 0.1 * i, top_k=3 + i, top_p=0.8 + 0.03 * i, min_p=0.01 * (i + 1),
                repetition_penalty=1.1 + 0.1 * i, max_new_tokens=4 + 2 * i, min_new_tokens=1 + i)
        assert (len(compiles) - before, len(lm._generators) - programs) == (0, 0)
    finally:
        jax.monitoring.unregister_event_duration_listener(listener)
