"""verify's findings on the graph: each node's error as Model Explorer's node data, keyed by the
node of the exported program it came from (through PyTorch's decompositions and jaxport's
inlined regions), and `jaxport verify --node-data / --explore`.

Wrong lowerings are planted with `jaxport.lowerings` scopes (or a `--lowerings` file), so nothing
outside a test changes. The browser test is tests/test_model_explorer.py.
"""

from __future__ import annotations

import json
import os
import sys
import types

import jax.numpy as jnp
import pytest
import torch

import jaxport
from jaxport import cli
from jaxport.errors import InputError
from jaxport.verification import node_data

RED, DARK_GREEN = node_data.BANDS[-1][1], node_data.BANDS[0][1]
GREENS = {node_data.BANDS[0][1], node_data.BANDS[1][1]}


class MinMax(torch.nn.Module):
    """linear -> a no_grad region (gelu) -> aminmax -> (max - min) scales the linear -> tanh ->
    linear. jaxport has no aminmax: PyTorch's decomposition makes it amin and amax."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(6, 6)
        self.out = torch.nn.Linear(6, 3)

    def forward(self, x):
        h = self.fc(x)
        with torch.no_grad():
            g = torch.nn.functional.gelu(h)
        lo, hi = torch.aminmax(g, dim=-1)
        return self.out(torch.tanh(h * (hi - lo)[:, None]))


class Region(torch.nn.Module):
    """A no_grad region and nothing to decompose: its body is inlined by jaxport's translator."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)

    def forward(self, x):
        with torch.no_grad():
            y = torch.tanh(self.fc(x)) * 2
        return y + 1


def amax_wrong(self, dim=(), keepdim=False):
    """The planted lowering: amax half as large again."""
    return jnp.max(self, axis=tuple(dim) if dim else None, keepdims=keepdim) * 1.5


WRONG_AMAX = """import jax.numpy as jnp


def amax(self, dim=(), keepdim=False):
    return jnp.max(self, axis=tuple(dim) if dim else None, keepdims=keepdim) * 1.5


LOWERINGS = {"aten::amax": amax}
"""

#: downstream of aminmax, in the exported graph
DOWNSTREAM = ("sub", "unsqueeze", "mul", "tanh", "linear_1")


@pytest.fixture(scope="module")
def minmax():
    torch.manual_seed(11)
    ep = torch.export.export(MinMax().eval(), (torch.randn(5, 6),))
    return ep, torch.randn(5, 6, generator=torch.Generator().manual_seed(12))


@pytest.fixture(scope="module")
def planted(minmax):
    ep, x = minmax
    with jaxport.lowerings({"aten::amax": amax_wrong}):
        return jaxport.verify(ep, (x,), localize=True)


@pytest.fixture(scope="module")
def minmax_pt2(tmp_path_factory, minmax):
    path = tmp_path_factory.mktemp("pt2") / "minmax.pt2"
    torch.export.save(minmax[0], path)
    return path


def graph_names(ep) -> set[str]:
    return {n.name for n in ep.graph.nodes}


def tanh_onnx(path):
    """x -> Tanh -> y: an ONNX model, whose nodes no exported program's graph names."""
    onnx = pytest.importorskip("onnx")
    pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("Tanh", ["x"], ["y"], name="tanh")], "tanh",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    return path


# -- the node data ------------------------------------------------------------------------------


def test_the_planted_wrong_lowering_is_the_node_of_largest_error(minmax, planted):
    ep, _ = minmax
    assert planted.first_divergence.node == "amax" and not planted.passed
    results = planted.node_data()["graph"]["results"]
    # keyed by the exported program's FX node names, as Model Explorer's PyTorch adapter keys them
    assert set(results) <= graph_names(ep)
    assert max(results, key=lambda name: results[name]["value"]) == "aminmax"
    # amax * 1.5 against PyTorch's amax: off by half of its largest magnitude
    assert results["aminmax"] == {"value": pytest.approx(0.5, rel=1e-3), "bgColor": RED}
    # on the reference's inputs nothing else differs beyond rounding
    others = {name: r for name, r in results.items() if name != "aminmax"}
    assert set(others) == {"linear", "gelu", *DOWNSTREAM}
    assert all(r["value"] < 1e-6 and r["bgColor"] in GREENS for r in others.values()), others


def test_propagated_errors_show_how_the_divergence_spreads(planted):
    results = planted.node_data(propagated=True)["graph"]["results"]
    # upstream of the planted node, jaxport's own values agree; from it on, they carry its error
    assert results["linear"]["bgColor"] in GREENS and results["gelu"]["bgColor"] in GREENS
    for name in ("aminmax", *DOWNSTREAM):
        assert results[name]["bgColor"] == RED and results[name]["value"] > 0.05, (name, results[name])


def test_decomposed_nodes_map_to_the_node_they_came_from(planted):
    graph_node = {e.node: e.graph_node for e in planted.node_errors}
    # PyTorch's decomposition of aminmax (which jaxport lacks) made two nodes of one
    assert graph_node["amin"] == graph_node["amax"] == "aminmax"
    # the no_grad region (a higher-order op) was inlined by the decomposition: its gelu maps back to it
    assert graph_node["gelu"] == "gelu"
    assert {e.node: e.local.passed for e in planted.node_errors}["amin"] is True


def test_an_inlined_region_maps_to_its_higher_order_node():
    torch.manual_seed(13)
    ep = torch.export.export(Region().eval(), (torch.randn(3, 4),))
    region = next(n for n in ep.graph.nodes if isinstance(n.target, torch._ops.HigherOrderOperator))
    with jaxport.lowerings({"aten::tanh": lambda self: jnp.tanh(self) + 1e-2}):
        report = jaxport.verify(ep, (torch.randn(3, 4, generator=torch.Generator().manual_seed(14)),), localize=True)
    inside = [e for e in report.node_errors if e.node.startswith(f"{region.name}_")]
    assert {e.op for e in inside} >= {"aten.linear.default", "aten.tanh.default", "aten.mul.Tensor"}
    assert {e.graph_node for e in inside} == {region.name}
    results = report.node_data()["graph"]["results"]
    assert max(results, key=lambda name: results[name]["value"]) == region.name
    assert results[region.name]["bgColor"] != DARK_GREEN


def test_a_correct_model_is_green_throughout(minmax):
    ep, x = minmax
    report = jaxport.verify(ep, (x,), localize=True)
    assert report.passed
    for propagated in (False, True):
        results = report.node_data(propagated=propagated)["graph"]["results"]
        assert results and all(r["bgColor"] in GREENS for r in results.values()), results


def test_node_data_is_model_explorers_schema_for_its_graph(planted, minmax_pt2):
    """The file parses as model_explorer's own node data classes and writes back the same; its
    keys are node ids of the graph its PyTorch adapter makes of the same .pt2."""
    pytest.importorskip("model_explorer", reason="Model Explorer is not installed (jaxport[explore])")
    from model_explorer import node_data_builder as builder
    from model_explorer.pytorch_exported_program_adapter_impl import (
        PytorchExportedProgramAdapterImpl,
    )

    ours = planted.node_data()
    model = builder.ModelNodeData(graphsData={
        graph: builder.GraphNodeData(results={k: builder.NodeDataResult(**v) for k, v in data["results"].items()})
        for graph, data in ours.items()})
    theirs = json.loads(model.to_json_string())
    assert theirs.keys() == ours.keys() and theirs["graph"]["results"] == ours["graph"]["results"]
    # what the file leaves out is what Model Explorer's classes default to
    assert not any(value for key, value in theirs["graph"].items() if key != "results")
    graph = PytorchExportedProgramAdapterImpl(torch.export.load(minmax_pt2),
                                              {"const_element_count_limit": 16}).convert()["graphs"][0]
    assert graph.id == node_data.GRAPH_ID
    drawn = {n.id: n.label for n in graph.nodes}
    assert set(ours["graph"]["results"]) <= set(drawn) and drawn["aminmax"] == "aten.aminmax"


def test_save_node_data_writes_the_json(planted, tmp_path):
    path = planted.save_node_data(tmp_path / "errors.json")
    assert json.loads(path.read_text()) == planted.node_data()
    propagated = planted.save_node_data(tmp_path / "spread.json", propagated=True)
    assert json.loads(propagated.read_text()) == planted.node_data(propagated=True)
    # the JSON report leaves the rows out; the node data is where they go
    assert "node_errors" not in json.loads(planted.to_json())


def test_node_data_refuses_what_it_cannot_key_in_one_line(minmax, tmp_path):
    ep, x = minmax
    plain = jaxport.verify(ep, (x,))
    with pytest.raises(InputError, match="localize=True") as caught:
        plain.save_node_data(tmp_path / "x.json")
    assert "\n" not in str(caught.value) and not (tmp_path / "x.json").exists()
    report = jaxport.verify(tanh_onnx(tmp_path / "tanh.onnx"), localize=True)
    with pytest.raises(InputError, match="written for PyTorch models") as caught:
        report.node_data()
    assert "\n" not in str(caught.value)


def test_an_unmeasurable_result_is_red_and_as_large_as_its_values():
    error = node_data.Deviation(float("nan"), float("inf"), False)
    assert error.value == node_data.UNMEASURABLE and error.colour == RED
    # NaN where the reference has a number: within tolerance by its ratio, still beyond it
    assert node_data.Deviation(1e-9, 1e-4, False).colour == RED
    assert [node_data.Deviation(1e-6, r, True).colour for r in (0.001, 0.05, 0.5)] == [b[1] for b in node_data.BANDS[:3]]
    assert node_data.Deviation(0.1, 50.0, False).colour == node_data.BANDS[3][1]


# -- the command line ---------------------------------------------------------------------------


def run_cli(capfd, *args) -> tuple[int, str, str]:
    capfd.readouterr()
    rc = cli.main([str(a) for a in args])
    out, err = capfd.readouterr()
    return rc, out, err


@pytest.fixture
def wrong_amax(tmp_path):
    path = tmp_path / "wrong_amax.py"
    path.write_text(WRONG_AMAX)
    return path


def test_cli_node_data_writes_both_files(minmax_pt2, wrong_amax, tmp_path, capfd):
    target = tmp_path / "errors.json"
    rc, out, err = run_cli(capfd, "verify", minmax_pt2, "--localize", "--node-data", target, "--lowerings", wrong_amax)
    assert rc == 1 and "node amax (aten.amax.default)" in out, out + err
    spread = tmp_path / "errors.propagated.json"
    assert err.strip() == (f"node data: {target} (each node on the reference's inputs), {spread} "
                           "(on jaxport's own values)")
    local = json.loads(target.read_text())["graph"]["results"]
    assert max(local, key=lambda name: local[name]["value"]) == "aminmax" and local["aminmax"]["bgColor"] == RED
    assert all(r["bgColor"] == RED for name, r in json.loads(spread.read_text())["graph"]["results"].items()
               if name in DOWNSTREAM)
    # with --json, standard output stays the report alone
    rc, out, err = run_cli(capfd, "verify", minmax_pt2, "--localize", "--json", "--node-data", target,
                           "--lowerings", wrong_amax)
    assert rc == 1 and json.loads(out)["first_divergence"]["node"] == "amax" and err.startswith("node data: ")


BAD_FLAGS = {
    "without-localize": (("--node-data", "x.json"), "--node-data needs --localize"),
    "explore-without-localize": (("--explore",), "--explore needs --localize"),
}


@pytest.mark.parametrize("case", BAD_FLAGS)
def test_cli_graph_flags_without_localize_are_one_line(minmax_pt2, capfd, case):
    flags, message = BAD_FLAGS[case]
    rc, out, err = run_cli(capfd, "verify", minmax_pt2, *flags)
    assert rc == 2 and out == "" and err.strip() == f"jaxport verify: {message} (the node-by-node run is what " \
        "measures each node)"


def test_cli_node_data_of_an_onnx_file_is_one_line(tmp_path, capfd):
    rc, out, err = run_cli(capfd, "verify", tanh_onnx(tmp_path / "tanh.onnx"), "--localize", "--node-data",
                           tmp_path / "x.json")
    assert rc == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert "--node-data is for .pt2 files" in err and not (tmp_path / "x.json").exists()


def test_cli_explore_without_model_explorer_says_how_to_install_it(minmax_pt2, monkeypatch, capfd):
    monkeypatch.setitem(sys.modules, "model_explorer", None)  # import model_explorer now raises ImportError
    rc, out, err = run_cli(capfd, "verify", minmax_pt2, "--localize", "--explore")
    assert rc == 2 and out == "" and "Traceback" not in err
    assert err.strip() == ("jaxport verify: --explore: this needs ai-edge-model-explorer, which is not installed "
                           "(pip install 'jaxport[explore]')")


def test_cli_explore_serves_the_model_with_both_node_data(minmax_pt2, wrong_amax, monkeypatch, capfd):
    """--explore hands Model Explorer the .pt2 and both files (where a divergence starts last, so
    that the graph is coloured by it), which exist while it serves and are removed after."""
    served = {}

    class Config:
        def __init__(self):
            self.models, self.node_data = [], []

        def add_model_from_path(self, path):
            self.models.append(path)

        def add_node_data_from_path(self, path):
            self.node_data.append((path, json.loads(open(path).read())))

    def visualize_from_config(config):
        served["config"] = config

    fake = types.ModuleType("model_explorer")
    fake.__version__ = "0.1.34"
    fake.config, fake.visualize_from_config = Config, visualize_from_config
    monkeypatch.setitem(sys.modules, "model_explorer", fake)
    rc, out, err = run_cli(capfd, "verify", minmax_pt2, "--localize", "--explore", "--lowerings", wrong_amax)
    assert rc == 1, out + err
    config = served["config"]
    assert config.models == [str(minmax_pt2)]
    (spread_path, spread), (local_path, local) = config.node_data
    assert spread_path.endswith("minmax.errors.propagated.json") and local_path.endswith("minmax.errors.json")
    assert local["graph"]["results"]["aminmax"]["bgColor"] == RED
    assert spread["graph"]["results"]["tanh"]["bgColor"] == RED
    assert local["graph"]["results"]["linear"]["bgColor"] in GREENS
    assert not any(os.path.exists(p) for p, _ in config.node_data)  # a temporary folder, gone
