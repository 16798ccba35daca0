"""Serving code under `torch.inference_mode()`: inference tensors have no version counter, and
every path that takes torch tensors (the torch.compile backend, `from_torch`, `from_causal_lm`,
`verify`) runs on them as under `no_grad`."""

from __future__ import annotations

import numpy as np
import torch

import jaxport


def _stack(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)).eval()


def test_the_backend_runs_a_model_made_and_written_in_inference_mode():
    with torch.inference_mode():
        model = _stack(0)
        x = torch.randn(3, 8, generator=torch.Generator().manual_seed(1))
        assert x.is_inference() and model[0].weight.is_inference()
        compiled = torch.compile(model, backend="jaxport")
        for _ in range(3):
            torch.testing.assert_close(compiled(x), model(x))
        model[0].weight.mul_(-2.0)  # in place, inside inference mode: no version counter moves
        x.add_(1.0)
        torch.testing.assert_close(compiled(x), model(x))


def test_an_inference_tensor_jax_had_to_copy_is_imported_afresh_each_call():
    """A copy (an unaligned weight) cannot be kept without a version to say it is stale."""
    with torch.inference_mode():
        model = _stack(2)
        flat = torch.empty(model[0].weight.numel() + 1)
        flat[1:] = model[0].weight.reshape(-1)
        model[0].weight = torch.nn.Parameter(flat[1:].view(model[0].weight.shape), requires_grad=False)
        assert model[0].weight.data_ptr() % 16
        x = torch.randn(3, 8, generator=torch.Generator().manual_seed(3))
        compiled = torch.compile(model, backend="jaxport")
        torch.testing.assert_close(compiled(x), model(x))
        model[0].weight.mul_(0.5)
        torch.testing.assert_close(compiled(x), model(x))


def test_from_torch_and_verify_take_inference_tensors():
    with torch.inference_mode():
        model = _stack(4)
        x = torch.randn(2, 8, generator=torch.Generator().manual_seed(5))
        torch.testing.assert_close(torch.from_numpy(np.array(jaxport.from_torch(model, (x,))(x))), model(x))
        assert jaxport.verify(model, (x,)).passed


def test_from_causal_lm_generates_eagers_tokens_in_inference_mode():
    from transformers import GPT2Config, GPT2LMHeadModel

    with torch.inference_mode():
        torch.manual_seed(6)
        config = GPT2Config(vocab_size=100, n_positions=32, n_embd=32, n_layer=2, n_head=2, bos_token_id=0,
                            eos_token_id=99)
        model = GPT2LMHeadModel(config).eval()
        ids = torch.randint(0, 99, (1, 4), generator=torch.Generator().manual_seed(7))
        lm = jaxport.from_causal_lm(model, max_length=16)
        expected = model.generate(ids, max_new_tokens=6, do_sample=False, eos_token_id=None, pad_token_id=0)
        assert lm.generate(ids, max_new_tokens=6).tolist() == expected.tolist()
