"""Shape and indexing lowerings on what the conformance cases miss: shape arithmetic
(Shape -> Gather -> Concat -> Reshape) staying static under `jax.jit`, and the older opsets
whose operands were attributes (Reshape-1, Slice-1, Pad-2, Split-2, Squeeze/Unsqueeze-11),
compared with onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import jaxport  # noqa: E402
from tests.support.numeric import assert_close  # noqa: E402

_x = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)


def _graph_model(nodes, constants, opset, outputs=("y",)):
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, _x.shape)],
        [helper.make_empty_tensor_value_info(n) for n in outputs],
        initializer=[numpy_helper.from_array(np.asarray(a), n) for n, a in constants.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def _check(model, n_outputs=1, jit=True):
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    want = session.run(None, {"x": _x})
    converted = jaxport.from_onnx(model)
    assert converted.jittable == jit
    got = converted(_x)
    got = list(got) if n_outputs > 1 else [got]
    for g, w in zip(got, want):
        assert_close(g, w, rtol=1e-6, atol=0, check_dtype=False)


def _shape_arithmetic_model():
    n = helper.make_node
    nodes = [
        n("Shape", ["x"], ["s"]),
        n("Gather", ["s", "zero"], ["batch"], axis=0),
        n("Unsqueeze", ["batch", "axes0"], ["batch1"]),
        n("Concat", ["batch1", "minus_one"], ["target"], axis=0),
        n("Reshape", ["x", "target"], ["flat"]),
        n("Shape", ["flat"], ["s2"], start=-1),
        n("Squeeze", ["s2"], ["width"]),
        n("Range", ["zero", "width", "one"], ["positions"]),
        n("Gather", ["flat", "positions"], ["picked"], axis=1),
        n("ConstantOfShape", ["s"], ["ones"], value=numpy_helper.from_array(np.ones(1, np.float32))),
        n("Slice", ["ones", "zero1", "one1", "axes0"], ["first"]),
        n("Expand", ["first", "s"], ["y1"]),
        n("Identity", ["picked"], ["y"]),
    ]
    constants = {"zero": np.array(0, np.int64), "one": np.array(1, np.int64),
                 "zero1": np.array([0], np.int64), "one1": np.array([1], np.int64),
                 "axes0": np.array([0], np.int64), "minus_one": np.array([-1], np.int64)}
    return _graph_model(nodes, constants, 15, outputs=("y", "y1"))


@pytest.mark.usefixtures("x64_strict")
def test_shape_arithmetic_runs_under_jit():
    _check(_shape_arithmetic_model(), n_outputs=2)


def test_shape_arithmetic_runs_under_jit_without_x64():
    _check(_shape_arithmetic_model(), n_outputs=2)


@pytest.mark.usefixtures("x64_strict")
@pytest.mark.parametrize("op,opset,attrs,n_outputs", [
    ("Reshape", 4, {"shape": [0, -1]}, 1),
    ("Slice", 9, {"starts": [1, -3], "ends": [100, -1], "axes": [1, 2]}, 1),
    ("Pad", 10, {"pads": [0, 1, 2, 0, 1, 1], "mode": "reflect"}, 1),
    ("Pad", 10, {"pads": [1, 0, 0, 0, 0, -1], "value": 2.5}, 1),
    ("Split", 11, {"axis": 2}, 2),
    ("Split", 11, {"axis": 1, "split": [1, 2]}, 2),
    ("Squeeze", 11, {"axes": [0]}, 1),
    ("Squeeze", 11, {}, 1),
    ("Unsqueeze", 11, {"axes": [0, -1]}, 1),
    ("Transpose", 11, {}, 1),
    ("Flatten", 11, {"axis": 0}, 1),
])
def test_attribute_operands_of_older_opsets(op, opset, attrs, n_outputs):
    x_in = "x"
    nodes = []
    if op == "Squeeze":  # needs dims of size 1
        nodes.append(helper.make_node("Unsqueeze", ["x"], ["x0"], axes=[0, 3]))
        x_in = "x0"
    outs = [f"y{i}" if i else "y" for i in range(n_outputs)]
    nodes.append(helper.make_node(op, [x_in], outs, **attrs))
    _check(_graph_model(nodes, {}, opset, outputs=outs), n_outputs=n_outputs)


def _single(op, inputs, opset, want=None, **attrs):
    """Run one node through jaxport; compare with onnxruntime, or with `want` where ORT lacks
    the kernel."""
    graph = helper.make_graph(
        [helper.make_node(op, list(inputs), ["y"], **attrs)], "g",
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
         for n, a in inputs.items()],
        [helper.make_empty_tensor_value_info("y")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)
    if want is None:
        session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        want = session.run(None, inputs)[0]
    got = np.asarray(jaxport.from_onnx(model)(*inputs.values()))
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)


@pytest.mark.usefixtures("x64_strict")
def test_one_hot_float_indices_and_depth():
    # Float indices truncate to int64: 2.7 -> 2, -1 -> 3 (from the end), 7 is out of range.
    want = np.full((2, 4, 2), 3, np.int32)
    want[0, 0, 0] = want[0, 2, 1] = want[1, 3, 0] = 9
    _single("OneHot", {"i": np.array([[0.0, 2.7], [-1.0, 7.0]], np.float32),
                       "d": np.array([4.0], np.float32), "v": np.array([3, 9], np.int32)}, 11,
            want=want, axis=1)


@pytest.mark.usefixtures("x64_strict")
def test_gather_elements_indices_smaller_than_data():
    _single("GatherElements", {"x": np.arange(12, dtype=np.float32).reshape(3, 4),
                               "i": np.array([[2, -1], [0, 1]], np.int64)}, 13, axis=0)


@pytest.mark.usefixtures("x64_strict")
def test_gather_negative_indices_on_a_shape():
    _single("Gather", {"x": np.array([5, 6, 7], np.int64), "i": np.array([[-1, 0]], np.int64)}, 13)
