"""Weights from a safetensors checkpoint on disk: `load_weights(path)` of a directory (an index and
its shards) and of one file, each tensor checked against its header before any is read, pickles
and broken files refused by name; a model built on `meta` completes the buffers it computes
(rotary `inv_freq`); `TrainStep.init` starts from a checkpoint; a progress bar where asked. The
sharded placement (each device's slice read, and only it) runs over 8 CPU devices in a
subprocess, `tests/distributed/sharded_checkpoint.py`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import optax
import pytest
import safetensors.torch
import torch

import jaxport
from jaxport import checkpoints
from jaxport.errors import InputError, ModelFileError
from tests.support import zoo

ROOT = Path(__file__).resolve().parents[1]


def _config(**changes):
    from transformers import LlamaConfig

    return LlamaConfig(vocab_size=300, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                       tie_word_embeddings=False, **changes)


def _llama(seed: int = 0, dtype=torch.float32):
    from transformers import LlamaForCausalLM

    torch.manual_seed(seed)
    config = _config()
    return LlamaForCausalLM(config).to(dtype).eval(), config


def _on_meta(config, dtype=torch.float32):
    from transformers import LlamaForCausalLM

    with torch.device("meta"):
        return LlamaForCausalLM(config).to(dtype).eval()


IDS = np.array([[5, 17, 42, 99, 3, 250, 7, 1]])


def _logits(lm) -> np.ndarray:
    logits, _ = lm.prefill(lm.params, lm.init_cache(1), IDS)
    return np.asarray(logits)


@pytest.mark.compat
@pytest.mark.parametrize("layout", ["shards", "one file"])
def test_a_checkpoint_on_disk_loads_as_the_module_does(tmp_path, layout):
    """A model converted on `meta` and given `save_pretrained`'s checkpoint (a directory of four
    shards and an index, or one `.safetensors` file) computes what the model converted from the
    module computes, and generates its tokens."""
    model, config = _llama(seed=1)
    if layout == "shards":
        model.save_pretrained(tmp_path, max_shard_size="200KB")
        assert len(list(tmp_path.glob("model-*.safetensors"))) >= 3
        path = tmp_path
    else:
        path = tmp_path / "weights.safetensors"
        safetensors.torch.save_file({k: v.contiguous() for k, v in model.state_dict().items()}, path)
    reference = jaxport.from_causal_lm(model, max_length=24)
    lm = jaxport.from_causal_lm(_on_meta(config), max_length=24)
    assert not any("inv_freq" in name for name in lm.missing_weights)  # computed on conversion
    lm.load_weights(str(path))
    assert not lm.missing_weights
    np.testing.assert_array_equal(_logits(lm), _logits(reference))
    np.testing.assert_array_equal(np.asarray(lm.generate(IDS, max_new_tokens=6)),
                                  np.asarray(reference.generate(IDS, max_new_tokens=6)))


def test_a_tied_checkpoint_and_a_plain_module(tmp_path):
    """GPT-2 saves its tied head once; a model of any module loads a `save_file` of its state."""
    model, (ids,), _ = zoo.gpt2()
    model.save_pretrained(tmp_path / "gpt2")
    lm = jaxport.from_causal_lm(model, max_length=20)
    with torch.device("meta"):
        meta = type(model)(model.config).eval()
    loaded = jaxport.from_causal_lm(meta, max_length=20).load_weights(tmp_path / "gpt2")
    np.testing.assert_array_equal(np.asarray(loaded.generate(ids[:1, :6], max_new_tokens=4)),
                                  np.asarray(lm.generate(ids[:1, :6], max_new_tokens=4)))

    torch.manual_seed(2)
    mlp = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    safetensors.torch.save_file(mlp.state_dict(), tmp_path / "mlp.safetensors")
    x = torch.randn(2, 4, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        expected = mlp(x).numpy()
    jm = jaxport.from_torch(mlp.to("meta"), (x,)).load_weights(tmp_path / "mlp.safetensors")
    np.testing.assert_allclose(np.asarray(jm(x)), expected, rtol=1e-6, atol=1e-6)


def _mlp_model():
    torch.manual_seed(4)
    mlp = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    return mlp, jaxport.from_torch(mlp, (torch.zeros(2, 4),))


def test_a_mismatched_header_is_named_before_anything_is_read(tmp_path, monkeypatch):
    mlp, jm = _mlp_model()
    state = {k: v.clone() for k, v in mlp.state_dict().items()}
    state["2.weight"] = torch.zeros(3, 9)
    state["extra"] = torch.zeros(1)
    del state["0.bias"]
    safetensors.torch.save_file(state, tmp_path / "bad.safetensors")
    reads = []
    monkeypatch.setattr(checkpoints.Checkpoint, "read", lambda self, *a: reads.append(a))
    with pytest.raises(InputError, match=r"no weight '0\.bias'; weight '2\.weight' is float32\[3, 9\], the model's "
                                         r"float32\[3, 8\]; unknown weight 'extra'"):
        jm.load_weights(tmp_path / "bad.safetensors")
    assert reads == []
    state["2.weight"] = torch.zeros(3, 8, dtype=torch.float16)
    state["0.bias"] = torch.zeros(8)
    safetensors.torch.save_file(state, tmp_path / "half.safetensors")
    with pytest.raises(InputError, match=r"weight '2\.weight' is float16\[3, 8\], the model's float32\[3, 8\]"):
        jm.load_weights(tmp_path / "half.safetensors", strict=False)
    assert reads == []


def test_pickles_and_broken_checkpoints_are_refused_by_name(tmp_path):
    mlp, jm = _mlp_model()
    torch.save(mlp.state_dict(), tmp_path / "pytorch_model.bin")
    for path in (tmp_path / "pytorch_model.bin", tmp_path):
        with pytest.raises(ModelFileError, match=f"{path} is a pickled PyTorch checkpoint, and loading one runs"):
            jm.load_weights(path)
    (tmp_path / "junk.safetensors").write_bytes(b"\xff" * 64)
    with pytest.raises(ModelFileError, match="junk.safetensors is not a readable safetensors file"):
        jm.load_weights(tmp_path / "junk.safetensors")
    good = tmp_path / "good.safetensors"
    safetensors.torch.save_file(mlp.state_dict(), good)
    (tmp_path / "cut.safetensors").write_bytes(good.read_bytes()[:-20])
    with pytest.raises(ModelFileError, match="cut.safetensors is not a readable safetensors file"):
        jm.load_weights(tmp_path / "cut.safetensors")
    with pytest.raises(ModelFileError, match="no such file or directory"):
        jm.load_weights(tmp_path / "absent")

    directory = tmp_path / "indexed"
    directory.mkdir()
    safetensors.torch.save_file(mlp.state_dict(), directory / "part.safetensors")
    index = directory / checkpoints.INDEX
    for weight_map, message in [({"0.weight": "../good.safetensors"}, "which is not a file name in its directory"),
                                ({"0.weight": "missing.safetensors"}, "which is missing from"),
                                ({"0.weight": "part.safetensors", "9.weight": "part.safetensors"},
                                 "places '9.weight' in part.safetensors, which does not hold it"),
                                ("not a map", "has no weight_map")]:
        index.write_text(json.dumps({"weight_map": weight_map}))
        with pytest.raises(ModelFileError, match=message):
            jm.load_weights(directory)
    index.write_text("{")
    with pytest.raises(ModelFileError, match="is not a JSON index"):
        jm.load_weights(directory)
    with pytest.raises(InputError, match="or the path of a safetensors checkpoint"):
        jm.load_weights(42)


def test_a_meta_model_names_the_buffers_it_cannot_compute():
    """A module jaxport knows no recipe for (not Hugging Face's) keeps its computed buffer without
    values; a source without it names it."""

    class Scaled(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(4, 4)
            self.register_buffer("scale", torch.arange(4.0), persistent=False)

        def forward(self, x):
            return self.linear(x) * self.scale

    module = Scaled()
    state = module.state_dict()
    assert "scale" not in state
    jm = jaxport.from_torch(Scaled().to("meta"), (torch.zeros(2, 4),))
    assert set(jm.missing_weights) == {"linear.weight", "linear.bias", "scale"}
    with pytest.raises(InputError, match="no weight 'scale'"):
        jm.load_weights(state)
    jm.load_weights(module)  # the module itself holds it
    x = torch.randn(2, 4, generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        np.testing.assert_allclose(np.asarray(jm(x)), module(x).numpy(), rtol=1e-6, atol=1e-6)
    # converted from the module, the buffer has its value and stays when a checkpoint lacks it
    jm = jaxport.from_torch(module, (torch.zeros(2, 4),)).load_weights(state)
    np.testing.assert_array_equal(np.asarray(jm.params["scale"]), np.arange(4.0, dtype=np.float32))


def test_rotary_buffers_of_a_meta_model_are_transformers_own():
    """Rotary variants compute their `inv_freq` through transformers' own initialization. (Dynamic
    scaling is left out: its forward reads a position with `.item()`, which no meta model runs.)"""
    from transformers import LlamaForCausalLM

    llama3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
              "original_max_position_embeddings": 16}
    for scaling in (None, {"rope_type": "linear", "factor": 2.0}, llama3):
        config = _config(rope_scaling=scaling)
        real = LlamaForCausalLM(config).eval()
        lm = jaxport.from_causal_lm(_on_meta(config), max_length=16)
        for name in ("inv_freq", "original_inv_freq"):
            np.testing.assert_array_equal(np.asarray(lm.params[f"model.model.rotary_emb.{name}"]),
                                          getattr(real.model.rotary_emb, name).numpy())


def test_training_starts_from_a_checkpoint(tmp_path):
    mlp, jm = _mlp_model()
    torch.manual_seed(6)
    other = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    safetensors.torch.save_file(other.state_dict(), tmp_path / "start.safetensors")
    step = jaxport.train.train_step(jm, lambda out, batch: ((out - batch[1]) ** 2).mean(), optax.sgd(0.1))
    state = step.init(0, tmp_path / "start.safetensors")
    np.testing.assert_array_equal(np.asarray(state.params["0.weight"]), other[0].weight.detach().numpy())
    np.testing.assert_array_equal(np.asarray(jm.params["0.weight"]), mlp[0].weight.detach().numpy())  # untouched
    x = np.random.default_rng(7).standard_normal((2, 4)).astype(np.float32)
    state, metrics = step(state, (x, np.zeros((2, 3), np.float32)))
    assert np.isfinite(float(metrics["loss"]))


def test_loading_shows_progress_where_asked(tmp_path, monkeypatch, capsys):
    torch.manual_seed(8)
    deep = torch.nn.Sequential(*[torch.nn.Linear(4, 4) for _ in range(20)])  # 40 tensors
    safetensors.torch.save_file(deep.state_dict(), tmp_path / "deep.safetensors")
    jm = jaxport.from_torch(deep, (torch.zeros(1, 4),))
    monkeypatch.setenv("JAXPORT_PROGRESS", "1")
    jm.load_weights(tmp_path / "deep.safetensors")
    assert "loading weights" in capsys.readouterr().err
    monkeypatch.setenv("JAXPORT_PROGRESS", "0")
    jm.load_weights(tmp_path / "deep.safetensors")
    assert capsys.readouterr().err == ""


def test_a_checkpoint_is_read_one_tensor_at_a_time(tmp_path, monkeypatch):
    """Each read opens its file and closes it again: no tensor keeps the file mapped."""
    mlp, jm = _mlp_model()
    safetensors.torch.save_file(mlp.state_dict(), tmp_path / "w.safetensors")
    opened = []
    real = safetensors.safe_open

    class Counting:
        def __init__(self, *args, **kwargs):
            self.inner = real(*args, **kwargs)

        def __enter__(self):
            opened.append(1)
            return self.inner.__enter__()

        def __exit__(self, *exc):
            opened.pop()
            return self.inner.__exit__(*exc)

    monkeypatch.setattr(safetensors, "safe_open", Counting)
    checkpoint = checkpoints.Checkpoint(tmp_path / "w.safetensors")
    tensor = checkpoint.read("0.weight", (slice(2, 5), slice(None)))
    assert opened == [] and tuple(tensor.shape) == (3, 4)
    np.testing.assert_array_equal(tensor.numpy(), mlp[0].weight.detach().numpy()[2:5])


def test_sharded_loading_reads_each_devices_slice():
    """Over 8 CPU devices (a subprocess: the device count is fixed when JAX starts), a tensor-
    parallel checkpoint load reads each device's slice and nothing more, and generates one
    device's tokens; a training state starts from the same checkpoint on the mesh."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
           "JAX_PLATFORMS": "cpu"}
    proc = subprocess.run([sys.executable, "-m", "tests.distributed.sharded_checkpoint"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    run = json.loads(proc.stdout.strip().splitlines()[-1])
    assert run["devices"] == 8
    assert run["sharded"] == run["single"]
    assert run["q_proj"] == "P('model', None)" and run["q_proj_shard"] == [16, 64]
    assert run["largest_read"] <= run["largest_shard"] < run["largest_tensor"]
    assert run["state_q_proj"] == "P('model', None)" and run["trained"]
    assert jax.device_count() >= 1
