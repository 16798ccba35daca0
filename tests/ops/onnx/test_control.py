"""Recurrent layers and control flow on what the conformance cases miss, compared with
onnxruntime: `sequence_lens`, clip, parametric activations, LSTM peepholes with
input_forget; Loop and If traced by `jax.jit` (lax.while_loop, lax.scan, lax.cond); Scan-8."""

from __future__ import annotations

import collections
import importlib.util
import time

import jax
import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import jaxport  # noqa: E402
from tests.support.onnx_nodes import assert_same  # noqa: E402

pytestmark = pytest.mark.usefixtures("x64_strict")
def _model(nodes, inputs, outputs, opset, initializers=()):
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [helper.make_empty_tensor_value_info(n) for n in outputs],
        initializer=[numpy_helper.from_array(np.asarray(a), n) for n, a in initializers])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def _compare(model, feeds: dict, *, jittable=True, rtol=1e-5, atol=1e-6):
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    want = session.run(None, feeds)
    converted = jaxport.from_onnx(model)
    assert converted.jittable == jittable
    got = converted(*feeds.values())
    got = list(got) if len(want) > 1 else [got]
    assert_same(got, want, rtol=rtol, atol=atol)
    return converted


def _rnn_case(rng, op, *, gates, direction, layout, attrs, with_lens=True, peepholes=False):
    steps, batch, size, hidden = 5, 3, 4, 6
    dirs = 2 if direction == "bidirectional" else 1
    x_shape = (batch, steps, size) if layout else (steps, batch, size)
    state_shape = (batch, dirs, hidden) if layout else (dirs, batch, hidden)
    f = TensorProto.FLOAT
    feeds = {
        "X": rng.standard_normal(x_shape).astype(np.float32),
        "W": rng.standard_normal((dirs, gates * hidden, size)).astype(np.float32) * 0.5,
        "R": rng.standard_normal((dirs, gates * hidden, hidden)).astype(np.float32) * 0.5,
        "B": rng.standard_normal((dirs, 2 * gates * hidden)).astype(np.float32) * 0.5,
        "lens": np.array([5, 2, 4] if with_lens else [5, 5, 5], np.int32),
        "h0": rng.standard_normal(state_shape).astype(np.float32),
    }
    inputs = [("X", f, x_shape), ("W", f, feeds["W"].shape), ("R", f, feeds["R"].shape),
              ("B", f, feeds["B"].shape), ("lens", TensorProto.INT32, (batch,)), ("h0", f, state_shape)]
    names = ["X", "W", "R", "B", "lens", "h0"]
    outputs = ["Y", "Y_h"]
    if op == "LSTM":
        feeds["c0"] = rng.standard_normal(state_shape).astype(np.float32)
        inputs.append(("c0", f, state_shape))
        names.append("c0")
        outputs.append("Y_c")
        if peepholes:
            feeds["P"] = rng.standard_normal((dirs, 3 * hidden)).astype(np.float32)
            inputs.append(("P", f, (dirs, 3 * hidden)))
            names.append("P")
    node = helper.make_node(op, names, outputs, hidden_size=hidden, direction=direction,
                            layout=layout, **attrs)
    return _model([node], inputs, outputs, 14), feeds


@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
def test_gru_sequence_lens(rng, direction):
    # (onnxruntime has no layout=1; the conformance cases cover it.)
    model, feeds = _rnn_case(rng, "GRU", gates=3, direction=direction, layout=0,
                             attrs={"linear_before_reset": 1})
    _compare(model, feeds)


@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
def test_lstm_sequence_lens_peepholes(rng, direction):
    model, feeds = _rnn_case(rng, "LSTM", gates=4, direction=direction, layout=0, peepholes=True,
                             attrs={"clip": 1.5, "input_forget": 1})
    _compare(model, feeds)


def test_rnn_parametric_activations(rng):
    attrs = {"activations": ["Affine", "LeakyRelu"], "activation_alpha": [0.7, 0.2],
             "activation_beta": [0.1]}
    model, feeds = _rnn_case(rng, "RNN", gates=1, direction="bidirectional", layout=0, attrs=attrs)
    _compare(model, feeds)


def _body(nodes, inputs, outputs):
    return helper.make_graph(
        nodes, "body", [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs])


def test_loop_traced_as_while_loop_and_scan():
    """A constant trip count and a runtime carried tensor: the loop becomes lax.scan (it
    has a scan output) under jax.jit; the state doubles each step."""
    f, b, i64 = TensorProto.FLOAT, TensorProto.BOOL, TensorProto.INT64
    n = helper.make_node
    body = _body(
        [n("Identity", ["cond_in"], ["cond_out"]), n("Add", ["x_in", "x_in"], ["x_out"]),
         n("Identity", ["x_out"], ["scan_out"])],
        [("i", i64, []), ("cond_in", b, []), ("x_in", f, [2])],
        [("cond_out", b, []), ("x_out", f, [2]), ("scan_out", f, [2])])
    node = n("Loop", ["M", "", "x"], ["x_final", "xs"], body=body)
    model = _model([node], [("x", f, [2])], ["x_final", "xs"], 13, [("M", np.array(4, np.int64))])
    _compare(model, {"x": np.array([1.0, -0.5], np.float32)})


def test_loop_runtime_condition_becomes_while_loop():
    """Doubling until the sum passes 100: a data-dependent condition, no scan outputs."""
    f, b, i64 = TensorProto.FLOAT, TensorProto.BOOL, TensorProto.INT64
    n = helper.make_node
    body = _body(
        [n("Add", ["x_in", "x_in"], ["x_out"]), n("ReduceSum", ["x_out"], ["total"], keepdims=0),
         n("Less", ["total", "limit"], ["cond_out"])],
        [("i", i64, []), ("cond_in", b, []), ("x_in", f, [2])],
        [("cond_out", b, []), ("x_out", f, [2])])
    node = n("Loop", ["", "go", "x"], ["x_final"], body=body)
    model = _model([node], [("x", f, [2])], ["x_final"], 13,
                   [("go", np.array(True)), ("limit", np.array(100.0, np.float32))])
    converted = _compare(model, {"x": np.array([1.0, 2.0], np.float32)})
    jaxpr = str(jax.make_jaxpr(converted.apply)(converted.params, np.ones(2, np.float32)))
    assert "while" in jaxpr


def test_if_with_runtime_condition():
    """The condition is static (branches may differ in type), so the model runs op by op;
    a caller's own jax.jit still traces equal-typed branches as lax.cond."""
    f, b = TensorProto.FLOAT, TensorProto.BOOL
    n = helper.make_node
    then_branch = _body([n("Add", ["x", "x"], ["t"])], [], [("t", f, [3])])
    else_branch = _body([n("Neg", ["x"], ["e"])], [], [("e", f, [3])])
    node = n("If", ["c"], ["y"], then_branch=then_branch, else_branch=else_branch)
    model = _model([node], [("c", b, []), ("x", f, [3])], ["y"], 13)
    x = np.array([1.0, -2.0, 3.0], np.float32)
    for c in (True, False):
        converted = _compare(model, {"c": np.array(c), "x": x}, jittable=False)
        traced = jax.jit(converted.apply)(converted.params, np.array(c), x)
        np.testing.assert_allclose(np.asarray(traced), 2 * x if c else -x)


def test_scan_8_batched(rng):
    f = TensorProto.FLOAT
    n = helper.make_node
    body = _body([n("Add", ["s_in", "v"], ["s_out"]), n("Identity", ["s_out"], ["y"])],
                 [("s_in", f, [2]), ("v", f, [2])], [("s_out", f, [2]), ("y", f, [2])])
    node = n("Scan", ["", "s0", "xs"], ["s", "ys"], body=body, num_scan_inputs=1, directions=[1])
    model = _model([node], [("s0", f, [2, 2]), ("xs", f, [2, 3, 2])], ["s", "ys"], 8)
    _compare(model, {"s0": np.zeros((2, 2), np.float32),
                     "xs": rng.standard_normal((2, 3, 2)).astype(np.float32)})


@pytest.mark.parametrize("direction", [0, 1])
def test_scan_8_sequence_lens(rng, direction):
    f = TensorProto.FLOAT
    n = helper.make_node
    body = _body([n("Add", ["s_in", "v"], ["s_out"]), n("Identity", ["s_out"], ["y"])],
                 [("s_in", f, [2]), ("v", f, [2])], [("s_out", f, [2]), ("y", f, [2])])
    node = n("Scan", ["lens", "s0", "xs"], ["s", "ys"], body=body, num_scan_inputs=1,
             directions=[direction])
    model = _model([node], [("lens", TensorProto.INT64, [3]), ("s0", f, [3, 2]), ("xs", f, [3, 4, 2])],
                   ["s", "ys"], 8)
    _compare(model, {"lens": np.array([4, 1, 3], np.int64), "s0": np.ones((3, 2), np.float32),
                     "xs": rng.standard_normal((3, 4, 2)).astype(np.float32)})


def test_sequence_ops_round_trip(rng):
    """Split into a sequence, erase and insert at negative positions, read one back, concat."""
    f = TensorProto.FLOAT
    n = helper.make_node
    nodes = [
        n("SplitToSequence", ["x", "two"], ["seq"], axis=1),  # pieces of 2, 2, 1 columns
        n("SequenceErase", ["seq", "minus_two"], ["erased"]),
        n("SequenceInsert", ["erased", "x", "zero"], ["inserted"]),
        n("SequenceAt", ["inserted", "minus_one"], ["last"]),
        n("SequenceLength", ["inserted"], ["length"]),
        n("SplitToSequence", ["x"], ["columns"], axis=1, keepdims=0),
        n("ConcatFromSequence", ["columns"], ["stacked"], axis=-1, new_axis=1),
        n("ConcatFromSequence", ["erased"], ["joined"], axis=1),
    ]
    constants = [("two", np.array(2, np.int64)), ("minus_two", np.array(-2, np.int64)),
                 ("zero", np.array(0, np.int64)), ("minus_one", np.array(-1, np.int64))]
    model = _model(nodes, [("x", f, [3, 5])], ["last", "length", "stacked", "joined"], 13, constants)
    _compare(model, {"x": rng.standard_normal((3, 5)).astype(np.float32)})


def test_loop_growing_sequence_unrolls_under_jit():
    """A sequence that grows each iteration cannot be a lax loop's state: with a constant
    trip count the loop unrolls while traced, and the model still runs under jax.jit."""
    f, b, i64 = TensorProto.FLOAT, TensorProto.BOOL, TensorProto.INT64
    n = helper.make_node
    seq_type = helper.make_sequence_type_proto(helper.make_tensor_type_proto(f, [2]))
    body = helper.make_graph(
        [n("Identity", ["cond_in"], ["cond_out"]), n("SequenceInsert", ["seq_in", "x_in"], ["seq_out"]),
         n("Add", ["x_in", "x_in"], ["x_out"])],
        "body", [helper.make_tensor_value_info("i", i64, []), helper.make_tensor_value_info("cond_in", b, []),
                 helper.make_value_info("seq_in", seq_type), helper.make_tensor_value_info("x_in", f, [2])],
        [helper.make_tensor_value_info("cond_out", b, []), helper.make_value_info("seq_out", seq_type),
         helper.make_tensor_value_info("x_out", f, [2])])
    nodes = [n("SequenceEmpty", [], ["empty"], dtype=f),
             n("Loop", ["M", "", "empty", "x"], ["seq", "x_final"], body=body),
             n("ConcatFromSequence", ["seq"], ["y"], axis=0, new_axis=1)]
    model = _model(nodes, [("x", f, [2])], ["y", "x_final"], 13, [("M", np.array(3, np.int64))])
    _compare(model, {"x": np.array([1.0, -1.0], np.float32)})


def _nested_ifs(depth: int) -> onnx.ModelProto:
    """Ifs nested `depth` deep in their then-branches, level k's condition `s > k`: y = x + 1
    where s > depth - 1, else -x from the first level whose condition fails."""
    f = TensorProto.FLOAT
    n = helper.make_node
    inner = _body([n("Add", ["x", "one"], [f"out{depth}"])], [], [(f"out{depth}", f, [2])])
    for level in reversed(range(depth)):
        otherwise = _body([n("Neg", ["x"], [f"neg{level}"])], [], [(f"neg{level}", f, [2])])
        nodes = [n("Greater", ["s", f"level{level}"], [f"c{level}"]),
                 n("If", [f"c{level}"], [f"out{level}"], then_branch=inner, else_branch=otherwise,
                   name=f"if{level}")]
        inner = helper.make_graph(nodes, f"then{level}", [], [helper.make_tensor_value_info(f"out{level}", f, [2])],
                                  [numpy_helper.from_array(np.array(level, np.float32), f"level{level}")])
    graph = helper.make_graph(list(inner.node), "nested", [helper.make_tensor_value_info("x", f, [2]),
                                                           helper.make_tensor_value_info("s", f, [])],
                              [helper.make_tensor_value_info("out0", f, [2])],
                              [*inner.initializer, numpy_helper.from_array(np.array(1, np.float32), "one")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _traces_per_node(converted, *inputs) -> collections.Counter:
    """How many times tracing the model under jax.jit runs each node's lowering, subgraphs'
    nodes included, keyed by (program, node index)."""
    from jaxport.ir import interpret

    seen: collections.Counter = collections.Counter()

    def observe(program, index, concrete, out):
        seen[(id(program), index)] += 1

    jax.jit(lambda p, *xs: interpret(converted.program, p, xs, observe=observe)[0]).trace(
        converted.params, *inputs)
    return seen


def test_nested_ifs_trace_each_branch_once(tmp_path):
    """30 Ifs nested in their then-branches, conditions known only at run time: each branch is
    traced once (tracing each twice made jit time double per level: 24 deep took minutes),
    in the interpreter and in the generated code."""
    x = np.array([1.0, -2.0], np.float32)
    # Counted 5 deep first: tracing each branch twice would make these 4**5 traces of the leaf.
    traces = _traces_per_node(jaxport.from_onnx(_nested_ifs(5)), x, np.array(0, np.float32))
    assert len(traces) == 3 * 5 + 1 and set(traces.values()) == {1}  # Greater, If, Neg per level; Add
    depth = 30
    model = _nested_ifs(depth)
    converted = jaxport.from_onnx(model)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    start = time.perf_counter()
    jitted = jax.jit(converted.apply)
    for s in (depth + 1.0, 3.0, -1.0):
        feeds = {"x": x, "s": np.array(s, np.float32)}
        np.testing.assert_array_equal(np.asarray(jitted(converted.params, *feeds.values())),
                                      session.run(None, feeds)[0])
    assert time.perf_counter() - start < 20  # about 1 s; minutes when each level traced twice

    emitted = jaxport.emit(converted, tmp_path / "nested")
    spec = importlib.util.spec_from_file_location("nested_ifs_generated", emitted.module)
    generated = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generated)
    calls = []
    traced_neg = generated.neg
    generated.neg = lambda *args, **kwargs: calls.append(1) or traced_neg(*args, **kwargs)
    start = time.perf_counter()
    y = jax.jit(generated.forward)(generated.load_params(), x, np.array(3.0, np.float32))
    assert time.perf_counter() - start < 20
    assert len(calls) == depth  # each else-branch's Neg traced once
    np.testing.assert_array_equal(np.asarray(y), -x)


def test_nested_loops_and_scan_trace_each_body_once():
    """An If holding a Loop with a scan output (lax.scan) whose body holds a Loop with a
    data-dependent condition (lax.while_loop) whose body holds a Scan: under jax.jit every
    node, subgraphs' included, is traced exactly once, and the result is onnxruntime's."""
    f, b, i64 = TensorProto.FLOAT, TensorProto.BOOL, TensorProto.INT64
    n = helper.make_node
    scan_body = _body([n("Add", ["acc_in", "row"], ["acc_out"]), n("Identity", ["acc_out"], ["row_out"])],
                      [("acc_in", f, [2]), ("row", f, [2])], [("acc_out", f, [2]), ("row_out", f, [2])])
    while_body = _body(
        [n("Scan", ["w_in", "rows"], ["w_out", "scanned"], body=scan_body, num_scan_inputs=1),
         n("ReduceSum", ["w_out"], ["total"], keepdims=0), n("Less", ["total", "limit"], ["go_out"])],
        [("j", i64, []), ("go_in", b, []), ("w_in", f, [2])], [("go_out", b, []), ("w_out", f, [2])])
    loop_body = _body(
        [n("Identity", ["cond_in"], ["cond_out"]),
         n("Loop", ["", "go", "v_in"], ["v_out"], body=while_body), n("Neg", ["v_out"], ["per_step"])],
        [("i", i64, []), ("cond_in", b, []), ("v_in", f, [2])],
        [("cond_out", b, []), ("v_out", f, [2]), ("per_step", f, [2])])
    then_branch = _body([n("Loop", ["trips", "", "x"], ["final", "steps"], body=loop_body)], [],
                        [("final", f, [2]), ("steps", f, [3, 2])])
    else_branch = _body([n("Identity", ["x"], ["same"]), n("Expand", ["x", "shape"], ["stacked"])], [],
                        [("same", f, [2]), ("stacked", f, [3, 2])])
    node = n("If", ["c"], ["y", "ys"], then_branch=then_branch, else_branch=else_branch)
    constants = [("trips", np.array(3, np.int64)), ("go", np.array(True)), ("limit", np.array(50, np.float32)),
                 ("rows", np.array([[1, 0], [0, 2]], np.float32)), ("shape", np.array([3, 2], np.int64))]
    model = _model([node], [("c", b, []), ("x", f, [2])], ["y", "ys"], 13, constants)
    converted = jaxport.from_onnx(model)
    x = np.array([1.0, 0.5], np.float32)
    traces = _traces_per_node(converted, np.array(True), x)
    assert len(traces) == 12 and set(traces.values()) == {1}
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for c in (True, False):
        got = jax.jit(converted.apply)(converted.params, np.array(c), x)
        for g, w in zip(got, session.run(None, {"c": np.array(c), "x": x})):
            np.testing.assert_allclose(np.asarray(g), w, rtol=1e-6)
