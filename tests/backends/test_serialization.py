"""Serialized export (`jaxport.backends.serialization`): jax.export artifacts that run without torch or jaxport."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import jax
import numpy as np
import pytest
import torch

import jaxport
from jaxport import SerializationError, export, load_exported
from jaxport.ops import _native

# The loader from the module docstring, run in a fresh interpreter where importing torch or
# jaxport fails: the artifact must need only JAX, NumPy and safetensors.
STANDALONE = textwrap.dedent(
    """
    import json, sys
    sys.modules["torch"] = None  # any import of torch (or jaxport, which imports it) now fails
    sys.modules["jaxport"] = None
    import jax
    import numpy as np
    from safetensors.numpy import load_file

    d, cases_file, out_file = sys.argv[1:]
    with open(f"{d}/model.jaxexport", "rb") as f:
        exported = jax.export.deserialize(f.read())
    params = load_file(f"{d}/weights.safetensors")
    names = [s["name"] for s in json.load(open(f"{d}/signature.json"))["inputs"]]
    run = jax.jit(exported.call)
    cases = np.load(cases_file)
    results = {}
    for k in range(int(cases["n"])):
        outputs = run(params, *[cases[f"c{k}_{name}"] for name in names])
        for j, out in enumerate(outputs):
            if out is not None:
                results[f"c{k}_{j}"] = np.asarray(out)
    np.savez(out_file, **results)
    print("loaded modules:", [m for m in ("torch", "jaxport") if sys.modules.get(m) is not None])
    """
)


def run_standalone(directory, cases: list[dict[str, np.ndarray]], tmp_path) -> list[list[np.ndarray]]:
    """Run the saved artifact on each case ({input name: array}) in a fresh subprocess."""
    cases_file, out_file = tmp_path / "cases.npz", tmp_path / "outputs.npz"
    np.savez(cases_file, n=len(cases),
             **{f"c{k}_{name}": x for k, case in enumerate(cases) for name, x in case.items()})
    proc = subprocess.run([sys.executable, "-c", STANDALONE, str(directory), str(cases_file), str(out_file)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "loaded modules: []" in proc.stdout
    results = np.load(out_file)
    return [[results[k] for k in sorted((k for k in results.files if k.startswith(f"c{i}_")),
                                        key=lambda k: int(k.split("_")[1]))]
            for i in range(len(cases))]


def max_err(actual, expected) -> float:
    actual, expected = jax.tree_util.tree_leaves(actual), jax.tree_util.tree_leaves(expected)
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected):
        assert tuple(np.shape(a)) == tuple(np.shape(e))
    return max(float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(e, np.float64))))
               for a, e in zip(actual, expected))


class SmallCNN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.hidden = torch.nn.Linear(8 * 4 * 4, 256)  # 128 KiB of weights, none in the artifact
        self.out = torch.nn.Linear(256, 5)

    def forward(self, x):
        h = torch.nn.functional.max_pool2d(torch.relu(self.bn(self.conv(x))), 2)
        features = torch.relu(self.hidden(h.flatten(1)))
        return {"logits": self.out(features), "extra": (h.mean(), [features])}


def test_cnn_round_trip_runs_without_torch_or_jaxport(tmp_path):
    torch.manual_seed(0)
    module = SmallCNN().eval()
    x = torch.randn(2, 3, 8, 8)
    model = jaxport.from_torch(module, (x,))
    exported = export(model, (x,))
    directory = exported.save(tmp_path / "cnn")
    expected = model(x)

    # In process: the same structure and values as the JaxModel.
    assert max_err(exported(x), expected) <= 1e-6
    assert set(exported(x)) == {"logits", "extra"}
    assert exported.output_names == ("logits", "extra.0", "extra.1.0")

    # Weights are arguments, not constants: the StableHLO is much smaller than they are.
    artifact = (directory / "model.jaxexport").stat().st_size
    weights = (directory / "weights.safetensors").stat().st_size
    assert weights > 128 * 1024 and artifact < weights / 4, (artifact, weights)

    # A fresh process with only JAX, NumPy and safetensors gets the flat outputs.
    (flat,) = run_standalone(directory, [{"x": x.numpy()}], tmp_path)
    err = max_err(flat, [expected["logits"], expected["extra"][0], expected["extra"][1][0]])
    print(f"standalone vs JaxModel: max abs err {err:.2e}")
    assert err <= 1e-6

    # jaxport's loader rebuilds the nested outputs.
    loaded = load_exported(directory)
    out = loaded(x.numpy())
    assert isinstance(out, dict) and isinstance(out["extra"], tuple) and isinstance(out["extra"][1], list)
    assert max_err(out, expected) <= 1e-6


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.GELU(), torch.nn.Linear(16, 3))

    def forward(self, x):
        return self.net(x).softmax(-1)


def test_dynamic_batch_runs_at_other_batch_sizes(tmp_path):
    torch.manual_seed(0)
    module = MLP().eval()
    model = jaxport.from_torch(module, (torch.randn(3, 4),),
                               dynamic_shapes={"x": {0: torch.export.Dim("batch")}})
    exported = export(model, (torch.randn(3, 4),))
    assert exported.input_shapes == (("x_0", 4),)
    assert str(exported.exported.in_avals[-1].shape) == "(x_0, 4)"
    directory = exported.save(tmp_path / "mlp")

    xs = [torch.randn(2, 4), torch.randn(7, 4)]
    results = run_standalone(directory, [{"x": x.numpy()} for x in xs], tmp_path)
    for x, (out,) in zip(xs, results):
        err = max_err(out, module(x).detach().numpy())
        print(f"batch {x.shape[0]}: standalone vs PyTorch max abs err {err:.2e}")
        assert err <= 1e-5
    assert max_err(load_exported(directory)(x=xs[1].numpy()), module(xs[1]).detach().numpy()) <= 1e-5


class Pair(torch.nn.Module):
    def forward(self, x, y):
        return x * 2 + y


def test_dims_torch_export_made_equal_share_a_symbol():
    batch = torch.export.Dim("batch")
    x, y = torch.randn(3, 2), torch.randn(3, 2)
    model = jaxport.from_torch(Pair(), (x, y), dynamic_shapes=({0: batch}, {0: batch}))
    exported = export(model, (x, y))
    # The same torch Dim is the same jax symbol (one symbol each could not trace x + y).
    assert exported.input_shapes == (("x_0", 2), ("x_0", 2))
    x5, y5 = torch.randn(5, 2), torch.randn(5, 2)
    assert max_err(exported(x5, y5), (x5 * 2 + y5).numpy()) <= 1e-6
    with pytest.raises(jaxport.InputError, match="exported with them equal"):
        exported(x5, torch.randn(4, 2))
    # Named symbols choose for themselves.
    named = export(model, (x, y), dynamic={"x": {0: "n"}, "y": {0: "n"}})
    assert named.input_shapes == (("n", 2), ("n", 2))


def gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(vocab_size=64, n_positions=32, n_embd=32, n_layer=1, n_head=2,
                        use_cache=False, bos_token_id=0, eos_token_id=0)
    return GPT2LMHeadModel(config).eval()


@pytest.mark.compat
def test_gpt2_round_trip(tmp_path):
    module = gpt2()
    ids = torch.randint(0, 64, (2, 6))
    model = jaxport.from_torch(module, kwargs={"input_ids": ids})
    exported = export(model, (), {"input_ids": ids})
    loaded = load_exported(exported.save(tmp_path / "gpt2"))
    assert loaded.input_names == ("input_ids",) and loaded.output_names == ("logits",)
    expected = module(input_ids=ids).logits.detach().numpy()
    out = loaded(input_ids=ids.numpy())
    err = max_err(out["logits"], expected)
    print(f"GPT-2 reloaded vs PyTorch: max abs err {err:.2e}")
    assert err <= 1e-5
    assert max_err(exported(input_ids=ids)["logits"], expected) <= 1e-5


def test_gpt2_dynamic_batch_and_sequence(tmp_path):
    module = gpt2()
    ids, mask = torch.randint(0, 64, (2, 6)), torch.ones(2, 6, dtype=torch.long)
    batch, seq = torch.export.Dim("batch"), torch.export.Dim("seq", max=32)
    dims = {"input_ids": {0: batch, 1: seq}, "attention_mask": {0: batch, 1: seq}}
    model = jaxport.from_torch(module, kwargs={"input_ids": ids, "attention_mask": mask}, dynamic_shapes=dims)
    loaded = load_exported(export(model, (), {"input_ids": ids, "attention_mask": mask}).save(tmp_path / "gpt2"))
    for b, s in [(2, 6), (3, 11)]:
        ids, mask = torch.randint(0, 64, (b, s)), torch.ones(b, s, dtype=torch.long)
        mask[0, -2:] = 0
        expected = module(input_ids=ids, attention_mask=mask).logits.detach().numpy()
        assert max_err(loaded(ids.numpy(), mask.numpy())["logits"], expected) <= 1e-5


def test_bert_dynamic_batch_and_sequence_bounded_by_positions(tmp_path):
    from tests.support.zoo import MODELS

    module, args, kwargs = MODELS["bert"]()
    # BERT slices its 64 position buffers to the sequence length: torch.export records seq <= 64,
    # which the export must carry as a jax constraint to trace.
    batch, seq = torch.export.Dim("batch"), torch.export.Dim("seq", max=64)
    dims = {name: {0: batch, 1: seq} for name in kwargs}
    model = jaxport.from_torch(module, args, kwargs, dynamic_shapes=dims)
    exported = export(model, args, kwargs)
    assert exported.input_shapes == (("input_ids_0", "input_ids_1"),) * 2
    loaded = load_exported(exported.save(tmp_path / "bert"))
    for b, s in [(2, 16), (3, 9)]:
        ids, mask = torch.randint(0, 100, (b, s)), torch.ones(b, s, dtype=torch.long)
        mask[0, -3:] = 0
        with torch.no_grad():
            expected = module(input_ids=ids, attention_mask=mask).last_hidden_state.numpy()
        err = max_err(loaded(ids.numpy(), mask.numpy())["last_hidden_state"], expected)
        print(f"BERT [{b}, {s}] reloaded vs PyTorch: max abs err {err:.2e}")
        assert err <= 1e-4
    ids = np.zeros((1, 65), dtype=np.int32)
    with pytest.raises(ValueError):  # jax checks the constraint (the jitted call says little)
        loaded(ids, np.ones_like(ids))


class SymbolicSizes(torch.nn.Module):
    def forward(self, x):  # x: [batch, seq, 4]
        b, s = x.shape[0], x.shape[1]
        pos = torch.arange(s, dtype=torch.float32)  # a range of symbolic length
        y = x.reshape(b, -1).view(b, s, 4)  # -1 resolved against a symbolic size
        z = (y[:, 1:] + y[:, :-1]) * pos[1:, None]  # slices to the end and from it
        return z.unsqueeze(0).expand(2, -1, -1, -1) + torch.arange(b).view(1, b, 1, 1)


def test_shape_ops_take_symbolic_sizes():
    x = torch.randn(3, 5, 4)
    dims = {"x": {0: torch.export.Dim("batch"), 1: torch.export.Dim("seq", min=3, max=16)}}
    exported = export(jaxport.from_torch(SymbolicSizes(), (x,), dynamic_shapes=dims), (x,))
    assert exported.input_shapes == (("x_0", "x_1", 4),)
    for shape in [(2, 7, 4), (4, 3, 4)]:
        x = torch.randn(shape)
        assert max_err(exported(x), SymbolicSizes()(x).numpy()) <= 1e-6


class Nonzero(torch.nn.Module):
    def forward(self, x):
        return torch.nonzero(x > 0)


def test_errors():
    x = torch.randn(3, 4)
    with pytest.raises(SerializationError, match=r"aten\.nonzero"):
        export(jaxport.from_torch(Nonzero(), (x,)), (x,))
    static = jaxport.from_torch(MLP().eval(), (x,))
    with pytest.raises(SerializationError, match="dynamic_shapes="):
        export(static, (x,), dynamic=True)
    with pytest.raises(SerializationError, match=r"dim 0 of input 'x' is static \(size 3\).*dynamic_shapes="):
        export(static, (x,), dynamic={"x": {0: "batch"}})
    exported = export(static, (x,))
    with pytest.raises(jaxport.InputError, match=r"input 'x' has shape \(5, 4\).*float32\[3, 4\]"):
        exported(torch.randn(5, 4))


def test_load_names_what_is_missing(tmp_path):
    with pytest.raises(SerializationError, match="model.jaxexport"):
        load_exported(tmp_path)


class DepthwiseBlock(torch.nn.Module):
    """MobileNet's block: a depthwise 3x3 (CPUs: shifted multiply-adds) and a 1x1 (a product)."""

    def __init__(self):
        super().__init__()
        self.depthwise = torch.nn.Conv2d(8, 8, 3, padding=1, groups=8)
        self.pointwise = torch.nn.Conv2d(8, 4, 1)

    def forward(self, x):
        return self.pointwise(torch.relu(self.depthwise(x)))


def test_one_artifact_carries_each_platforms_convolution(tmp_path):
    """Exported for CPU and CUDA on a CPU-only machine, the program holds both formulations,
    picked by the platform it runs on, not by the host that traced it."""
    torch.manual_seed(0)
    module = DepthwiseBlock().eval()
    x = torch.randn(2, 8, 9, 9)
    model = jaxport.from_torch(module, (x,))
    both = export(model, (x,), platforms=("cpu", "cuda"))
    assert both.exported.platforms == ("cpu", "cuda")
    text = both.exported.mlir_module()
    assert "feature_group_count = 8" in text  # CUDA's grouped convolution
    assert "stablehlo.case" in text  # the choice, made by the platform at run time
    # Compiled for this CPU, the choice folds away: no grouped convolution, no conditional.
    compiled = jax.jit(model.apply).lower(model.params, jaxport.interop.to_jax(x)).compile().as_text()
    assert "feature_group_count=8" not in compiled and "conditional" not in compiled

    expected = module(x).detach().numpy()
    assert max_err(both(x), expected) <= 1e-5
    (flat,) = run_standalone(both.save(tmp_path / "block"), [{"x": x.numpy()}], tmp_path)
    assert max_err(flat, [expected]) <= 1e-5


def test_artifacts_need_no_compiled_kernel(tmp_path, monkeypatch):
    """Where jaxport runs a depthwise convolution with its compiled CPU kernel (an XLA custom
    call), the exported artifact holds the portable formulation instead: it runs with JAX alone."""
    monkeypatch.setattr(_native, "KERNEL_TAPS", 1)  # the kernel even on this small block
    torch.manual_seed(0)
    module = DepthwiseBlock().eval()
    x = torch.randn(2, 8, 9, 9)
    model = jaxport.from_torch(module, (x,))
    in_process = jax.jit(model.apply).lower(model.params, jaxport.interop.to_jax(x)).as_text()
    assert (_native.DEPTHWISE_TARGET in in_process) == _native.loaded()
    exported = export(model, (x,), platforms=("cpu",))
    assert _native.DEPTHWISE_TARGET not in exported.exported.mlir_module()
    (flat,) = run_standalone(exported.save(tmp_path / "block"), [{"x": x.numpy()}], tmp_path)
    assert max_err(flat, [module(x).detach().numpy()]) <= 1e-5
