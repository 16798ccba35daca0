"""Models that do not live on the CPU. There is no GPU here, but the `meta` device records what a
CUDA graph records (BatchNorm's saved statistics one per channel, not empty as on the CPU): the
zoo is converted on `meta` through every entry point (`from_torch`, a `.pt2` file,
`from_causal_lm`, the torch.compile backend), given its real weights, and compared with PyTorch
on the CPU. Precision policies and `verify` take the model's device too."""

from __future__ import annotations

import copy

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import torch.utils._pytree as pytree

import jaxport
from jaxport import dynamo
from jaxport.compare import compare_all
from jaxport.errors import InputError, ModelFileError
from jaxport.frontends.pt2 import load_exported_program
from jaxport.ops import registry
from jaxport.precision import Precision
from tests.support import zoo

META = torch.device("meta")


def _on_meta(module: torch.nn.Module) -> torch.nn.Module:
    return copy.deepcopy(module).to(META)


def _leaves(output) -> list:
    if hasattr(output, "to_tuple"):  # a transformers ModelOutput
        output = output.to_tuple()
    return [x for x in pytree.tree_leaves(output) if isinstance(x, (torch.Tensor, jax.Array, np.ndarray))]


def _assert_matches(actual, expected, rtol=1e-4, atol=1e-4):
    checks = compare_all(_leaves(actual), _leaves(expected), rtol=rtol, atol=atol, per_tensor=True)
    failed = [check for check in checks if not check.passed]
    assert not failed, failed


def _channel_statistics(program) -> list[tuple]:
    """The saved-statistics shapes of the program's eval-mode BatchNorm nodes."""
    return [node.expected[1].shape for node in program.nodes
            if node.op == "aten._native_batch_norm_legit_no_training.default"]


@pytest.mark.parametrize("name", list(zoo.MODELS))
def test_zoo_converted_on_meta_runs_with_its_weights_loaded(name):
    module, args, kwargs = zoo.MODELS[name]()
    model = jaxport.from_torch(_on_meta(module), args, kwargs)
    # every weight lacks values but the buffers a Hugging Face model computes (rotary inv_freq)
    computed = {name for name in model.params if name not in model.missing_weights}
    assert computed <= model.computed_buffers
    assert name != "llama" or "model.rotary_emb.inv_freq" in computed
    with pytest.raises(InputError, match="meta device"):
        model(*args, **kwargs)
    assert model.load_weights(module) is model and not model.missing_weights
    with torch.no_grad():
        expected = module(*args, **kwargs)
    _assert_matches(model(*args, **kwargs), expected)


@pytest.mark.parametrize("name", ["cnn", "resnet"])
def test_batch_norm_decomposed_on_meta_keeps_the_statistics_the_graph_records(name):
    """Decomposed on `meta` as on a GPU, eval-mode BatchNorm saves one statistic per channel
    (the CPU saves none): the lowering returns what the graph records."""
    module, args, kwargs = zoo.MODELS[name]()
    model = jaxport.from_torch(_on_meta(module), args, kwargs, decompose="core")
    shapes = _channel_statistics(model.program)
    assert shapes and all(shape != (0,) for shape in shapes), shapes
    on_cpu = jaxport.from_torch(module, args, kwargs, decompose="core")
    assert all(shape == (0,) for shape in _channel_statistics(on_cpu.program))
    model.load_weights(module.state_dict())
    model.strict = True
    with torch.no_grad():
        expected = module(*args, **kwargs)
    _assert_matches(model(*args, **kwargs), expected)


def test_batch_norm_graph_recorded_off_the_cpu_trains_too():
    module, args, _ = zoo.cnn()
    model = jaxport.from_torch(_on_meta(module), args, train=True, decompose="core").load_weights(module)
    reference = copy.deepcopy(module).train()
    expected = reference(*args)
    outputs, updates = model.apply_with_updates(model.params, *args)
    _assert_matches(outputs, expected)
    for name, value in updates.items():
        np.testing.assert_allclose(np.asarray(value), reference.state_dict()[name].numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", ["cnn", "resnet", "bert"])
def test_pt2_exported_on_meta_loads_without_weights(name, tmp_path):
    module, args, kwargs = zoo.MODELS[name]()
    meta_args, meta_kwargs = pytree.tree_map(lambda t: t.to(META), (args, kwargs))
    exported = torch.export.export(_on_meta(module), meta_args, meta_kwargs).run_decompositions()
    path = tmp_path / "model.pt2"
    torch.export.save(exported, path)
    model = jaxport.from_exported_program(load_exported_program(str(path)))
    assert set(model.missing_weights) == set(model.params)
    model.load_weights(module)
    with torch.no_grad():
        expected = module(*args, **kwargs)
    _assert_matches(model(*args, **kwargs), expected)


def test_load_weights_names_what_does_not_fit():
    module, args, _ = zoo.cnn()
    model = jaxport.from_torch(_on_meta(module), args)
    weights = dict(module.state_dict())
    weights["head.weight"] = weights["head.weight"][:5]
    del weights["features.0.bias"]
    weights["extra"] = torch.zeros(1)
    with pytest.raises(InputError) as caught:
        model.load_weights(weights)
    message = str(caught.value)
    assert "no weight 'features.0.bias'" in message
    assert "weight 'head.weight' is float32[5, 32], the model's float32[10, 32]" in message
    assert "unknown weight 'extra'" in message
    assert model.missing_weights  # nothing was loaded
    del weights["extra"]
    weights["features.0.bias"] = module.state_dict()["features.0.bias"]
    weights["head.weight"] = module.state_dict()["head.weight"].half()
    with pytest.raises(InputError, match="float16"):
        model.load_weights(weights)


def test_apply_refuses_abstract_weights_and_runs_under_eval_shape():
    module, args, _ = zoo.cnn()
    model = jaxport.from_torch(_on_meta(module), args)
    shapes = jax.eval_shape(model.apply, model.params, jnp.asarray(args[0].numpy()))
    assert shapes.shape == (4, 10)
    with pytest.raises(InputError, match="no values"):
        model.apply(model.params, args[0])


def test_a_constant_on_meta_is_refused_by_name():
    """A weight can be loaded later; a constant tensor (here a plain attribute, neither parameter
    nor buffer) is part of the program, and on `meta` it has no values."""

    class Shifted(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.scale = torch.nn.Parameter(torch.ones(3))
            self.table = torch.arange(3.0, device=META)

        def forward(self, x):
            return x * self.scale + self.table

    with pytest.raises(ModelFileError, match="constant 'table'.* meta device"):
        jaxport.from_torch(Shifted().to(META), (torch.ones(2, 3),))


# -- generation --------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_causal_lm_converted_on_meta_generates_transformers_tokens(name):
    module, (ids,), _ = zoo.MODELS[name]()
    lm = jaxport.from_causal_lm(_on_meta(module), max_length=32, max_batch=2)
    with pytest.raises(InputError, match="meta device"):
        lm.generate(ids[:, :6], max_new_tokens=4)
    lm.load_weights(module)
    expected = module.generate(ids[:, :6], max_new_tokens=12, do_sample=False, attention_mask=torch.ones_like(ids[:, :6]))
    np.testing.assert_array_equal(np.asarray(lm.generate(ids[:, :6], max_new_tokens=12)), expected.numpy())


def test_causal_lm_on_meta_loads_a_state_dict_its_rotary_buffers_computed():
    """A state_dict lacks the non-persistent `inv_freq`; converted on meta, the model computed it."""
    module, _, _ = zoo.llama()
    lm = jaxport.from_causal_lm(_on_meta(module), max_length=16)
    lm.load_weights(module.state_dict())
    np.testing.assert_array_equal(np.asarray(lm.params["model.model.rotary_emb.inv_freq"]),
                                  module.model.rotary_emb.inv_freq.numpy())


# -- precision policies and verify -------------------------------------------------------------


def test_autocast_follows_the_model_device():
    policy = Precision(compute=jnp.bfloat16)
    assert policy.autocast("cpu").device == "cpu"
    with pytest.warns(UserWarning, match="CUDA is not available"):  # built for CUDA's op lists
        assert policy.autocast(torch.device("cuda", 0)).device == "cuda"
    with pytest.raises(InputError, match="no autocast for 'meta'"):
        policy.autocast(META)


def test_a_compute_policy_on_meta_is_refused_and_a_storage_policy_converts():
    module, args, _ = zoo.llama()
    with pytest.raises(InputError, match="autocast"):
        jaxport.from_torch(_on_meta(module), args, dtype=jnp.bfloat16)
    storage = Precision(params=jnp.bfloat16)
    model = jaxport.from_torch(_on_meta(module), args, dtype=storage)
    assert model.params["lm_head.weight"].dtype == jnp.bfloat16
    model.load_weights(storage.prepare(module))  # its weights stored in bfloat16
    expected = jaxport.from_torch(module, args, dtype=storage)(*args)["logits"]
    np.testing.assert_array_equal(np.asarray(model(*args)["logits"]), np.asarray(expected))


def test_verify_refuses_a_model_without_weights():
    module, args, _ = zoo.cnn()
    with pytest.raises(InputError, match="meta device"):
        jaxport.verify(_on_meta(module), args)


# -- the torch.compile backend -----------------------------------------------------------------


@pytest.fixture
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _compiled_graphs(module, args, kwargs, *, run_on_meta: bool, train: bool):
    """The `CompiledGraph`s `torch.compile(backend="jaxport")` makes of `module` with the ATen graph
    each was made from, in order, and the arguments each was called with. On `meta`, PyTorch runs the graphs (shapes only); jaxport
    only translates them."""
    graphs, calls = [], []
    real_compiler = dynamo._graph_compiler

    def recording_compiler(settings):
        compile_graph = real_compiler(settings)

        def compile_and_record(graph_module, example_inputs):
            compiled = compile_graph(graph_module, example_inputs)
            index = len(graphs)
            graphs.append((compiled, graph_module))
            if run_on_meta:
                from torch._functorch.aot_autograd import make_boxed_func
                return make_boxed_func(graph_module.forward)

            def call(args):
                calls.append((index, list(args)))
                return compiled(args)

            call._boxed_call = True
            return call

        return compile_and_record

    dynamo._graph_compiler = recording_compiler
    try:
        torch._dynamo.reset()
        compiled = torch.compile(module, backend="jaxport")
        context = torch.enable_grad() if train else torch.no_grad()
        with context:
            output = compiled(*args, **kwargs)
            if train:
                torch.autograd.backward(_leaves(output)[0].float().sum())
    finally:
        dynamo._graph_compiler = real_compiler
    return graphs, calls


@pytest.mark.usefixtures("fresh_dynamo")
@pytest.mark.parametrize("name,train", [("cnn", False), ("resnet", False), ("bert", False), ("vit", False),
                                        ("cnn", True)])
def test_dynamo_graphs_recorded_on_meta_run_on_real_tensors(name, train):
    """AOTAutograd's graphs of a model on `meta` (as on a GPU: BatchNorm's statistics per channel,
    attention as a GPU would trace it) translated by the backend, then run on the arguments the
    same model's graphs get on the CPU: each output equal to what PyTorch computes of the CPU
    graph."""
    module, args, kwargs = zoo.MODELS[name]()
    module.train(train)
    if train:
        torch.manual_seed(0)
        for m in module.modules():
            if isinstance(m, torch.nn.Dropout):
                m.p = 0.0
    meta_args, meta_kwargs = pytree.tree_map(lambda t: t.to(META), (args, kwargs))
    meta_graphs, _ = _compiled_graphs(_on_meta(module), meta_args, meta_kwargs, run_on_meta=True, train=train)
    cpu_graphs, calls = _compiled_graphs(copy.deepcopy(module), args, kwargs, run_on_meta=False, train=train)
    assert len(meta_graphs) == len(cpu_graphs) == len(calls) == (2 if train else 1)
    if name in ("cnn", "resnet") and not train:
        assert all(s != (0,) for s in _channel_statistics(meta_graphs[0][0].program))
    for index, arguments in calls:
        with torch.no_grad():
            expected = cpu_graphs[index][1](*[a.clone() if isinstance(a, torch.Tensor) else a for a in arguments])
        actual = meta_graphs[index][0]([a.clone() if isinstance(a, torch.Tensor) else a for a in arguments])
        _assert_matches(actual, expected, rtol=1e-5, atol=1e-5)


# -- PyTorch's GPU precision, and the eager frontend beside a GPU --------------------------------


def _convolution_precisions(model) -> set:
    return {node.kwargs.get("precision") for node in model.program.nodes if registry.is_convolution(node.op)}


def test_convolutions_compute_in_the_precision_pytorch_gives_them_on_a_gpu():
    """PyTorch's CUDA convolutions take TF32 by default, its products do not: the program says
    the same (XLA computes TF32 requests in float32 on the CPU, so CPU results are unchanged)."""
    module, args, _ = zoo.cnn()
    model = jaxport.from_torch(module, args)
    assert _convolution_precisions(model) == {"tensorfloat32"}
    assert model.program.matmul_precision == "float32"
    hlo = jax.jit(model.apply).lower(model.params, jnp.asarray(args[0].numpy())).as_text()
    assert "precision HIGH>" in hlo  # TF32 on a GPU, float32 on the CPU
    # TF32 off as users turn it off (the flags context: the OpInfo suite's torch.testing, in the
    # same process, forbids setting the flags directly)
    with torch.backends.cudnn.flags(enabled=torch.backends.cudnn.enabled, allow_tf32=False):
        assert _convolution_precisions(jaxport.from_torch(module, args)) == {"float32"}
    assert _convolution_precisions(jaxport.from_torch(module, args)) == {"tensorfloat32"}
    with torch.no_grad():
        np.testing.assert_allclose(np.asarray(model(*args)), module(*args).numpy(), rtol=1e-5, atol=1e-5)


def test_emit_and_export_refuse_a_model_without_weights(tmp_path):
    module, args, _ = zoo.cnn()
    model = jaxport.from_torch(_on_meta(module), args)
    with pytest.raises(InputError, match="meta device"):
        jaxport.emit(model, tmp_path / "emitted")
    with pytest.raises(InputError, match="meta device"):
        jaxport.export(model, args)
    assert not (tmp_path / "emitted").exists()
