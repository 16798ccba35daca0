"""Lowerings of users' own ops (`jaxport.register_lowering`) and scoped replacements of any lowering
(`jaxport.lowerings`): one registration serves from_torch, from_onnx, the eager frontend, emit and
inspect; a model keeps the lowerings it was converted with."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper

import jaxport
from jaxport.cli.inspect import format_summary, summarize
from jaxport.ops import registry
from tests.support import user_ops

ROOT = Path(__file__).resolve().parents[1]


class _ScaleShiftGelu(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(8, 8)
        self.shift = torch.nn.Parameter(torch.linspace(-1, 1, 8))

    def forward(self, x):
        return torch.nn.functional.gelu(user_ops.scale_shift(self.linear(x), 0.5, self.shift))


def _model_and_input(seed: int):
    torch.manual_seed(seed)
    return _ScaleShiftGelu().eval(), torch.randn(4, 8, generator=torch.Generator().manual_seed(seed))


def test_a_custom_op_converts_runs_eagerly_and_keeps_its_gradient():
    model, x = _model_and_input(0)
    before = user_ops.CALLS["scale_shift"]
    converted = jaxport.from_torch(model, (x,))
    assert converted.program.ops()["jaxport_test.scale_shift.default"] == 1
    np.testing.assert_allclose(np.asarray(converted(x)), model(x).detach().numpy(), rtol=1e-6, atol=1e-6)
    assert user_ops.CALLS["scale_shift"] > before  # jaxport's lowering ran, not the torch kernel

    grads = jax.grad(lambda p: converted.apply(p, x).sum())(converted.params)
    model.zero_grad()
    model(x).sum().backward()
    np.testing.assert_allclose(np.asarray(grads["shift"]), model.shift.grad.numpy(), rtol=1e-5, atol=1e-6)

    before = user_ops.CALLS["scale_shift"]
    with jaxport.eager():
        eager = model.to("jax")(x.to("jax")).cpu()
    assert user_ops.CALLS["scale_shift"] > before
    np.testing.assert_allclose(eager.detach().numpy(), model.cpu()(x).detach().numpy(), rtol=1e-6, atol=1e-6)


def test_torch_compile_runs_the_registered_lowering_forward_and_backward():
    model, x = _model_and_input(6)
    compiled = torch.compile(model, backend="jaxport")
    before = user_ops.CALLS["scale_shift"]
    x_compiled, x_eager = x.clone().requires_grad_(), x.clone().requires_grad_()
    out = compiled(x_compiled)
    assert user_ops.CALLS["scale_shift"] > before
    torch.testing.assert_close(out, model(x_eager), rtol=1e-6, atol=1e-6)
    out.sum().backward()
    model(x_eager).sum().backward()
    torch.testing.assert_close(x_compiled.grad, x_eager.grad, rtol=1e-5, atol=1e-6)


def test_emit_copies_a_lowering_it_can_and_imports_one_it_cannot(tmp_path):
    class Both(torch.nn.Module):
        def forward(self, x, shift):
            return user_ops.softsign(user_ops.scale_shift(x, 2.0, shift))

    x, shift = torch.randn(3, 5), torch.randn(5)
    converted = jaxport.from_torch(Both(), (x, shift))
    jaxport.emit(converted, tmp_path / "out")
    source = (tmp_path / "out" / "model.py").read_text()
    assert "def scale_shift_lowering(" in source and "def _affine(" in source  # copied
    assert "from tests.support.user_ops import softsign_lowering" in source  # imported
    assert "softsign_lowering: imported" in source and "scale_shift_lowering: copied" in source
    np.save(tmp_path / "x.npy", x.numpy())
    np.save(tmp_path / "shift.npy", shift.numpy())
    script = ("import sys, numpy as np; sys.path.insert(0, sys.argv[1]); sys.path.insert(0, sys.argv[2]);"
              "import model; out = model.forward(model.load_params(), np.load(sys.argv[3]), np.load(sys.argv[4]));"
              "np.save(sys.argv[5], np.asarray(out))")
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path / "out"), str(ROOT), str(tmp_path / "x.npy"),
                           str(tmp_path / "shift.npy"), str(tmp_path / "y.npy")], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    expected = Both()(x, shift).numpy()
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), expected, rtol=1e-6, atol=1e-6)


def test_a_scope_replaces_a_builtin_lowering_and_the_model_keeps_it():
    model, x = _model_and_input(1)
    plain = jaxport.from_torch(model, (x,))
    with jaxport.lowerings({"aten::gelu": user_ops.gelu_sign_flipped}):
        replaced = jaxport.from_torch(model, (x,))
        assert "aten.gelu.default" in replaced.program.custom_lowerings()
    # after the scope: the model converted in it still runs the replacement, the other one does not
    linear = model.shift + 0.5 * model.linear(x)
    np.testing.assert_allclose(np.asarray(replaced(x)), user_ops.gelu_sign_flipped(linear.detach().numpy()),
                               rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(plain(x)), model(x).detach().numpy(), rtol=1e-6, atol=1e-6)
    where = replaced.program.custom_lowerings()
    assert "gelu_sign_flipped" in where["aten.gelu.default"] and "replacing" in where["aten.gelu.default"]
    assert "register_lowering" in where["jaxport_test.scale_shift.default"]
    assert "aten.gelu.default" not in plain.program.custom_lowerings()


def test_a_scope_applies_to_the_eager_frontend_while_it_runs():
    x = torch.randn(6, generator=torch.Generator().manual_seed(2))
    with jaxport.eager():
        t = x.to("jax")
        with jaxport.lowerings({"aten::gelu": user_ops.gelu_sign_flipped}):
            inside = torch.nn.functional.gelu(t).cpu()
        outside = torch.nn.functional.gelu(t).cpu()
    np.testing.assert_allclose(inside.numpy(), user_ops.gelu_sign_flipped(x.numpy()), rtol=1e-6)
    np.testing.assert_allclose(outside.numpy(), torch.nn.functional.gelu(x).numpy(), rtol=1e-6)


def _scale_shift_onnx() -> onnx.ModelProto:
    node = helper.make_node("ScaleShift", ["x", "shift"], ["y"], domain="com.example", scale=3.0, name="fused")
    relu = helper.make_node("Relu", ["y"], ["z"], name="relu")
    graph = helper.make_graph(
        [node, relu], "custom", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]),
                                 helper.make_tensor_value_info("shift", TensorProto.FLOAT, [3])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 3])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)])


def test_an_onnx_custom_domain_op_and_a_scoped_onnx_replacement(tmp_path):
    path = tmp_path / "custom.onnx"
    onnx.save(_scale_shift_onnx(), path)
    rng = np.random.default_rng(3)
    x, shift = rng.standard_normal((2, 3), np.float32), rng.standard_normal(3, np.float32)
    converted = jaxport.from_onnx(str(path))
    np.testing.assert_allclose(np.asarray(converted(x, shift)), np.maximum(x * 3 + shift, 0), rtol=1e-6)
    with jaxport.lowerings({("", "Relu"): user_ops.relu_times_two}):
        doubled = jaxport.from_onnx(str(path))
        info = summarize(str(path))
    np.testing.assert_allclose(np.asarray(doubled(x, shift)), 2 * np.maximum(x * 3 + shift, 0), rtol=1e-6)
    assert set(info["custom_lowerings"]) == {"Relu", "com.example::ScaleShift"} and not info["unsupported"]
    assert "relu_times_two" in format_summary(info)


def test_inspect_reports_users_lowerings_from_the_command_line(tmp_path):
    model, x = _model_and_input(4)
    path = tmp_path / "model.pt2"
    torch.export.save(torch.export.export(model, (x,)), path)
    lowerings = tmp_path / "my_lowerings.py"
    lowerings.write_text("from tests.support import user_ops  # noqa: F401  (registers its lowerings)\n")
    done = subprocess.run([sys.executable, "-m", "jaxport", "inspect", str(path), "--json", "--lowerings", str(lowerings)],
                          capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    info = json.loads(done.stdout)
    assert not info["unsupported"]
    assert "scale_shift_lowering" in info["custom_lowerings"]["jaxport_test.scale_shift.default"]
    missing = subprocess.run([sys.executable, "-m", "jaxport", "inspect", str(path), "--lowerings", "no_such_module_x"],
                             capture_output=True, text=True, cwd=ROOT)
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1 and "no_such_module_x" in missing.stderr


def test_refusals_name_the_op_and_the_registration():
    with pytest.raises(ValueError, match=r"aten.gelu has a lowering of jaxport's own .*jaxport.lowerings"):
        jaxport.register_lowering("aten::gelu", user_ops.gelu_sign_flipped)
    with pytest.raises(ValueError, match="names no op"):
        jaxport.register_lowering("not an op", user_ops.relu_times_two)
    with pytest.raises(TypeError, match="not a function"):
        with jaxport.lowerings({"aten::gelu": 3}):
            pass

    def broken(self, *, approximate="none"):
        raise RuntimeError("kernel exploded")

    model, x = _model_and_input(5)
    with jaxport.lowerings({"aten::gelu": broken}):
        converted = jaxport.from_torch(model, (x,))
    with pytest.raises(jaxport.LoweringError, match=r"aten.gelu.default failed .*broken from jaxport.lowerings\('aten::gelu'\).*kernel exploded"):
        converted(x)


def test_an_op_without_a_lowering_is_named():
    @torch.library.custom_op("jaxport_test::unlowered", mutates_args=())
    def unlowered(x: torch.Tensor) -> torch.Tensor:
        return x.clone()

    unlowered.register_fake(lambda x: torch.empty_like(x))

    class Uses(torch.nn.Module):
        def forward(self, x):
            return unlowered(x) + 1

    with pytest.raises(jaxport.UnsupportedOpsError, match="jaxport_test.unlowered.default"):
        jaxport.from_torch(Uses(), (torch.randn(2),))
    assert registry.lookup("jaxport_test.unlowered.default") is None
