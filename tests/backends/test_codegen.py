"""Code generation: `jaxport.emit` / `jaxport convert` write a model.py and weights that run
with neither jaxport nor torch importable, and compute what the interpreter computes."""

from __future__ import annotations

import ast
import dataclasses
import functools
import io
import os
import subprocess
import sys
import tempfile
import tokenize
from pathlib import Path

import jax
import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper

import jaxport
from jaxport.backends.codegen import EmitError
from tests.frontends.onnx.test_models import FUSION_SENSITIVE, LIGHT_DIR, LIGHT_MODELS, _light_input
from tests.support import zoo

ROOT = Path(__file__).resolve().parents[2]
RUNNER = ROOT / "tests" / "conformance" / "codegen" / "runner.py"
TORCH_MODELS = sorted(zoo.MODELS)
#: The light ONNX models `make test` emits: each kind of network once (plain convolutions, grouped
#: ones, one checked op by op; see FUSION_SENSITIVE). JAXPORT_CODEGEN_LIGHT=all (`make codegen-models`)
#: emits all nine.
LIGHT = [name for name, *_ in LIGHT_MODELS
         if os.environ.get("JAXPORT_CODEGEN_LIGHT") == "all" or name in ("bvlc_alexnet", "shufflenet", "squeezenet")]

#: One worker emits and runs every model (the `emitted` fixture, minutes), not each worker once.
pytestmark = pytest.mark.xdist_group("codegen")


def _case(folder: Path, model, inputs: list, jitted: bool) -> Path:
    """Emit `model` into folder/model and save what the runner needs and the reference."""
    folder.mkdir(parents=True)
    jaxport.emit(model, folder / "model")
    np.savez(folder / "inputs.npz", *[np.asarray(x) for x in inputs])
    (folder / "mode").write_text("jit" if jitted else "eager")
    if jitted:
        flat, _ = jax.jit(lambda p, *xs: jaxport.ir.interpret(model.program, p, xs))(model.params, *inputs)
    else:
        flat, _ = jaxport.ir.interpret(model.program, model.params, inputs)
    np.savez(folder / "expected.npz", *[np.asarray(x) for x in flat])
    return folder


def _run(cases: list[Path]) -> None:
    """Run the generated modules in one process where torch, jaxport and onnx are blocked."""
    done = subprocess.run([sys.executable, str(RUNNER), *map(str, cases)], capture_output=True, text=True,
                          cwd=cases[0].parent)
    assert done.returncode == 0, done.stderr[-4000:]


@pytest.fixture(scope="module")
def emitted(tmp_path_factory) -> dict[str, Path]:
    """Every model of the zoo and the light ONNX models, emitted and run once per process (pytest
    may tear a module fixture down and set it up again when it interleaves modules)."""
    return _emitted(tmp_path_factory.getbasetemp())


@functools.cache
def _emitted(base: Path) -> dict[str, Path]:
    root = Path(tempfile.mkdtemp(prefix="emitted", dir=base))
    cases = {}
    for name in TORCH_MODELS:
        module, args, kwargs = zoo.MODELS[name]()
        model = jaxport.from_torch(module, args, kwargs)
        inputs = [jaxport.interop.to_jax(a) for a in args] + [jaxport.interop.to_jax(v) for v in kwargs.values()]
        cases[name] = _case(root / name, model, inputs, jitted=True)
    for name in LIGHT:
        path = os.path.join(LIGHT_DIR, f"light_{name}.onnx")
        proto = onnx.load(path)
        initializers = {t.name for t in proto.graph.initializer}
        inputs = [_light_input(v) for v in proto.graph.input if v.name not in initializers]
        # Jitted where the interpreter's own check is (see FUSION_SENSITIVE), else op by op.
        cases[f"light_{name}"] = _case(root / f"light_{name}", jaxport.from_onnx(path), inputs,
                                       jitted=name not in FUSION_SENSITIVE)
    _run(list(cases.values()))
    return cases


@pytest.mark.parametrize("name", TORCH_MODELS + [f"light_{n}" for n in LIGHT])
def test_generated_module_matches_interpreter(emitted, name):
    with np.load(emitted[name] / "outputs.npz") as got, np.load(emitted[name] / "expected.npz") as want:
        assert len(got.files) == len(want.files)
        for key in want.files:
            assert got[key].shape == want[key].shape and got[key].dtype == want[key].dtype, key
            np.testing.assert_allclose(got[key], want[key], rtol=0, atol=1e-6)


def test_generated_modules_are_formatted_and_pass_ruff_with_default_rules(emitted):
    files = [str(folder / "model" / "model.py") for folder in emitted.values()]
    for command in ("check", "format --check"):
        done = subprocess.run([sys.executable, "-m", "ruff", *command.split(), "--isolated", "--quiet", *files],
                              capture_output=True, text=True)
        assert done.returncode == 0, f"ruff {command}: {done.stdout[-4000:]}"


def test_generated_module_reads_like_the_model(emitted):
    source = (emitted["bert"] / "model" / "model.py").read_text()
    # Values are named after their module path and op; blocks open with the module and source line.
    assert "encoder_layer_0_attention_self_query_linear = aten_linear(" in source
    assert "# encoder.layer.0.attention.self.query: modeling_bert.py:" in source
    assert 'params["encoder.layer.0.attention.self.query.weight"]' in source
    tree = ast.parse(source)
    imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names}
    imported |= {node.module.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert imported <= {"jax", "numpy", "math", "os", "safetensors", "functools", "itertools", "operator"}
    functions = [node.name for node in tree.body if isinstance(node, ast.FunctionDef)]
    assert len(functions) == len(set(functions)), "each op implementation is included once"
    # forward()'s table of contents points at each section's banner.
    lines = source.splitlines()
    entries = [line.strip() for line in lines if ": line " in line and line.startswith("    encoder")]
    assert entries == ["encoder.layer.0: line " + str(lines.index("    # === encoder.layer.0 ===") + 1),
                       "encoder.layer.1: line " + str(lines.index("    # === encoder.layer.1 ===") + 1)]


def test_refuses_a_non_empty_directory_unless_forced(tmp_path):
    module, args, kwargs = zoo.MODELS["cnn"]()
    model = jaxport.from_torch(module, args, kwargs)
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(EmitError, match="not empty"):
        jaxport.emit(model, tmp_path)
    assert not (tmp_path / "model.py").exists()
    emitted = jaxport.emit(model, tmp_path, force=True)
    assert emitted.module.exists() and emitted.weights.exists()


def _loop_model() -> onnx.ModelProto:
    """A Loop whose body reads an outer value, and an If choosing between two constants."""
    body = helper.make_graph(
        [helper.make_node("Add", ["x_in", "step"], ["x_out"]),
         helper.make_node("Identity", ["cond_in"], ["cond_out"])],
        "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("x_in", TensorProto.FLOAT, [3])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("x_out", TensorProto.FLOAT, [3])])

    def branch(value: float, name: str):
        const = helper.make_node("Constant", [], [f"{name}_out"],
                                 value=numpy_helper.from_array(np.array([value] * 3, np.float32)))
        return helper.make_graph([const], name, [], [helper.make_tensor_value_info(f"{name}_out", TensorProto.FLOAT, [3])])

    nodes = [
        helper.make_node("Loop", ["trips", "", "x"], ["looped"], body=body, name="repeat"),
        helper.make_node("If", ["c"], ["chosen"], then_branch=branch(1.0, "then"), else_branch=branch(-1.0, "else"),
                         name="choice"),
        helper.make_node("Mul", ["looped", "chosen"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info("trips", TensorProto.INT64, []),
         helper.make_tensor_value_info("c", TensorProto.BOOL, []),
         helper.make_tensor_value_info("x", TensorProto.FLOAT, [3]),
         helper.make_tensor_value_info("step", TensorProto.FLOAT, [3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize("choice", [True, False])
def test_control_flow_becomes_nested_functions(tmp_path, choice):
    model = jaxport.from_onnx(_loop_model())
    inputs = [np.array(3), np.array(choice), np.arange(3, dtype=np.float32), np.full(3, 0.5, np.float32)]
    case = _case(tmp_path / "loop", model, inputs, jitted=model.jittable)
    _run([case])
    with np.load(case / "outputs.npz") as got:
        np.testing.assert_array_equal(got["arr_0"], (np.arange(3) + 1.5) * (1 if choice else -1))
    source = (case / "model" / "model.py").read_text()
    assert "def repeat_loop_body(" in source and "def choice_if_then_branch(" in source


class _Router(torch.nn.Module):
    """A mixture-of-experts router: topk, whose lowering defines a nested function."""

    def forward(self, x):
        weights, experts = torch.topk(x.softmax(-1), 2, dim=-1)
        return weights, experts


def test_lowerings_with_nested_functions_are_copied(tmp_path):
    x = torch.randn(4, 6, generator=torch.Generator().manual_seed(0))
    model = jaxport.from_torch(_Router(), (x,))
    case = _case(tmp_path / "router", model, [jaxport.interop.to_jax(x)], jitted=True)
    _run([case])
    with np.load(case / "outputs.npz") as got, np.load(case / "expected.npz") as want:
        np.testing.assert_array_equal(got["arr_0"], want["arr_0"])
        np.testing.assert_array_equal(got["arr_1"], want["arr_1"])


def test_lists_every_op_it_cannot_write_before_writing(tmp_path):
    model = jaxport.from_onnx(_loop_model())
    model.program.nodes = [dataclasses.replace(node, op=f"onnx.Unheard{i}-1")
                           for i, node in enumerate(model.program.nodes)]
    with pytest.raises(jaxport.UnsupportedOpsError) as error:
        jaxport.emit(model, tmp_path / "out")
    assert all(f"onnx.Unheard{i}-1" in str(error.value) for i in range(3))
    assert not (tmp_path / "out").exists()


PAYLOAD = "__import__('os').system('touch PWNED')"
HOSTILE = f'x"""\n{PAYLOAD}\n# \'\\\n"""' + "\u202e"


def _hostile_model() -> onnx.ModelProto:
    """Every name a model file controls carries quotes, newlines, '#', backslashes and code."""
    weight = numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3), f"w{HOSTILE}")
    nodes = [
        helper.make_node("MatMul", [f"in{HOSTILE}", weight.name], [f"mm{HOSTILE}"], name=f"/enc{HOSTILE}/mm"),
        helper.make_node("Relu", [f"mm{HOSTILE}"], [f"out{HOSTILE}"], name=HOSTILE, doc_string=HOSTILE),
    ]
    graph = helper.make_graph(nodes, HOSTILE, [helper.make_tensor_value_info(f"in{HOSTILE}", TensorProto.FLOAT, [4, 2])],
                              [helper.make_tensor_value_info(f"out{HOSTILE}", TensorProto.FLOAT, [4, 3])],
                              initializer=[weight], doc_string=HOSTILE)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8,
                              doc_string=HOSTILE, producer_name=HOSTILE)
    return model


def test_hostile_names_never_become_code(tmp_path):
    model = jaxport.from_onnx(_hostile_model())
    x = np.linspace(-1, 1, 8, dtype=np.float32).reshape(4, 2)
    case = _case(tmp_path / "hostile", model, [x], jitted=True)
    _run([case])
    assert not (tmp_path / "hostile" / "PWNED").exists() and not Path("PWNED").exists()
    with np.load(case / "outputs.npz") as got, np.load(case / "expected.npz") as want:
        np.testing.assert_array_equal(got["arr_0"], want["arr_0"])
    source = (case / "model" / "model.py").read_text()
    assert source.isascii()
    # The payload may survive as inert text (string literals, comments), never as tokens of code.
    code = {t.string for t in tokenize.generate_tokens(io.StringIO(source).readline) if t.type == tokenize.NAME}
    assert not code & {"__import__", "system", "PWNED", "touch"}


def test_convert_cli_writes_and_reports(tmp_path):
    path = tmp_path / "relu.onnx"
    onnx.save(_hostile_model(), path)
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "jaxport", "convert", str(path), "-o", str(out)],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "model.py" in done.stdout and "weights.safetensors" in done.stdout
    again = subprocess.run([sys.executable, "-m", "jaxport", "convert", str(path), "-o", str(out)],
                           capture_output=True, text=True)
    assert again.returncode == 2 and "not empty" in again.stderr and "Traceback" not in again.stderr
    forced = subprocess.run([sys.executable, "-m", "jaxport", "convert", str(path), "-o", str(out), "--force"],
                            capture_output=True, text=True)
    assert forced.returncode == 0, forced.stderr


def test_main_runs_the_model_on_a_random_input(emitted):
    folder = emitted["cnn"]
    done = subprocess.run([sys.executable, str(folder / "model" / "model.py")], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    with np.load(folder / "expected.npz") as want:
        assert done.stdout.split("\n")[0] == f"{want['arr_0'].shape} {want['arr_0'].dtype}"


@pytest.mark.compat
def test_convert_cli_takes_a_torch_export_archive(tmp_path):
    import torch

    module = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh()).eval()
    x = torch.randn(2, 3)
    path = tmp_path / "mlp.pt2"
    torch.export.save(torch.export.export(module, (x,)), path)
    out = tmp_path / "mlp"
    done = subprocess.run([sys.executable, "-m", "jaxport", "convert", str(path), "-o", str(out)],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    np.savez(tmp_path / "inputs.npz", x.numpy())
    (tmp_path / "mode").write_text("jit")
    (out.parent / "model").symlink_to(out)  # the runner reads CASE/model/model.py
    _run([tmp_path])
    with np.load(tmp_path / "outputs.npz") as got, torch.no_grad():
        np.testing.assert_allclose(got["arr_0"], module(x).numpy(), rtol=1e-5, atol=1e-6)


def test_onnx_control_flow_conformance_cases_match_the_interpreter():
    """ONNX's If/Loop/Scan/SequenceMap cases written out and run (the whole suite: 1,849 of the
    1,884 cases load and all match; `python -m tests.conformance.codegen.conformance`, about 10 minutes)."""
    from tests.conformance.codegen import conformance

    counts, failures = conformance.run({"If", "Loop", "Scan", "SequenceMap"})
    assert not failures, failures[:5]
    assert counts["match"] >= 20


def test_grouped_query_attention_copies_its_helper(tmp_path):
    """ONNX Attention with fewer key/value heads than query heads: the lowering's grouping
    helper travels with it into the generated source."""
    from onnx import TensorProto, helper

    shapes = {"Q": [1, 4, 3, 8], "K": [1, 2, 5, 8], "V": [1, 2, 5, 8]}
    graph = helper.make_graph(
        [helper.make_node("Attention", ["Q", "K", "V"], ["Y"], is_causal=1)], "gqa",
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, shape) for name, shape in shapes.items()],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [1, 4, 3, 8])])
    model = jaxport.from_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)]))
    rng = np.random.default_rng(0)
    inputs = [rng.standard_normal(shape).astype(np.float32) for shape in shapes.values()]
    case = _case(tmp_path / "gqa", model, inputs, jitted=True)
    _run([case])
    with np.load(case / "outputs.npz") as got, np.load(case / "expected.npz") as want:
        np.testing.assert_array_equal(got["arr_0"], want["arr_0"])
    assert "def group_heads(" in (case / "model" / "model.py").read_text()


def test_generated_forward_computes_float32_products_as_the_source(tmp_path):
    """Full float32 products, as PyTorch computes them by default (JAX's default on NVIDIA
    GPUs is TF32): the generated forward() carries the converted model's setting."""
    module, x = torch.nn.Linear(4, 3), torch.randn(2, 4)
    case = _case(tmp_path / "linear", jaxport.from_torch(module, (x,)), [x.numpy()], jitted=True)
    _run([case])
    with np.load(case / "outputs.npz") as got, np.load(case / "expected.npz") as want:
        np.testing.assert_array_equal(got["arr_0"], want["arr_0"])
    source = (case / "model" / "model.py").read_text()
    assert '@jax.default_matmul_precision("float32")\ndef forward(' in source
