"""`torch.compile(model, backend="jaxport")` against eager PyTorch: forward and backward of zoo and
Hugging Face models, a training loop, BatchNorm's running statistics, graph breaks, sizes,
recompilation, options, unsupported ops and the entry point."""

from __future__ import annotations

import copy
import gc
import subprocess
import sys
import textwrap

import pytest
import torch

import jaxport
from jaxport import dynamo
from jaxport.errors import InputError, UnsupportedOpsError
from tests.support import zoo


@pytest.fixture(autouse=True)
def fresh_dynamo():
    """Each test compiles from scratch: Dynamo's caches cleared, jaxport's graph counts zeroed."""
    torch._dynamo.reset()
    dynamo.counters.update(graphs=0, fallbacks=0)
    yield
    torch._dynamo.reset()


def _first_tensor(output):
    if isinstance(output, torch.Tensor):
        return output
    if isinstance(output, dict) or hasattr(output, "values"):
        return next(v for v in output.values() if isinstance(v, torch.Tensor))
    return _first_tensor(output[0])


def _loss(output: torch.Tensor) -> torch.Tensor:
    """A loss whose gradient is not near zero anywhere (the mean square of a LayerNorm's output
    is nearly constant, so its gradients are rounding noise): output times fixed weights."""
    weights = torch.randn(output.shape, generator=torch.Generator().manual_seed(1))
    return (output.float() * weights).sum()


def _assert_gradients_match(model: torch.nn.Module, reference: torch.nn.Module, tolerance: float = 1e-4):
    """Every parameter's gradient equal to eager's, within `tolerance` of the largest one.
    A parameter eager leaves without a gradient (an unused pooler) may get zeros compiled."""
    scale = max(p.grad.abs().max().item() for p in reference.parameters() if p.grad is not None)
    for (name, param), ref in zip(model.named_parameters(), reference.parameters()):
        if ref.grad is None:
            assert param.grad is None or not param.grad.any(), name
            continue
        error = (param.grad - ref.grad).abs().max().item()
        assert error <= tolerance * scale, f"{name}: gradient off by {error:.3g} (largest {scale:.3g})"


def bert_classifier():
    """A tiny BERT for sequence classification, dropout off."""
    from transformers import BertConfig, BertForSequenceClassification

    torch.manual_seed(0)
    config = BertConfig(vocab_size=1000, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=64, max_position_embeddings=64, num_labels=3,
                        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    ids = torch.randint(0, 1000, (4, 12), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    mask[1, 8:] = 0
    return BertForSequenceClassification(config).eval(), (), {"input_ids": ids, "attention_mask": mask}


MODELS = {"cnn": zoo.cnn, "resnet": zoo.resnet, "gpt2": zoo.gpt2, "llama": zoo.llama, "vit": zoo.vit,
          "minilm": zoo.minilm, "bert_classifier": bert_classifier}


def _outputs(output) -> list[torch.Tensor]:
    """Every tensor a model returns (a ModelOutput's fields, nested tuples and dicts)."""
    if hasattr(output, "to_tuple"):
        output = output.to_tuple()
    return [t for t in torch.utils._pytree.tree_leaves(output) if isinstance(t, torch.Tensor)]


def _assert_outputs_match(actual, expected) -> None:
    actual, expected = _outputs(actual), _outputs(expected)
    assert len(actual) == len(expected) > 0
    for i, (a, e) in enumerate(zip(actual, expected)):
        torch.testing.assert_close(a, e, rtol=1e-4, atol=1e-5, msg=lambda m, i=i: f"output {i}: {m}")


#: The test zoo and a classifier, each as users run it: inference under torch.no_grad().
INFERENCE = {**{name: build for name, build in zoo.MODELS.items()}, "bert_classifier": bert_classifier}


@pytest.mark.parametrize("name", sorted(INFERENCE))
def test_inference_without_gradients_matches_eager_in_every_output(name):
    model, args, kwargs = INFERENCE[name]()
    compiled = torch.compile(model, backend="jaxport")
    with torch.no_grad():
        expected = model(*args, **kwargs)
        for _ in range(2):  # the compiling call, then one that runs what was compiled
            _assert_outputs_match(compiled(*args, **kwargs), expected)
    assert dynamo.counters["graphs"] >= 1 and dynamo.counters["fallbacks"] == 0


@pytest.mark.parametrize("name", [pytest.param(n, marks=[pytest.mark.slow] if n in ("minilm", "vit") else [])
                                  for n in sorted(MODELS)])  # encoder layers bert_classifier has
def test_forward_and_backward_match_eager(name):
    model, args, kwargs = MODELS[name]()
    if name == "cnn":
        model.train()  # BatchNorm on batch statistics, running statistics updated
    reference = copy.deepcopy(model)
    compiled = torch.compile(model, backend="jaxport")
    outputs, references = compiled(*args, **kwargs), reference(*args, **kwargs)
    _assert_outputs_match(outputs, references)
    output, expected = _first_tensor(outputs), _first_tensor(references)
    _loss(output).backward()
    _loss(expected).backward()
    _assert_gradients_match(model, reference)
    assert dynamo.counters["graphs"] >= 2 and dynamo.counters["fallbacks"] == 0  # forward, backward


def test_training_matches_eager_for_20_steps():
    """A Hugging Face model trained with AdamW: every step's loss equal to eager's within 1e-5."""
    model, _, kwargs = bert_classifier()
    model.train()
    labels = torch.tensor([0, 2, 1, 2])
    reference = copy.deepcopy(model)
    compiled = torch.compile(model, backend="jaxport")

    def losses(forward, module) -> list[float]:
        optimizer = torch.optim.AdamW(module.parameters(), lr=1e-3)
        result = []
        for _ in range(20):
            optimizer.zero_grad()
            loss = forward(**kwargs, labels=labels).loss
            loss.backward()
            optimizer.step()
            result.append(loss.item())
        return result

    compiled_losses, eager_losses = losses(compiled, model), losses(reference, reference)
    assert eager_losses[-1] < eager_losses[0]  # it learns, so equal losses mean equal updates
    torch.testing.assert_close(compiled_losses, eager_losses, rtol=1e-5, atol=0)


def test_batchnorm_running_statistics_follow_eager():
    model, (pixels,), _ = zoo.cnn()
    model.train()
    reference = copy.deepcopy(model)
    compiled = torch.compile(model, backend="jaxport")
    for module, forward in ((model, compiled), (reference, reference)):
        optimizer = torch.optim.SGD(module.parameters(), lr=0.1)
        for step in range(3):
            optimizer.zero_grad()
            _loss(forward(pixels + step)).backward()
            optimizer.step()
    for (name, buffer), expected in zip(model.named_buffers(), reference.buffers()):
        torch.testing.assert_close(buffer, expected, rtol=1e-5, atol=1e-6, msg=name)
    assert int(model.features[1].num_batches_tracked) == 3


class Branchy(torch.nn.Module):
    """A Python branch on a tensor's value: Dynamo breaks the graph at `.item()`."""

    def __init__(self):
        super().__init__()
        self.first, self.positive, self.negative = (torch.nn.Linear(8, 8) for _ in range(3))

    def forward(self, x):
        h = torch.tanh(self.first(x))
        if h.sum().item() > 0:
            return self.positive(h)
        return self.negative(h).relu()


def test_graph_breaks_run_each_part_on_jax():
    torch.manual_seed(0)
    model = Branchy()
    compiled = torch.compile(model, backend="jaxport")
    for sign in (1.0, -1.0):
        x = sign * torch.ones(4, 8)
        with torch.no_grad():
            torch.testing.assert_close(compiled(x), model(x), rtol=1e-5, atol=1e-6)
    # The part before the break, and each branch after it, compiled by jaxport.
    assert dynamo.counters["graphs"] == 3


@pytest.mark.compat
def test_generate_with_a_compiled_forward_gives_eagers_tokens():
    """transformers' generate over a compiled forward: a cache that grows each step (its empty
    tensors are constants of the first graph, read outside AOTAutograd's fake mode)."""
    model, (ids,), _ = zoo.gpt2()
    expected = model.generate(ids, max_new_tokens=4, do_sample=False, pad_token_id=0, use_cache=True)
    model.forward = torch.compile(model.forward, backend="jaxport")
    generated = model.generate(ids, max_new_tokens=4, do_sample=False, pad_token_id=0, use_cache=True)
    assert torch.equal(generated, expected)
    assert dynamo.counters["graphs"] >= 2 and dynamo.counters["fallbacks"] == 0


def test_dynamic_sizes_compile_one_graph():
    """dynamic=True: one forward and one backward graph serve every batch size."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.LayerNorm(16), torch.nn.GELU(),
                                torch.nn.Linear(16, 4))
    reference = copy.deepcopy(model)
    compiled = torch.compile(model, backend="jaxport", dynamic=True)
    for batch in (3, 5, 7):
        x = torch.randn(batch, 8)
        output, expected = compiled(x), reference(x)
        torch.testing.assert_close(output, expected, rtol=1e-5, atol=1e-6)
        _loss(output).backward()
        _loss(expected).backward()
    _assert_gradients_match(model, reference)
    assert dynamo.counters["graphs"] == 2


def test_a_failed_guard_recompiles():
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 4)
    compiled = torch.compile(model, backend="jaxport", dynamic=False)
    with torch.no_grad():
        for batch in (3, 3, 2):  # the second call reuses the first graph; the third fails its guard
            x = torch.randn(batch, 8)
            torch.testing.assert_close(compiled(x), model(x))
    assert dynamo.counters["graphs"] == 2  # shape (3, 8), then (2, 8): one graph each


def test_outputs_do_not_alias_inputs():
    """`clone` is the identity in JAX; the tensor handed back must still be a copy."""
    compiled = torch.compile(lambda x: (x.clone(), x * 2), backend="jaxport")
    x = torch.arange(6.0)
    copied, doubled = compiled(x)
    copied.add_(1)
    torch.testing.assert_close(x, torch.arange(6.0))
    torch.testing.assert_close(doubled, torch.arange(6.0) * 2)


def test_compiles_after_the_eager_frontend_named_the_jax_device():
    """With the eager frontend loaded, torch.accelerator sees the jax device, and Dynamo asks it
    for its current stream at every trace: the device's hooks and guard must answer."""
    with jaxport.eager():
        on_jax = torch.ones(2, device="jax")
    compiled = torch.compile(lambda x: torch.sin(x) * 2, backend="jaxport")
    x = torch.linspace(-1, 1, 5)
    torch.testing.assert_close(compiled(x), torch.sin(x) * 2)
    assert on_jax.device.type == "jax"


@torch.library.custom_op("jaxport_dynamo_test::shout", mutates_args=())
def shout(x: torch.Tensor) -> torch.Tensor:
    return x * 10


@shout.register_fake
def _(x):
    return torch.empty_like(x)


def test_an_op_without_lowering_is_named_at_compile_time():
    compiled = torch.compile(lambda x: shout(x) + 1, backend="jaxport")
    # Dynamo wraps a backend's error in its own, whose message is "backend='jaxport' raised:"
    # and then jaxport's, without jaxport's traceback.
    with pytest.raises(torch._dynamo.exc.BackendCompilerFailed) as caught:
        compiled(torch.ones(3))
    assert isinstance(caught.value.inner_exception, UnsupportedOpsError)
    assert "jaxport_dynamo_test.shout.default" in str(caught.value)


def test_fallback_runs_such_graphs_eagerly_warning_once():
    compiled = torch.compile(lambda x: shout(x) + 1, backend="jaxport", options={"fallback": True})
    with pytest.warns(UserWarning, match="jaxport_dynamo_test.shout.default"):
        torch.testing.assert_close(compiled(torch.ones(3)), torch.full((3,), 11.0))
    assert dynamo.counters == {"graphs": 0, "fallbacks": 1}


@pytest.mark.parametrize("mode, options, message", [
    ("max-autotune", None, "mode='default' only"),
    (None, {"frozen": True, "fallback": True}, r"no option\(s\) 'frozen'"),
    (None, {"fallback": "yes"}, "'fallback' takes"),
])
def test_unknown_settings_are_refused(mode, options, message):
    with pytest.raises(ValueError, match=message):
        dynamo.settings(mode, options)


def test_the_entry_point_finds_the_backend_without_importing_jaxport():
    script = textwrap.dedent("""
        import sys, torch
        model = torch.nn.Linear(4, 2)
        x = torch.randn(3, 4)
        with torch.no_grad():
            torch.testing.assert_close(torch.compile(model, backend="jaxport")(x), model(x))
        assert "jaxport.dynamo" in sys.modules
        print("ok")
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]


# -- the per-call path: imports kept, no host reads, outputs of their own -------------------------


def _linear_stack(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))


def _count_imports(monkeypatch) -> list:
    """Every tensor the backend imports by sharing its memory (`dlpack.share`), as it is called."""
    imported = []
    share = dynamo.dlpack.share

    def counting(tensor):
        imported.append(tensor)
        return share(tensor)

    monkeypatch.setattr(dynamo.dlpack, "share", counting)
    return imported


def test_parameters_are_imported_once(monkeypatch):
    model = _linear_stack()
    compiled = torch.compile(model, backend="jaxport")
    x = torch.randn(3, 8, generator=torch.Generator().manual_seed(1))
    imported = _count_imports(monkeypatch)
    with torch.no_grad():
        for _ in range(5):
            torch.testing.assert_close(compiled(x), model(x))
    assert len(imported) == 5  # four parameters and the input, once each
    fresh = [torch.randn(3, 8, generator=torch.Generator().manual_seed(2 + i)) for i in range(5)]
    with torch.no_grad():
        for y in fresh:
            torch.testing.assert_close(compiled(y), model(y))
    assert len(imported) == 10  # then only each new input
    with torch.no_grad():
        for _ in range(3):  # written in place, as an optimizer's step writes: seen through the kept arrays
            model[0].weight.mul_(0.5)
            torch.testing.assert_close(compiled(fresh[-1]), model(fresh[-1]))
    assert len(imported) == 10


def test_a_parameter_rebound_to_another_view_of_its_memory_is_seen():
    """`.data` set to its own transpose: the same address and version counter, another layout."""
    torch.manual_seed(3)
    model = torch.nn.Linear(6, 6)
    compiled = torch.compile(model, backend="jaxport")
    x = torch.randn(2, 6, generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x))
        pointer, version = model.weight.data_ptr(), model.weight._version
        model.weight.data = model.weight.data.t()
        assert (model.weight.data_ptr(), model.weight._version) == (pointer, version)
        torch.testing.assert_close(compiled(x), model(x))


def test_in_place_updates_are_seen():
    """Every way a parameter changes between calls: in place with and without the version counter
    (`.data` bypasses it), rebound to new memory, loaded from a state dict."""
    model = _linear_stack()
    compiled = torch.compile(model, backend="jaxport")
    x = torch.randn(3, 8, generator=torch.Generator().manual_seed(1))
    first = model[0].weight
    changes = [
        lambda: first.add_(1.0),
        lambda: first.data.mul_(0.5),
        lambda: setattr(model[2].bias, "data", torch.full((4,), 3.0)),
        lambda: model.load_state_dict(_linear_stack(seed=7).state_dict()),
    ]
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x))
        for change in changes:
            before = compiled(x).clone()
            change()
            output = compiled(x)
            torch.testing.assert_close(output, model(x))
            assert not torch.allclose(output, before)


def test_sgd_steps_follow_eager():
    model = _linear_stack()
    reference = copy.deepcopy(model)
    compiled = torch.compile(model, backend="jaxport")
    x = torch.randn(6, 8, generator=torch.Generator().manual_seed(1))
    target = torch.randn(6, 4, generator=torch.Generator().manual_seed(2))
    losses = {}
    for name, module, forward in (("compiled", model, compiled), ("eager", reference, reference)):
        optimizer = torch.optim.SGD(module.parameters(), lr=0.1, momentum=0.9)
        losses[name] = []
        for _ in range(4):
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(forward(x), target)
            loss.backward()
            optimizer.step()
            losses[name].append(loss.item())
    assert losses["eager"][-1] < losses["eager"][0]
    torch.testing.assert_close(losses["compiled"], losses["eager"], rtol=1e-5, atol=0)
    for param, expected in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(param, expected, rtol=1e-5, atol=1e-6)


def test_batchnorm_running_statistics_over_calls_without_gradients():
    """Train-mode BatchNorm under no_grad: each call's update reads the statistics the call
    before wrote back (AOTAutograd copies them into the buffers the backend keeps imported)."""
    model, (pixels,), _ = zoo.cnn()
    model.train()
    reference = copy.deepcopy(model)
    compiled = torch.compile(model, backend="jaxport")
    with torch.no_grad():
        for step in range(4):
            batch = pixels * (step + 1) + step
            torch.testing.assert_close(compiled(batch), reference(batch), rtol=1e-4, atol=1e-5)
            for (name, buffer), expected in zip(model.named_buffers(), reference.buffers()):
                torch.testing.assert_close(buffer, expected, rtol=1e-5, atol=1e-6, msg=name)
    assert int(model.features[1].num_batches_tracked) == 4


class MaskedEmbedding(torch.nn.Module):
    """int64 ids and a bool mask in, as a language model takes them."""

    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(50, 8)
        self.proj = torch.nn.Linear(8, 4)

    def forward(self, ids, mask):
        hidden = self.embed(ids).masked_fill(~mask[..., None], 0.0)
        return self.proj(hidden).sum(1), mask.sum(1)


def _ids_and_mask(seed: int):
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, 50, (2, 6), generator=generator)
    mask = torch.rand(2, 6, generator=generator) > 0.3
    return ids, mask


def test_no_host_reads_in_a_steady_state_call(monkeypatch):
    """int64 ids and a bool mask cross without a host read: nothing calls `.item()`, `.cpu()`,
    `.numpy()` or `.tolist()`, nothing copies through NumPy, new tensors or the same ones."""
    torch.manual_seed(0)
    model = MaskedEmbedding()
    compiled = torch.compile(model, backend="jaxport")
    with torch.no_grad():
        compiled(*_ids_and_mask(0))
    reads = []
    for name in ("item", "cpu", "numpy", "tolist"):
        real = getattr(torch.Tensor, name)
        monkeypatch.setattr(torch.Tensor, name, lambda self, *a, _real=real, _name=name, **k: (
            reads.append(_name), _real(self, *a, **k))[1])
    monkeypatch.setattr(dynamo.dlpack, "to_numpy", lambda *a, **k: reads.append("to_numpy"))
    monkeypatch.setattr(dynamo.dlpack, "to_jax", lambda *a, **k: reads.append("to_jax"))
    outputs = []
    with torch.no_grad():
        for seed in (1, 2, 2):
            ids, mask = _ids_and_mask(seed)
            outputs.append((compiled(ids, mask), ids, mask))
    monkeypatch.undo()
    assert reads == []
    with torch.no_grad():
        for (summed, counts), ids, mask in outputs:
            expected_sum, expected_counts = model(ids, mask)
            torch.testing.assert_close(summed, expected_sum)
            assert counts.dtype == torch.int64 and torch.equal(counts, expected_counts)


def test_int64_values_int32_cannot_hold_are_refused():
    compiled = torch.compile(lambda ids: ids + 1, backend="jaxport")
    torch.testing.assert_close(compiled(torch.tensor([1, -2, 2**31 - 2])), torch.tensor([2, -1, 2**31 - 1]))
    torch.testing.assert_close(compiled(torch.tensor([-(2**31), 5, 6])), torch.tensor([1 - 2**31, 6, 7]))
    with pytest.raises(InputError, match="outside int32's range"):
        compiled(torch.tensor([1, 2**40 + 1, 3]))
    with pytest.raises(InputError, match="outside int32's range"):
        compiled(torch.tensor([1, -(2**31) - 1, 3]))


def test_bool_and_empty_inputs_give_eagers_outputs():
    def fn(x, keep, empty, no_ids, no_flags):
        return (torch.where(keep, x, -x), keep & (x > 0), torch.cat([x, empty]), empty * 2,
                no_ids + 1, no_flags | True, x.sum() + empty.sum())

    compiled = torch.compile(fn, backend="jaxport")
    generator = torch.Generator().manual_seed(3)
    for _ in range(2):
        x = torch.randn(5, generator=generator)
        args = (x, x > 0.2, torch.empty(0), torch.zeros(0, dtype=torch.int64), torch.zeros(0, 3, dtype=torch.bool))
        for output, expected in zip(compiled(*args), fn(*args)):
            assert output.dtype == expected.dtype and output.shape == expected.shape
            torch.testing.assert_close(output, expected)


def _compiled_graph(fn, *args) -> dynamo.CompiledGraph:
    """`fn`'s ATen graph (make_fx) as the backend compiles AOTAutograd's graphs."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from jaxport.frontends.torch_export import graph_program

    graph_module = make_fx(fn)(*args)
    return dynamo.CompiledGraph(graph_program(graph_module), graph_module)


def test_outputs_are_tensors_of_their_own():
    """`clone` is the identity in JAX and one value may be returned twice: every output the graph
    computes has its own memory; an output that is the graph's input is that input (as Inductor
    returns AOTAutograd's saved parameters)."""
    def fn(x):
        doubled = x * 2
        return doubled, doubled, x.clone(), x.clone(), x

    x = torch.arange(6.0)
    graph = _compiled_graph(fn, x)
    for _ in range(2):
        outputs = graph([x])
        assert outputs[4] is x
        pointers = {t.untyped_storage().data_ptr() for t in outputs[:4]} | {x.untyped_storage().data_ptr()}
        assert len(pointers) == 5
        for output in outputs[:4]:
            output.add_(100)
        torch.testing.assert_close(x, torch.arange(6.0))
        torch.testing.assert_close(outputs[1], torch.arange(6.0) * 2 + 100)


def test_kept_imports_hold_tensors_weakly():
    """A kept import goes with its tensor: the cache never keeps a model's memory alive."""
    weight = torch.randn(4, 4, generator=torch.Generator().manual_seed(0))
    graph = _compiled_graph(lambda x, w: (x @ w,), torch.ones(2, 4), weight)
    x = torch.ones(2, 4)
    torch.testing.assert_close(graph([x, weight])[0], x @ weight)
    assert all(entry is not None for entry in graph._imports)
    del weight
    gc.collect()
    assert graph._imports[0] is not None and graph._imports[1] is None


def _unaligned(tensor: torch.Tensor) -> torch.nn.Parameter:
    """`tensor`'s values in memory 4 bytes past an aligned address (weights loaded from a file at
    such offsets are common): XLA cannot take it as it lies, so JAX imports a copy."""
    flat = torch.empty(tensor.numel() + 1, dtype=tensor.dtype)
    flat[1:] = tensor.reshape(-1)
    return torch.nn.Parameter(flat[1:].view(tensor.shape))


def test_copied_imports_are_kept_while_their_version_holds(monkeypatch):
    """Where the import is a copy, it is kept until the tensor's version counter moves: imported
    once over unchanged calls, again after each in-place write."""
    model = _linear_stack()
    with torch.no_grad():
        model[0].weight = _unaligned(model[0].weight)
    assert model[0].weight.data_ptr() % 16
    compiled = torch.compile(model, backend="jaxport")
    x = torch.randn(3, 8, generator=torch.Generator().manual_seed(1))
    copies = []
    to_jax = dynamo.dlpack.to_jax
    monkeypatch.setattr(dynamo.dlpack, "to_jax", lambda t, *a, **k: (copies.append(t), to_jax(t, *a, **k))[1])
    with torch.no_grad():
        for _ in range(3):
            torch.testing.assert_close(compiled(x), model(x))
        assert len(copies) == 1
        for change in (lambda: model[0].weight.mul_(-1.0),
                       lambda: model.load_state_dict(_linear_stack(seed=7).state_dict())):
            before = compiled(x).clone()
            change()
            torch.testing.assert_close(compiled(x), model(x))
            assert not torch.allclose(compiled(x), before)
    assert len(copies) == 3
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    compiled(x).square().sum().backward()
    optimizer.step()
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x))
