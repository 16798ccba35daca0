"""`from_onnx` as users meet it: inputs, outputs, params, opsets, errors, and the CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import jax
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import jaxport
from jaxport.cli import main as cli

LIGHT = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light", "light_squeezenet.onnx")


def _mlp(opset: int = 17, batch="batch") -> onnx.ModelProto:
    """x[batch, 4] -> Gemm -> Relu -> Reshape to [batch, 2, 3] via Shape arithmetic."""
    rng = np.random.default_rng(0)
    w = onnx.numpy_helper.from_array(rng.standard_normal((6, 4)).astype(np.float32), "w")
    b = onnx.numpy_helper.from_array(rng.standard_normal(6).astype(np.float32), "b")
    tail = onnx.numpy_helper.from_array(np.array([2, 3], np.int64), "tail")
    nodes = [
        helper.make_node("Gemm", ["x", "w", "b"], ["h"], transB=1, name="fc"),
        helper.make_node("Relu", ["h"], ["r"], name="act"),
        helper.make_node("Shape", ["x"], ["shape"], name="shape", end=1),
        helper.make_node("Concat", ["shape", "tail"], ["new_shape"], axis=0, name="concat"),
        helper.make_node("Reshape", ["r", "new_shape"], ["y"], name="reshape"),
    ]
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, (batch, 4))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, (batch, 2, 3))], [w, b, tail])
    # IR version 10: what the installed onnxruntime reads (onnx writes a newer one by default).
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)


def _reference(x: np.ndarray, model: onnx.ModelProto | str) -> np.ndarray:
    import onnxruntime

    source = model if isinstance(model, str) else model.SerializeToString()
    session = onnxruntime.InferenceSession(source, providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]


@pytest.mark.compat
def test_params_jit_and_symbolic_batch():
    proto = _mlp()
    model = jaxport.from_onnx(proto)
    assert set(model.params) == {"w", "b"}  # the int64 shape initializer is a constant
    assert model.jittable and model.output_names == ("y",)
    for batch in (1, 5):
        x = np.random.default_rng(batch).standard_normal((batch, 4)).astype(np.float32)
        np.testing.assert_allclose(np.asarray(model(x)), _reference(x, proto), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(np.asarray(jax.jit(model.apply)(model.params, x=x)), _reference(x, proto),
                                   rtol=1e-5, atol=1e-6)


def test_grad_with_respect_to_initializers():
    model = jaxport.from_onnx(_mlp())
    x = np.ones((2, 4), np.float32)
    grads = jax.grad(lambda p: model.apply(p, x).sum())(model.params)
    assert grads["w"].shape == (6, 4) and float(np.abs(np.asarray(grads["w"])).sum()) > 0


def test_wrong_inputs_name_the_input():
    model = jaxport.from_onnx(_mlp(batch=3))
    with pytest.raises(jaxport.InputError, match="input 'x' has shape \\(2, 5\\)"):
        model(np.zeros((2, 5), np.float32))
    with pytest.raises(jaxport.InputError, match="input 'x' has dtype int32"):
        model(np.zeros((3, 4), np.int32))
    with pytest.raises(jaxport.InputError, match="takes 1 input"):
        model(np.zeros((3, 4), np.float32), np.zeros(1))
    with pytest.raises(jaxport.InputError, match="missing input"):
        model()


def test_unknown_ops_and_domains_are_listed_together():
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="ok"),
             helper.make_node("FancyOp", ["a"], ["b"], name="first_unknown"),
             helper.make_node("Mystery", ["b"], ["y"], domain="com.example", name="second_unknown")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, (2,))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, (2,))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)])
    with pytest.raises(jaxport.UnsupportedOpsError) as info:
        jaxport.from_onnx(model)
    message = str(info.value)
    assert "onnx.FancyOp" in message and "first_unknown" in message
    assert "com.example.Mystery" in message and "second_unknown" in message


def test_string_tensors_are_refused_naming_the_value():
    graph = helper.make_graph([helper.make_node("Identity", ["s"], ["t"], name="copy")], "g",
                              [helper.make_tensor_value_info("s", TensorProto.STRING, (2,))],
                              [helper.make_tensor_value_info("t", TensorProto.STRING, (2,))])
    with pytest.raises(jaxport.UnsupportedDtypeError, match="graph input 's' holds string tensors"):
        jaxport.from_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))


def test_corrupt_and_missing_files(tmp_path):
    truncated = tmp_path / "truncated.onnx"
    truncated.write_bytes(open(LIGHT, "rb").read()[:2000])
    with pytest.raises(jaxport.ModelFileError, match="truncated or corrupt"):
        jaxport.from_onnx(str(truncated))
    garbage = tmp_path / "garbage.onnx"
    garbage.write_bytes(b"\x00\x01 not a protobuf at all \xff" * 10)
    with pytest.raises(jaxport.ModelFileError):
        jaxport.from_onnx(str(garbage))
    with pytest.raises(jaxport.ModelFileError, match="no such file"):
        jaxport.from_onnx(str(tmp_path / "absent.onnx"))


@pytest.mark.compat
def test_external_data_weights(tmp_path):
    proto = _mlp()
    path = str(tmp_path / "external.onnx")
    onnx.save_model(proto, path, save_as_external_data=True, all_tensors_to_one_file=True,
                    location="weights.bin", size_threshold=0)
    assert os.path.exists(tmp_path / "weights.bin")
    model = jaxport.from_onnx(path)
    x = np.ones((2, 4), np.float32)
    np.testing.assert_allclose(np.asarray(model(x)), _reference(x, path), rtol=1e-5, atol=1e-6)


def test_legacy_opset_broadcast_attribute():
    """Opset 6's Add aligns B to A from `axis` (not NumPy's trailing rule)."""
    nodes = [helper.make_node("Add", ["a", "b"], ["y"], broadcast=1, axis=1)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("a", TensorProto.FLOAT, (2, 3, 4)),
                                           helper.make_tensor_value_info("b", TensorProto.FLOAT, (3,))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, (2, 3, 4))])
    model = jaxport.from_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 6)]))
    a, b = np.zeros((2, 3, 4), np.float32), np.arange(3, dtype=np.float32)
    np.testing.assert_array_equal(np.asarray(model(a, b)), a + b[:, None])


@pytest.mark.compat
def test_cli_inspect_and_verify(tmp_path, capsys):
    path = str(tmp_path / "mlp.onnx")
    onnx.save(_mlp(), path)
    assert cli(["inspect", path, "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["inputs"] == [{"name": "x", "shape": ["batch", 4], "dtype": "float"}]
    assert info["parameters"]["values"] == 6 * 4 + 6 + 2 and info["ops"]["Gemm"] == 1
    assert info["unsupported"] == {}
    assert cli(["inspect", LIGHT]) == 0
    assert "supports every op" in capsys.readouterr().out
    assert cli(["verify", path, "--dim", "batch=3"]) == 0
    out = capsys.readouterr().out
    assert "PASS" in out and "onnxruntime" in out
    np.savez(tmp_path / "inputs.npz", x=np.full((2, 4), 0.5, np.float32))
    assert cli(["verify", path, "--inputs", str(tmp_path / "inputs.npz"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["passed"] is True


def test_cli_errors_are_one_line_with_exit_code_2(tmp_path):
    broken = tmp_path / "broken.onnx"
    broken.write_bytes(open(LIGHT, "rb").read()[:3000])
    result = subprocess.run([sys.executable, "-m", "jaxport", "verify", str(broken)], capture_output=True, text=True)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1
    result = subprocess.run([sys.executable, "-m", "jaxport", "inspect", str(tmp_path / "nope.onnx")],
                            capture_output=True, text=True)
    assert result.returncode == 2 and "no such file" in result.stderr


def test_cli_on_a_saved_exported_program(tmp_path, capsys):
    import torch

    module = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.ReLU(),
                                 torch.nn.Flatten(), torch.nn.Linear(144, 5)).eval()
    path = str(tmp_path / "cnn.pt2")
    torch.export.save(torch.export.export(module, (torch.randn(2, 3, 8, 8),)), path)
    assert cli(["inspect", path, "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["inputs"][0]["shape"] == [2, 3, 8, 8] and info["unsupported"] == {}
    assert info["parameters"]["values"] == sum(t.numel() for t in module.state_dict().values())
    assert cli(["verify", path]) == 0
    assert "PyTorch" in capsys.readouterr().out
    broken = tmp_path / "broken.pt2"
    broken.write_bytes(b"PK\x03\x04 truncated")
    assert cli(["inspect", str(broken)]) == 2
