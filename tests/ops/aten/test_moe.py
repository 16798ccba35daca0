"""Mixture-of-experts grouped products against PyTorch: the lowerings of `aten._grouped_mm`
and transformers' `grouped_mm_fallback` op by op (values, `jax.jit`, gradients), and tiny
random Hugging Face MoE models through `from_torch` and the eager frontend.

transformers runs MoE experts as grouped products: under `torch.export` (float32 weights)
its `transformers.grouped_mm_fallback` custom op, in eager PyTorch `aten._grouped_mm`.
PyTorch's `_grouped_mm` leaves rows past `offs[-1]` (and their gradients) uninitialized;
jaxport's are 0, so those are compared only where PyTorch defines them.
"""

from __future__ import annotations

import copy

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import transformers.integrations.moe  # noqa: F401  (defines torch.ops.transformers.grouped_mm_fallback)
from transformers import AutoConfig, AutoModelForCausalLM

import jaxport
from jaxport.ops import registry

GROUPED_MM = "aten._grouped_mm.default"
FALLBACK = "transformers.grouped_mm_fallback.default"

#: Group ends over S = 12 rows in 4 groups.
LAYOUTS = {
    "uneven": [3, 4, 9, 12],
    "empty_groups": [0, 5, 5, 12],
    "one_group": [0, 0, 12, 12],
    "rows_past_end": [2, 2, 6, 9],
    "no_rows": [0, 0, 0, 0],
}
S, K, N, G = 12, 8, 16, 4  # PyTorch's CPU kernel wants 16-byte strides: K, N multiples of 4


def _lowering(name):
    fn = registry.lookup(name)
    assert fn is not None, f"{name} has no lowering"
    return fn


def _randn(generator, *shape, dtype=torch.float32):
    return torch.randn(*shape, generator=generator).to(dtype)


def _jax(t: torch.Tensor) -> jax.Array:
    if t.dtype == torch.bfloat16:
        return jnp.asarray(t.float().numpy()).astype(jnp.bfloat16)
    return jnp.asarray(t.numpy())


def _np(x) -> np.ndarray:
    return np.asarray(jnp.asarray(x).astype(np.float32)) if x.dtype == jnp.bfloat16 else np.asarray(x)


def _offs(layout):
    return torch.tensor(LAYOUTS[layout], dtype=torch.int32)


def _maybe_jit(fn, jit):
    return jax.jit(fn) if jit else fn


# -- registration ---------------------------------------------------------------------------------


def test_custom_ops_register_under_their_overload_name():
    op = torch.ops.transformers.grouped_mm_fallback.default
    assert str(op) == FALLBACK
    fn = _lowering(FALLBACK)  # loads the op library
    assert registry.CUSTOM[str(op)] is fn and FALLBACK in registry.registered_names()
    assert fn.__doc__ == str(op._schema).split("::", 1)[1]
    assert fn.__name__ == "transformers_grouped_mm_fallback"
    assert _lowering(GROUPED_MM).__doc__ == str(torch.ops.aten._grouped_mm.default._schema).split("::", 1)[1]
    with pytest.raises(ValueError, match="@aten"):
        registry.custom("aten", "mm.default")


# -- op level -------------------------------------------------------------------------------------


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_grouped_mm_rows_match_pytorch(layout, jit, x64_strict):
    g = torch.Generator().manual_seed(0)
    x, w, offs = _randn(g, S, K), _randn(g, G, K, N), _offs(layout)
    expected = torch._grouped_mm(x, w, offs=offs)
    got = _maybe_jit(_lowering(GROUPED_MM), jit)(_jax(x), _jax(w), _jax(offs))
    assert got.shape == tuple(expected.shape) and got.dtype == np.float32
    end = int(offs[-1])
    np.testing.assert_allclose(_np(got)[:end], expected[:end].numpy(), rtol=1e-6, atol=1e-6)
    assert not np.any(_np(got)[end:]), "rows past offs[-1] should be 0"


@pytest.mark.parametrize("offs_dtype", [torch.int32, torch.int64])
@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_fallback_matches_pytorch(layout, jit, offs_dtype, x64_strict):
    g = torch.Generator().manual_seed(1)
    x, w, offs = _randn(g, S, 5), _randn(g, G, 5, 3), _offs(layout).to(offs_dtype)
    expected = torch.ops.transformers.grouped_mm_fallback(x, w, offs)
    got = _maybe_jit(_lowering(FALLBACK), jit)(_jax(x), _jax(w), _jax(offs))
    assert got.shape == tuple(expected.shape) and got.dtype == np.float32
    np.testing.assert_allclose(_np(got), expected.numpy(), rtol=1e-6, atol=1e-6)


def test_bfloat16_rounds_once_like_pytorch(x64_strict):
    g = torch.Generator().manual_seed(2)
    x, w, offs = _randn(g, S, K, dtype=torch.bfloat16), _randn(g, G, K, N, dtype=torch.bfloat16), _offs("uneven")
    for name, expected in [(GROUPED_MM, torch._grouped_mm(x, w, offs=offs)),
                           (FALLBACK, torch.ops.transformers.grouped_mm_fallback(x, w, offs))]:
        got = _lowering(name)(_jax(x), _jax(w), _jax(offs))
        assert got.dtype == jnp.bfloat16
        np.testing.assert_array_equal(_np(got), expected.float().numpy(), err_msg=name)


def test_no_rows(x64_strict):
    x, w, offs = torch.zeros(0, K), torch.ones(G, K, N), torch.zeros(G, dtype=torch.int32)
    for name, expected in [(GROUPED_MM, torch._grouped_mm(x, w, offs=offs)),
                           (FALLBACK, torch.ops.transformers.grouped_mm_fallback(x, w, offs))]:
        got = jax.jit(_lowering(name))(_jax(x), _jax(w), _jax(offs))
        assert got.shape == tuple(expected.shape) == (0, N), name


@pytest.mark.parametrize("layout", ["uneven", "empty_groups", "rows_past_end"])
def test_grouped_mm_other_forms_match_pytorch(layout, x64_strict):
    """3-d x 3-d (batched), 2-d x 2-d (groups along K), 3-d x 2-d (groups of columns)."""
    g = torch.Generator().manual_seed(3)
    offs = _offs(layout)
    end = int(offs[-1])
    lowering = jax.jit(_lowering(GROUPED_MM))
    a, b = _randn(g, G, 5, K), _randn(g, G, K, N)
    np.testing.assert_allclose(_np(lowering(_jax(a), _jax(b))), torch._grouped_mm(a, b).numpy(), rtol=1e-6, atol=1e-6)
    a, b = _randn(g, 8, S), _randn(g, S, N)  # K = S split into the groups: (G, 8, N)
    expected = torch._grouped_mm(a, b, offs=offs)
    np.testing.assert_allclose(_np(lowering(_jax(a), _jax(b), _jax(offs))), expected.numpy(), rtol=1e-6, atol=1e-6)
    a, b = _randn(g, G, 5, K), _randn(g, K, S)  # columns of b grouped: (5, S)
    got, expected = _np(lowering(_jax(a), _jax(b), _jax(offs))), torch._grouped_mm(a, b, offs=offs).numpy()
    assert got.shape == expected.shape
    np.testing.assert_allclose(got[:, :end], expected[:, :end], rtol=1e-6, atol=1e-6)
    assert not np.any(got[:, end:])


def _torch_grads(fn, inputs, cotangent):
    inputs = [t.clone().requires_grad_(True) for t in inputs]
    (fn(*inputs) * cotangent).sum().backward()
    return [t.grad for t in inputs]


def _jax_grads(fn, inputs, cotangent, offs):
    def loss(*xs):
        return jnp.sum(fn(*xs, offs) * cotangent)

    return jax.jit(jax.grad(loss, argnums=tuple(range(len(inputs)))))(*inputs)


@pytest.mark.parametrize("layout", ["uneven", "empty_groups", "rows_past_end"])
def test_gradients_match_torch_autograd(layout, x64_strict):
    g = torch.Generator().manual_seed(4)
    offs = _offs(layout)
    end = int(offs[-1])
    x, w, cot = _randn(g, S, K), _randn(g, G, K, N), _randn(g, S, N)
    cot[end:] = 0  # PyTorch's rows past the end are uninitialized: keep them out of the loss

    # The fallback: complete gradients, zero past the end.
    expected = _torch_grads(lambda a, b: torch.ops.transformers.grouped_mm_fallback(a, b, offs), [x, w], cot)
    got = _jax_grads(_lowering(FALLBACK), [_jax(x), _jax(w)], _jax(cot), _jax(offs))
    for e, a in zip(expected, got):
        np.testing.assert_allclose(_np(a), e.numpy(), rtol=1e-5, atol=1e-5)

    # _grouped_mm, every form. PyTorch leaves the gradient parts past the end uninitialized:
    # compare each input's gradient only where `defined` (a slicer per input) says.
    every, rows, cols = (lambda d: d), (lambda d: d[:end]), (lambda d: d[..., :end])
    forms = {
        "rows": ([x, w], cot, (rows, every)),
        "k_groups": ([_randn(g, 8, S), _randn(g, S, N)], _randn(g, G, 8, N), (cols, rows)),
        "columns": ([_randn(g, G, 5, K), _randn(g, K, S)], _randn(g, 5, S), (every, cols)),
        "batched": ([_randn(g, G, 5, K), _randn(g, G, K, N)], _randn(g, G, 5, N), (every, every)),
    }
    forms["columns"][1][:, end:] = 0
    for form, (inputs, cot, defined) in forms.items():
        use_offs = None if form == "batched" else offs
        expected = _torch_grads(lambda a, b, o=use_offs: torch._grouped_mm(a, b, offs=o), inputs, cot)
        got = _jax_grads(_lowering(GROUPED_MM), [_jax(t) for t in inputs], _jax(cot),
                         None if use_offs is None else _jax(use_offs))
        for i, (e, a, part) in enumerate(zip(expected, got, defined)):
            np.testing.assert_allclose(part(_np(a)), part(e.numpy()), rtol=1e-5, atol=1e-5,
                                       err_msg=f"{form}: gradient of input {i}")


#: Group sizes over 200 rows that take the CPU form's every window: several full windows, each
#: size of last window (16, 32, 64 rows), an empty group, rows past the last group.
WINDOWED_SIZES = [70, 5, 0, 20, 64, 33]


def test_windows_of_rows_match_pytorch_with_gradients(x64_strict):
    """Groups longer than one window (`ops/aten/_grouped.py`), values and gradients."""
    g = torch.Generator().manual_seed(5)
    rows, groups = 200, len(WINDOWED_SIZES)
    offs = torch.tensor(np.cumsum(WINDOWED_SIZES), dtype=torch.int32)
    end = int(offs[-1])
    x, w, cot = _randn(g, rows, K), _randn(g, groups, K, N), _randn(g, rows, N)
    expected = torch.ops.transformers.grouped_mm_fallback(x, w, offs)
    got = jax.jit(_lowering(FALLBACK))(_jax(x), _jax(w), _jax(offs))
    np.testing.assert_allclose(_np(got), expected.numpy(), rtol=1e-5, atol=1e-5)
    assert not np.any(_np(got)[end:])
    expected = _torch_grads(lambda a, b: torch.ops.transformers.grouped_mm_fallback(a, b, offs), [x, w], cot)
    got = _jax_grads(_lowering(FALLBACK), [_jax(x), _jax(w)], _jax(cot), _jax(offs))
    for e, a in zip(expected, got):
        np.testing.assert_allclose(_np(a), e.numpy(), rtol=1e-4, atol=1e-4)


# -- whole models ---------------------------------------------------------------------------------

#: Tiny sizes under every name MoE configs use; a config takes the ones it has.
TINY = dict(
    vocab_size=100, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
    num_key_value_heads=4, head_dim=8, max_position_embeddings=64, tie_word_embeddings=False,
    num_local_experts=4, num_experts=4, n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
    shared_expert_intermediate_size=32, n_shared_experts=1, n_group=1, topk_group=1, first_k_dense_replace=0,
    # DeepSeek's latent attention: values narrower than queries and keys, as in the real models.
    kv_lora_rank=16, q_lora_rank=16, qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=8,
    # Jamba: one attention layer among the two (with only Mamba layers its cache has no length).
    attn_layer_offset=0, attn_layer_period=2,
)

#: MoE model types whose tiny random models convert and match; each exports a
#: `transformers.grouped_mm_fallback` per expert projection.
MODEL_TYPES = ["mixtral", "qwen2_moe", "qwen3_moe", "olmoe", "deepseek_v3", "deepseek_v2", "glm4_moe",
               "gpt_oss", "jamba", "phimoe", "granitemoe", "minimax", "cohere2_moe", "dots1"]


def _tiny_moe(model_type: str, seed: int = 0, dtype=torch.float32):
    config = AutoConfig.for_model(model_type)
    for key, value in TINY.items():
        if hasattr(config, key):
            setattr(config, key, value)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config).eval()
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for p in model.parameters():
            # Zero-initialized routers score every expert alike, and ties in topk have no defined order.
            if p.ndim >= 2 and not p.any():
                p.copy_(torch.randn(p.shape, generator=g) * 0.5)
    assert model.config._experts_implementation == "grouped_mm"
    return model.to(dtype)


def _input_ids(seed: int) -> torch.Tensor:
    return torch.randint(0, TINY["vocab_size"], (2, 7), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_moe_model_matches_pytorch(model_type):
    model, ids = _tiny_moe(model_type), _input_ids(10)
    with torch.no_grad():
        expected = model(input_ids=ids).logits
    converted = jaxport.from_torch(model, kwargs={"input_ids": ids})
    converted.strict = True
    ops = {node.op for node in converted.program.walk()}
    assert FALLBACK in ops, "the experts should run as grouped products"
    got = converted(input_ids=ids.numpy())["logits"]
    assert got.shape == tuple(expected.shape) and got.dtype == np.float32
    err = float(np.max(np.abs(np.asarray(got) - expected.numpy())))
    assert err <= 1e-4 * max(1.0, float(expected.abs().max())), f"{model_type}: max abs error {err:.2e}"


def test_mixtral_gradients_match_torch_autograd():
    model, ids = _tiny_moe("mixtral", seed=5), _input_ids(11)
    converted = jaxport.from_torch(model, kwargs={"input_ids": ids})
    cot = torch.randn(2, 7, TINY["vocab_size"], generator=torch.Generator().manual_seed(12))
    model.zero_grad()
    (model(input_ids=ids).logits * cot).sum().backward()
    expected = {name: p.grad for name, p in model.named_parameters() if p.grad is not None}

    trainable, rest = converted.split_params()
    jax_ids, jax_cot = jnp.asarray(ids.numpy()), jnp.asarray(cot.numpy())

    def loss(params):
        return jnp.sum(converted.apply({**rest, **params}, input_ids=jax_ids)["logits"] * jax_cot)

    grads = jax.jit(jax.grad(loss))(trainable)
    assert any("experts" in name for name in expected)
    for name, e in expected.items():
        scale = max(1.0, float(e.abs().max()))
        err = float(np.max(np.abs(np.asarray(grads[name]) - e.numpy())))
        assert err <= 1e-4 * scale, f"{name}: max abs gradient error {err:.2e} (scale {scale:.2f})"


def _run_eager(model, ids):
    with jaxport.eager(), torch.no_grad():
        on_jax = copy.deepcopy(model).to("jax")
        out = on_jax(input_ids=ids.to("jax")).logits
        assert isinstance(out, jaxport.JaxTensor)
        return out.cpu()


def test_eager_frontend_runs_moe_in_bfloat16():
    # Eager PyTorch and jaxport's eager frontend run the experts through aten._grouped_mm.
    model, ids = _tiny_moe("qwen3_moe", seed=6, dtype=torch.bfloat16), _input_ids(13)
    with torch.no_grad():
        expected = model(input_ids=ids).logits
    got = _run_eager(model, ids)
    assert got.dtype == torch.bfloat16
    scale = max(1.0, float(expected.float().abs().max()))
    torch.testing.assert_close(got.float(), expected.float(), rtol=0, atol=2**-6 * scale)


def test_eager_frontend_runs_moe_in_float32():
    """PyTorch's meta kernel for _grouped_mm accepts only bfloat16; the dispatcher has its own."""
    model, ids = _tiny_moe("mixtral", seed=7), _input_ids(14)
    with torch.no_grad():
        expected = model(input_ids=ids).logits
    torch.testing.assert_close(_run_eager(model, ids), expected, rtol=0, atol=1e-4)
