"""Training in JAX matches training in PyTorch: losses per step, final weights, BatchNorm statistics.

Each model is trained twice from the same weights on the same batches: by PyTorch
(torch.optim) and by jaxport's jitted step (optax), 20 steps with SGD and with Adam.
"""

from __future__ import annotations

import copy

import jax
import numpy as np
import optax
import pytest
import torch

import jaxport

STEPS = 20
OPTIMIZERS = {
    "sgd": (lambda params: torch.optim.SGD(params, lr=0.05, momentum=0.9), optax.sgd(0.05, momentum=0.9)),
    "adam": (lambda params: torch.optim.Adam(params, lr=3e-3), optax.adam(3e-3)),
}


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(12, 32), torch.nn.GELU(), torch.nn.Linear(32, 32),
                                       torch.nn.Tanh(), torch.nn.Linear(32, 5))

    def forward(self, x):
        return self.net(x)


class BatchNormCNN(torch.nn.Module):
    """Conv -> BatchNorm -> ReLU blocks and a linear head. The convolutions have no bias, as usual
    before BatchNorm: a bias there gets a zero gradient, which Adam turns into updates of noise."""

    def __init__(self, classes: int = 10):
        super().__init__()
        self.features = torch.nn.Sequential(
            torch.nn.Conv2d(3, 16, 3, padding=1, bias=False), torch.nn.BatchNorm2d(16), torch.nn.ReLU(),
            torch.nn.MaxPool2d(2),
            torch.nn.Conv2d(16, 32, 3, padding=1, bias=False), torch.nn.BatchNorm2d(32), torch.nn.ReLU(),
            torch.nn.AdaptiveAvgPool2d(1),
        )
        self.head = torch.nn.Linear(32, classes)

    def forward(self, x):
        return self.head(torch.flatten(self.features(x), 1))


def _classification_batches(shape, classes, seed=0):
    """Inputs with labels a fixed projection of them picks, so there is something to learn."""
    g = torch.Generator().manual_seed(seed)
    teacher = torch.randn(int(np.prod(shape[1:])), classes, generator=g)
    batches = []
    for _ in range(STEPS):
        x = torch.randn(*shape, generator=g)
        batches.append((x, (x.flatten(1) @ teacher).argmax(1)))
    return batches


def _cnn():
    torch.manual_seed(0)
    return BatchNormCNN(), _classification_batches((8, 3, 16, 16), 10)


def _mlp():
    torch.manual_seed(0)
    return MLP(), _classification_batches((16, 12), 5)


def _gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(vocab_size=128, n_positions=32, n_embd=32, n_layer=2, n_head=4, use_cache=False,
                        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    g = torch.Generator().manual_seed(0)
    batches = [(torch.randint(0, 128, (4, 16), generator=g),) for _ in range(STEPS)]
    return GPT2LMHeadModel(config), batches


def _torch_classification_loss(out, batch):
    return torch.nn.functional.cross_entropy(out, batch[1])


def _jax_classification_loss(out, batch):
    return optax.softmax_cross_entropy_with_integer_labels(out, jax.numpy.asarray(batch[1])).mean()


def _torch_lm_loss(out, batch):
    logits = out.logits[:, :-1]
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch[0][:, 1:].reshape(-1))


def _jax_lm_loss(out, batch):
    labels = jax.numpy.asarray(batch[0])[:, 1:]
    return optax.softmax_cross_entropy_with_integer_labels(out["logits"][:, :-1], labels).mean()


MODELS = {
    "cnn": (_cnn, _torch_classification_loss, _jax_classification_loss),
    "mlp": (_mlp, _torch_classification_loss, _jax_classification_loss),
    "gpt2": (_gpt2, _torch_lm_loss, _jax_lm_loss),
}


def _train_torch(module, batches, make_optimizer, loss_fn):
    module.train()
    optimizer = make_optimizer(module.parameters())
    losses = []
    for batch in batches:
        optimizer.zero_grad()
        loss = loss_fn(module(batch[0]), batch)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def _train_jax(module, batches, optimizer, loss_fn):
    model = jaxport.from_torch(module, (batches[0][0],), train=True)
    step = jaxport.train.train_step(model, loss_fn, optimizer)
    state = step.init(0)
    losses = []
    for batch in batches:
        state, metrics = step(state, tuple(np.asarray(t) for t in batch))
        losses.append(float(metrics["loss"]))
    return losses, state, model.tied


@pytest.mark.parametrize("optimizer", OPTIMIZERS)
@pytest.mark.parametrize("name", MODELS)
def test_training_matches_pytorch(name, optimizer):
    build, torch_loss, jax_loss = MODELS[name]
    module, batches = build()
    reference = copy.deepcopy(module)
    torch_losses = _train_torch(reference, batches, OPTIMIZERS[optimizer][0], torch_loss)
    jax_losses, state, model_tied = _train_jax(module, batches, OPTIMIZERS[optimizer][1], jax_loss)

    np.testing.assert_allclose(jax_losses, torch_losses, rtol=1e-4)
    trained = state.model_params()
    exact = None  # PyTorch's training in float64, made where float32 runs part (see below)
    moved = 0.0
    for key, want in reference.state_dict().items():
        got = np.asarray(trained[model_tied.get(key, key)])
        if not np.allclose(got, want.numpy(), rtol=1e-4, atol=1e-4):
            assert want.is_floating_point(), f"{key}: {got} against PyTorch's {want.numpy()}"
            # Two float32 runs part where a rounding of 1e-8 tips a discrete choice (the CNN: a
            # ReLU or max-pool decision at step 9 of 20, after which momentum carries 1e-3
            # apart; oneDNN's convolutions on AVX-512 do the same): the same training in
            # float64 on both sides, where such a tip would take 1e-16, must then agree.
            exact = exact or (_trained_in_float64(module, batches, optimizer, torch_loss),
                              _jax_trained_in_float64(module, batches, optimizer, jax_loss))
            theirs, ours = exact[0][key], exact[1][model_tied.get(key, key)]
            assert np.allclose(ours, theirs, rtol=1e-7, atol=1e-9), \
                f"{key}: float64 runs {np.abs(ours - theirs).max():.3g} apart (float32: {np.abs(got - want.numpy()).max():.3g})"
        if want.is_floating_point():
            moved = max(moved, float(np.abs(got - module.state_dict()[key].numpy()).max()))
    assert moved > 1e-2, "the weights should have moved: the comparison would prove nothing"
    if name == "cnn":  # the running statistics really moved, and moved the same way
        start = BatchNormCNN().state_dict()["features.1.running_var"]
        assert not np.allclose(np.asarray(trained["features.1.running_var"]), start.numpy())
        assert int(trained["features.1.num_batches_tracked"]) == STEPS


def _trained_in_float64(module, batches, optimizer, loss_fn) -> dict:
    """The state PyTorch's training reaches in float64 (the integer inputs and labels as they are)."""
    wide = copy.deepcopy(module).double()
    batches = [tuple(t.double() if t.is_floating_point() else t for t in batch) for batch in batches]
    _train_torch(wide, batches, OPTIMIZERS[optimizer][0], loss_fn)
    return {key: value.numpy() for key, value in wide.state_dict().items()}


def _jax_trained_in_float64(module, batches, optimizer, loss_fn) -> dict:
    """The state jaxport's training reaches in float64, from the same start as `_trained_in_float64`."""
    with jax.enable_x64(True):
        wide = copy.deepcopy(module).double()
        batches = [tuple(t.double() if t.is_floating_point() else t for t in batch) for batch in batches]
        _, state, tied = _train_jax(wide, batches, OPTIMIZERS[optimizer][1], loss_fn)
        return {key: np.asarray(value) for key, value in state.model_params().items()}


def test_dropout_masks_follow_the_key():
    module = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Dropout(0.3))
    x = torch.ones(1, 4)
    model = jaxport.from_torch(module, (x,), train=True)
    assert model.training and module.training
    big = jaxport.from_torch(torch.nn.Dropout(0.3), (torch.ones(400, 250),), train=True)
    ones = np.ones((400, 250), np.float32)
    a = np.asarray(big.apply(big.params, ones, rng=jax.random.key(1)))
    b = np.asarray(big.apply(big.params, ones, rng=jax.random.key(1)))
    c = np.asarray(big.apply(big.params, ones, rng=jax.random.key(2)))
    np.testing.assert_array_equal(a, b)
    assert (a != c).mean() > 0.3
    kept = a != 0
    # 100,000 draws: the keep rate's standard deviation is 0.0014; allow five of them.
    assert abs(kept.mean() - 0.7) < 0.0075
    np.testing.assert_allclose(a[kept], 1 / 0.7, rtol=1e-6)
    with pytest.raises(jaxport.InputError, match="rng="):
        model.apply(model.params, x)


def test_eval_conversion_of_a_training_module_keeps_its_mode():
    module = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Dropout(0.5), torch.nn.BatchNorm1d(4))
    module.train()
    model = jaxport.from_torch(module, (torch.ones(3, 4),), train=False)
    assert not model.training and module.training and module[1].training
    out = model.apply(model.params, np.ones((3, 4), np.float32))  # no rng needed: no dropout
    with torch.no_grad():
        want = module.eval()(torch.ones(3, 4))
    np.testing.assert_allclose(np.asarray(out), want.numpy(), rtol=1e-5, atol=1e-6)


def _arrays(state):
    """The state's arrays (the key aside: it is compared by its data)."""
    return jax.tree.leaves((state.params, state.buffers, state.opt_state, state.step))


@pytest.mark.compat
def test_checkpoint_round_trip_and_back_into_torch(tmp_path):
    module, batches = _cnn()
    model = jaxport.from_torch(module, (batches[0][0],), train=True)
    step = jaxport.train.train_step(model, _jax_classification_loss, optax.adam(1e-3))
    state = step.init(7)
    for batch in batches[:3]:
        state, _ = step(state, tuple(np.asarray(t) for t in batch))
    jaxport.train.save_checkpoint(tmp_path / "ckpt", state)
    restored = jaxport.train.load_checkpoint(tmp_path / "ckpt", step.init(0))
    for a, b in zip(_arrays(state), _arrays(restored), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert int(restored.step) == 3
    np.testing.assert_array_equal(jax.random.key_data(restored.rng), jax.random.key_data(state.rng))

    # Training goes on identically from the restored state.
    batch = tuple(np.asarray(t) for t in batches[3])
    _, m1 = step(jax.tree.map(lambda a: a.copy(), state), batch)
    _, m2 = step(restored, batch)
    assert float(m1["loss"]) == float(m2["loss"])

    # The trained weights, back in a fresh PyTorch module, give the JAX model's outputs.
    fresh = BatchNormCNN()
    jaxport.train.load_into_torch(fresh, state)
    fresh.eval()
    x = batches[0][0]
    with torch.no_grad():
        want = fresh(x).numpy()
    inference = jaxport.from_torch(fresh, (x,))
    got = np.asarray(inference.apply(state.model_params(), x))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert float(fresh.features[1].num_batches_tracked) == 3


def test_checkpoint_errors(tmp_path):
    module, batches = _mlp()
    model = jaxport.from_torch(module, (batches[0][0],), train=True)
    adam = jaxport.train.train_step(model, _jax_classification_loss, optax.adam(1e-3))
    sgd = jaxport.train.train_step(model, _jax_classification_loss, optax.sgd(1e-3, momentum=0.9))
    jaxport.train.save_checkpoint(tmp_path / "adam", adam.init())
    with pytest.raises(jaxport.InputError, match="optimizer"):
        jaxport.train.load_checkpoint(tmp_path / "adam", sgd.init())
    with pytest.raises(jaxport.InputError, match="not a jaxport checkpoint"):
        jaxport.train.load_checkpoint(tmp_path, adam.init())
    with pytest.raises(jaxport.InputError, match="no trained value"):
        jaxport.train.load_into_torch(MLP(), {"net.0.weight": model.params["net.0.weight"]})


@pytest.mark.compat
def test_frozen_parameters_stay_put():
    module, batches = _mlp()
    model = jaxport.from_torch(module, (batches[0][0],), train=True)
    step = jaxport.train.train_step(model, _jax_classification_loss, optax.sgd(0.1),
                              trainable=lambda name: not name.startswith("net.0."))
    state = step.init()
    assert "net.0.weight" in state.buffers and "net.2.weight" in state.params
    before = np.asarray(state.buffers["net.0.weight"]).copy()
    for batch in batches[:2]:
        state, _ = step(state, tuple(np.asarray(t) for t in batch))
    np.testing.assert_array_equal(np.asarray(state.buffers["net.0.weight"]), before)


def test_gpt2_with_dropout_trains_reproducibly():
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(vocab_size=128, n_positions=32, n_embd=32, n_layer=1, n_head=4, use_cache=False)
    module = GPT2LMHeadModel(config)  # HF's default dropout, 0.1 in three places
    _, batches = _gpt2()
    model = jaxport.from_torch(module, (batches[0][0],), train=True)
    assert len(model.random_nodes) >= 3
    step = jaxport.train.train_step(model, _jax_lm_loss, optax.adam(1e-3))

    def losses(seed):
        state, out = step.init(seed), []
        for batch in batches[:3]:
            state, metrics = step(state, (np.asarray(batch[0]),))
            out.append(float(metrics["loss"]))
        return out

    first, again, other = losses(0), losses(0), losses(1)
    assert first == again
    assert first[0] != other[0]  # another key, other dropout masks


def test_training_mode_without_dropout_needs_no_key():
    class Attention(torch.nn.Module):  # SDPA may draw (dropout_p), but here it does not
        def forward(self, q):
            return torch.nn.functional.scaled_dot_product_attention(q, q, q)

    q = torch.randn(1, 2, 4, 8)
    model = jaxport.from_torch(Attention(), (q,), train=True)
    assert model.training and not model.random_nodes
    np.testing.assert_allclose(np.asarray(model.apply(model.params, q)), Attention()(q).numpy(), atol=1e-6)


class SpectralFilter(torch.nn.Module):
    """A learned complex filter on a signal's spectrum, then a linear head: complex weights."""

    def __init__(self):
        super().__init__()
        self.filter = torch.nn.Parameter(torch.randn(7, dtype=torch.complex64) * 0.5)
        self.head = torch.nn.Linear(12, 5)

    def forward(self, x):
        return self.head(torch.fft.irfft(torch.fft.rfft(x) * self.filter, n=12))


def test_complex_weights_train_as_in_pytorch():
    """JAX's gradient in a complex weight is the conjugate of PyTorch's; the train step conjugates
    it, so SGD moves complex weights as torch.optim does (unconjugated, the imaginary parts would
    climb the loss). Adam is left out: torch.optim.Adam keeps moments of the real and imaginary
    parts apart, optax.adam of |g|^2."""
    torch.manual_seed(0)
    module, batches = SpectralFilter(), _classification_batches((16, 12), 5)
    reference = copy.deepcopy(module)
    make_optimizer, optimizer = OPTIMIZERS["sgd"]
    torch_losses = _train_torch(reference, batches, make_optimizer, _torch_classification_loss)
    jax_losses, state, _ = _train_jax(module, batches, optimizer, _jax_classification_loss)

    np.testing.assert_allclose(jax_losses, torch_losses, rtol=1e-4)
    trained = np.asarray(state.model_params()["filter"])
    np.testing.assert_allclose(trained, reference.filter.detach().numpy(), rtol=1e-4, atol=1e-5)
    moved = trained - module.filter.detach().numpy()
    assert np.abs(moved.imag).max() > 1e-2 and np.abs(moved.real).max() > 1e-2
