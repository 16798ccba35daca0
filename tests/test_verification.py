"""`jaxport.verify`: a model against its reference, and with `localize=True` the first node whose
lowering diverges, found by running each jaxport node on the reference's inputs.

Wrong lowerings are put in with `jaxport.lowerings` scopes, so nothing outside a test changes.
"""

from __future__ import annotations

import json
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

import jaxport
from jaxport import cli, verification
from jaxport.errors import InputError, ModelFileError
from jaxport.verification import onnx_reference

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper  # noqa: E402

# -- models -------------------------------------------------------------------------------------


class Block(torch.nn.Module):
    """Five nodes: linear, layer_norm, gelu, mul, add (a residual)."""

    def __init__(self, width: int):
        super().__init__()
        self.fc = torch.nn.Linear(width, width)
        self.norm = torch.nn.LayerNorm(width)
        self.act = torch.nn.GELU()

    def forward(self, x):
        return x + self.act(self.norm(self.fc(x))) * 0.5


BLOCKS = 200  # 1,000 nodes


@pytest.fixture(scope="module")
def deep():
    """(exported program, input) of a 1,000-node model, exported once for the module's tests."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[Block(16) for _ in range(BLOCKS)]).eval()
    x = torch.randn(4, 16, generator=torch.Generator().manual_seed(1))
    return torch.export.export(model, (x,)), x


def gelu_sign_flipped(self, approximate="none"):
    return -jax.nn.gelu(self, approximate=approximate == "tanh")


def gelu_tanh_always(self, approximate="none"):
    return jax.nn.gelu(self, approximate=True)


def onnx_chain(path, layers: int = 8, width: int = 6):
    """x -> (MatMul, Add, Tanh) x layers -> y, nodes named layer{i}/matmul, /add, /tanh."""
    rng = np.random.default_rng(2)
    nodes, weights, value = [], [], "x"
    for i in range(layers):
        w = helper.make_tensor(f"w{i}", TensorProto.FLOAT, [width, width],
                               rng.standard_normal((width, width)).astype(np.float32).ravel())
        b = helper.make_tensor(f"b{i}", TensorProto.FLOAT, [width], rng.standard_normal(width).astype(np.float32))
        weights += [w, b]
        out = "y" if i == layers - 1 else f"h{i}"
        nodes += [helper.make_node("MatMul", [value, f"w{i}"], [f"m{i}"], name=f"layer{i}/matmul"),
                  helper.make_node("Add", [f"m{i}", f"b{i}"], [f"a{i}"], name=f"layer{i}/add"),
                  helper.make_node("Tanh", [f"a{i}"], [out], name=f"layer{i}/tanh")]
        value = out
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", width])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", width])], weights)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    return path


@pytest.fixture(scope="module")
def chain_onnx(tmp_path_factory):
    return onnx_chain(tmp_path_factory.mktemp("onnx") / "chain.onnx")


class Small(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(3, 4)
        self.act = torch.nn.GELU()

    def forward(self, x):
        return self.act(self.fc(x)).sum(-1)


@pytest.fixture(scope="module")
def small_pt2(tmp_path_factory):
    torch.manual_seed(3)
    ep = torch.export.export(Small().eval(), (torch.randn(5, 3),))
    path = tmp_path_factory.mktemp("pt2") / "small.pt2"
    torch.export.save(ep, path)
    return path


def run_cli(capfd, *args) -> tuple[int, str, str]:
    capfd.readouterr()
    rc = cli.main([str(a) for a in args])
    out, err = capfd.readouterr()
    return rc, out, err


# -- a model that matches -----------------------------------------------------------------------


def test_a_correct_1000_node_model_passes_node_by_node(deep, record_property):
    ep, x = deep
    report = jaxport.verify(ep, (x,), localize=True)
    record_property("localize_seconds", round(report.seconds, 2))
    assert report.passed, str(report)
    assert report.first_divergence is None and report.diverging == 0
    assert report.nodes == report.compared == 5 * BLOCKS
    assert report.without_reference == report.random == 0
    assert [o.passed for o in report.outputs] == [True]
    # Values are dropped after their last reader: a chain holds a handful, never all 1,000.
    assert report.peak_intermediates <= 5
    assert "no node diverges" in str(report) and str(report).endswith("PASS")


def test_a_module_is_exported_and_verified():
    torch.manual_seed(4)
    report = jaxport.verify(Small().eval(), (torch.randn(2, 3),), localize=True)
    assert report.passed and report.model == "Small" and report.reference.startswith("PyTorch")
    assert report.compared == report.nodes > 0
    plain = jaxport.verify(Small().eval(), (torch.randn(2, 3),))
    assert plain.passed and not plain.localized and plain.nodes == 0


# -- a wrong lowering ---------------------------------------------------------------------------


def test_a_wrong_lowering_is_the_first_divergence_with_its_module_path(deep, record_property):
    ep, x = deep
    with jaxport.lowerings({"aten::gelu": gelu_sign_flipped}):
        report = jaxport.verify(ep, (x,), localize=True)
    record_property("localize_seconds", round(report.seconds, 2))
    first = report.first_divergence
    assert not report.passed
    assert (first.node, first.op, first.module_path, first.index) == ("gelu", "aten.gelu.default", "0.act", 2)
    assert "test_verification.py" in first.source and "self.act(self.norm(self.fc(x)))" in first.source
    assert "lowerings" in first.lowering and "gelu_sign_flipped" in first.lowering
    # Each node runs on the reference's inputs, so only the wrong op diverges, in every block,
    # and nothing downstream of it is blamed.
    assert report.diverging == BLOCKS
    assert {d.op for d in report.divergences} == {"aten.gelu.default"}
    assert [d.module_path for d in report.divergences[:3]] == ["0.act", "1.act", "2.act"]
    assert first.max_abs > 0.1 and first.problem == "values differ beyond tolerance"
    assert [name for name, _ in first.inputs] == ["layer_norm"]
    assert first.inputs[0][1].shape == (4, 16) and first.inputs[0][1].dtype == "float32"
    assert first.jaxport.mean == pytest.approx(-first.reference.mean, rel=1e-3)
    assert not report.outputs[0].passed  # the propagated run differs end to end too


def test_a_slightly_wrong_lowering_is_found_where_it_is(deep):
    """The tanh approximation of GELU is off by at most about 2e-4: small enough that a model of
    correct lowerings would blame whatever node rounding pushed over a tolerance; node by node,
    the first node found is the first GELU, and no other op."""
    ep, x = deep
    with jaxport.lowerings({"aten::gelu": gelu_tanh_always}):
        report = jaxport.verify(ep, (x,), localize=True)
    assert report.first_divergence.node == "gelu" and report.first_divergence.module_path == "0.act"
    assert {d.op for d in report.divergences} == {"aten.gelu.default"}
    assert report.first_divergence.max_abs < 1e-3


def test_a_lowering_that_fails_on_the_reference_inputs_is_a_divergence():
    def broken(self, approximate="none"):
        raise ValueError("no GELU today")

    torch.manual_seed(5)
    with jaxport.lowerings({"aten::gelu": broken}):
        report = jaxport.verify(Small().eval(), (torch.randn(2, 3),), localize=True)
    first = report.first_divergence
    assert first.op == "aten.gelu.default" and first.module_path == "act"
    assert "the lowering fails on the reference's inputs" in first.problem and "no GELU today" in first.problem
    assert "no GELU today" in report.propagation_error and report.outputs == [] and not report.passed


# -- NaN and tolerances -------------------------------------------------------------------------


class Logs(torch.nn.Module):
    def forward(self, x):
        return torch.log(x).relu() * 2 + 1


def test_nan_on_both_sides_is_no_divergence():
    x = torch.tensor([[-1.0, 2.0, float("nan")], [0.5, -3.0, 4.0]])
    report = jaxport.verify(Logs(), (x,), localize=True)
    assert report.passed and report.diverging == 0, str(report)
    assert math.isnan(float(np.asarray(jaxport.from_torch(Logs(), (x,))(x))[0, 0]))


def test_nan_where_the_reference_has_a_number_is_a_divergence():
    def log_nan_for_small(x):
        return jnp.where(x < 1, jnp.nan, jnp.log(x))

    x = torch.tensor([[0.5, 2.0, 3.0]])
    with jaxport.lowerings({"aten::log": log_nan_for_small}):
        report = jaxport.verify(Logs(), (x,), localize=True)
    first = report.first_divergence
    assert first.op == "aten.log.default" and "NaN at 1 place(s)" in first.problem
    assert first.jaxport.nan == 1 and first.reference.nan == 0


def test_tolerances_are_per_dtype():
    assert verification.tolerance(np.float32) == (1e-4, 1e-5)
    assert verification.tolerance(np.float16)[0] > verification.tolerance(np.float32)[0]
    assert verification.tolerance(jnp.bfloat16)[0] >= verification.tolerance(np.float16)[0]
    assert verification.tolerance(np.int64) == verification.tolerance(np.bool_) == (0.0, 0.0)
    assert verification.tolerance(np.int32, rtol=0.5, atol=0.5) == (0.0, 0.0)  # integers stay exact
    assert verification.tolerance(np.float32, rtol=0.5) == (0.5, 1e-5)
    assert verification.tolerance(np.complex64) == verification.tolerance(np.float32)


def test_bfloat16_rounding_is_no_divergence_but_a_wrong_op_is():
    torch.manual_seed(6)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.GELU(), torch.nn.Linear(8, 8)).to(torch.bfloat16)
    x = torch.randn(3, 8, dtype=torch.bfloat16)
    assert jaxport.verify(model, (x,), localize=True).diverging == 0
    with jaxport.lowerings({"aten::gelu": gelu_sign_flipped}):
        report = jaxport.verify(model, (x,), localize=True)
    assert report.first_divergence.module_path == "1" and report.diverging == 1


# -- nodes jaxport adds --------------------------------------------------------------------------


class WritesThroughAView(torch.nn.Module):
    def forward(self, x):
        y = x * 2
        y[:, 0] = 0.0  # an in-place write through a view: a scatter jaxport adds
        return torch.tanh(y)


def test_nodes_without_a_reference_value_are_computed_and_counted():
    x = torch.randn(3, 4, generator=torch.Generator().manual_seed(7))
    report = jaxport.verify(WritesThroughAView(), (x,), localize=True)
    assert report.passed, str(report)
    assert report.without_reference >= 1 and report.compared + report.without_reference == report.nodes
    with jaxport.lowerings({"aten::tanh": lambda self: -jnp.tanh(self)}):
        wrong = jaxport.verify(WritesThroughAView(), (x,), localize=True)
    assert wrong.first_divergence.op == "aten.tanh.default"
    assert wrong.first_divergence.unreferenced_inputs == ("fill__into_mul",)  # a write-back: no reference value


def test_a_divergence_names_inputs_that_had_no_reference_value():
    """A wrong write-back (a node jaxport adds) cannot be compared; the node reading it diverges,
    and the report says which of its inputs jaxport computed alone."""
    x = torch.randn(3, 4, generator=torch.Generator().manual_seed(7))
    with jaxport.lowerings({"aten::select_scatter": lambda self, src, dim, index: self * 0 + 1}):
        report = jaxport.verify(WritesThroughAView(), (x,), localize=True)
    first = report.first_divergence
    assert first.op == "aten.tanh.default" and first.unreferenced_inputs == ("fill__into_mul",)
    assert "inputs computed by jaxport without a reference value" in str(report)


def test_a_lowering_that_raises_without_a_reference_value_is_a_divergence():
    """A node jaxport adds has no reference value: a lowering raising there is reported as the
    first divergence (the walk cannot go past it), not raised out of verify."""

    def broken(self, src, dim, index):
        raise RuntimeError("broken write-back")

    x = torch.randn(3, 4, generator=torch.Generator().manual_seed(7))
    with jaxport.lowerings({"aten::select_scatter": broken}):
        report = jaxport.verify(WritesThroughAView(), (x,), localize=True)
    first = report.first_divergence
    assert not report.passed and report.diverging == 1
    assert first.op == "aten.select_scatter.default" and first.value == "fill__into_mul"
    assert "broken write-back" in first.problem and "the walk ends here" in first.problem
    assert "broken write-back" in report.propagation_error
    assert "select_scatter" in str(report)


def test_a_lowering_that_raises_on_a_compared_node_is_a_divergence():
    def broken(self):
        raise RuntimeError("broken tanh")

    x = torch.randn(3, 4, generator=torch.Generator().manual_seed(7))
    with jaxport.lowerings({"aten::tanh": broken}):
        report = jaxport.verify(WritesThroughAView(), (x,), localize=True)
    assert report.first_divergence.op == "aten.tanh.default" and "broken tanh" in report.first_divergence.problem


# -- ONNX ---------------------------------------------------------------------------------------


def tanh_off_by_a_bit(x):
    return jnp.tanh(x) + 0.01


@pytest.mark.compat
def test_onnx_wrong_lowering_is_localized_by_onnxruntime_intermediates(chain_onnx):
    x = np.random.default_rng(8).standard_normal((3, 6)).astype(np.float32)
    assert jaxport.verify(chain_onnx, (x,), localize=True).passed
    with jaxport.lowerings({("", "Tanh"): tanh_off_by_a_bit}):
        report = jaxport.verify(chain_onnx, kwargs={"x": x}, localize=True)
    first = report.first_divergence
    assert report.reference.startswith("onnxruntime")
    assert (first.module_path, first.op, first.value) == ("layer0/tanh", "onnx.Tanh-1", "h0")
    assert "Tanh" in first.source and report.diverging == 8 and report.compared == 24
    assert first.max_abs == pytest.approx(0.01, rel=1e-3)


def test_onnx_intermediates_fetched_in_chunks_give_the_same_report(chain_onnx, monkeypatch):
    x = np.random.default_rng(9).standard_normal((3, 6)).astype(np.float32)
    with jaxport.lowerings({("", "Tanh"): tanh_off_by_a_bit}):
        whole = jaxport.verify(chain_onnx, (x,), localize=True)
        runs = []
        monkeypatch.setattr(onnx_reference, "ONNX_CHUNK_BYTES", 3 * 6 * 4 * 2)  # two values a run
        original = onnx_reference._RunChecked.run
        monkeypatch.setattr(onnx_reference._RunChecked, "run",
                            lambda self, names, feeds, o=None: runs.append(list(names)) or original(self, names, feeds, o))
        chunked = jaxport.verify(chain_onnx, (x,), localize=True)
    assert max(len(r) for r in runs) == 2 and len(runs) >= 12
    assert [d.node for d in chunked.divergences] == [d.node for d in whole.divergences]
    assert chunked.first_divergence.max_abs == whole.first_divergence.max_abs


# -- reports ------------------------------------------------------------------------------------


def test_the_report_as_json(deep):
    ep, x = deep
    with jaxport.lowerings({"aten::gelu": gelu_sign_flipped}):
        report = jaxport.verify(ep, (x,), localize=True)
    data = json.loads(report.to_json())
    assert data["passed"] is False and data["localized"] is True and data["diverging"] == BLOCKS
    first = data["first_divergence"]
    assert first["node"] == "gelu" and first["module_path"] == "0.act" and first["op"] == "aten.gelu.default"
    assert first["inputs"][0][0] == "layer_norm" and first["reference"]["shape"] == [4, 16]
    assert len(data["divergences"]) == verification.DESCRIBED_DIVERGENCES
    assert data["outputs"][0]["passed"] is False


def test_cli_localize_text_and_json(small_pt2, capfd):
    rc, out, err = run_cli(capfd, "verify", small_pt2, "--localize")
    assert rc == 0 and "no node diverges" in out and out.strip().endswith("PASS"), out + err
    with jaxport.lowerings({"aten::gelu": gelu_sign_flipped}):
        rc, out, err = run_cli(capfd, "verify", small_pt2, "--localize")
        assert rc == 1 and err == "", err
        assert "first diverging node (1 diverge in all):" in out
        assert "node gelu (aten.gelu.default) in module 'act'" in out and out.strip().endswith("FAIL")
        rc, out, err = run_cli(capfd, "verify", small_pt2, "--localize", "--json")
    assert rc == 1
    data = json.loads(out)
    assert data["first_divergence"]["op"] == "aten.gelu.default" and data["first_divergence"]["module_path"] == "act"


def test_cli_localize_names_a_wrong_lowering_given_on_the_command_line(small_pt2, tmp_path, capfd):
    lowerings = tmp_path / "wrong_gelu.py"
    lowerings.write_text("import jax\n\n\ndef gelu(self, approximate='none'):\n    return -jax.nn.gelu(self)\n\n\n"
                         "LOWERINGS = {'aten::gelu': gelu}\n")
    rc, out, err = run_cli(capfd, "verify", small_pt2, "--localize", "--json", "--lowerings", lowerings)
    assert rc == 1, err
    divergence = json.loads(out)["first_divergence"]
    assert divergence["op"] == "aten.gelu.default" and divergence["module_path"] == "act"
    rc, out, err = run_cli(capfd, "verify", small_pt2, "--localize")  # the scope ended with the command
    assert rc == 0, out + err


def test_cli_localize_onnx_with_inputs(chain_onnx, tmp_path, capfd):
    np.savez(tmp_path / "x.npz", x=np.ones((2, 6), np.float32))
    with jaxport.lowerings({("", "Tanh"): tanh_off_by_a_bit}):
        rc, out, err = run_cli(capfd, "verify", chain_onnx, "--localize", "--inputs", tmp_path / "x.npz")
    assert rc == 1 and "in module 'layer0/tanh'" in out and "[2, 6]" in out, out + err


# -- bad inputs ---------------------------------------------------------------------------------


BAD = {
    "misspelled-input": (lambda f: jaxport.verify(f, kwargs={"X": np.ones((2, 6), np.float32)}, localize=True),
                         InputError, "the inputs holds 'X' (did you mean 'x'?)"),
    "wrong-shape": (lambda f: jaxport.verify(f, (np.ones((2, 5), np.float32),), localize=True),
                    InputError, "input 'x' has shape [2, 5]"),
    "not-a-model": (lambda f: jaxport.verify(42), InputError, "not int"),
    "missing-file": (lambda f: jaxport.verify(str(f) + ".missing.onnx"), ModelFileError, "no such file"),
    "negative-rtol": (lambda f: jaxport.verify(f, localize=True, rtol=-1.0), InputError, "--rtol -1.0"),
}


@pytest.mark.parametrize("case", BAD)
def test_bad_inputs_are_one_line(chain_onnx, case):
    call, error, fragment = BAD[case]
    with pytest.raises(error) as caught:
        call(chain_onnx)
    assert fragment in str(caught.value) and "\n" not in str(caught.value)


def test_cli_bad_input_is_one_line(chain_onnx, tmp_path, capfd):
    np.savez(tmp_path / "x.npz", y=np.ones((2, 6), np.float32))
    rc, out, err = run_cli(capfd, "verify", chain_onnx, "--localize", "--inputs", tmp_path / "x.npz")
    assert rc == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert "holds 'y'" in err and str(tmp_path / "x.npz") in err and "Traceback" not in err
