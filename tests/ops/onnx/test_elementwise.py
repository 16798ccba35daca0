"""Elementwise lowerings on what the conformance cases miss: the opset < 7 forms (Add-6's
`broadcast`/`axis`, Clip-6's attribute bounds, Cast-1's `to` given as a type name), Cast's
float8e8m0 rounding modes, float -> int4 on non-integral values, and an integer base raised
to a floating exponent."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ml_dtypes = pytest.importorskip("ml_dtypes")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import jaxport  # noqa: E402

pytestmark = pytest.mark.usefixtures("x64_strict")


def _run(node, inputs: dict, out_type, opset: int):
    """Run a one-node model on `inputs` (name -> array) and return its single output."""
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
         for name, a in inputs.items()],
        [helper.make_tensor_value_info("y", out_type, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=7)
    return np.asarray(jaxport.from_onnx(model)(*inputs.values()))


def test_add_6_broadcast_axis():
    a = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    b = np.array([10, 20, 30], np.float32)
    node = helper.make_node("Add", ["a", "b"], ["y"], broadcast=1, axis=1)
    got = _run(node, {"a": a, "b": b}, TensorProto.FLOAT, 6)
    np.testing.assert_array_equal(got, a + b[:, None])


def test_clip_6_attributes():
    x = np.array([-3, -1, 0, 2, 7, np.nan], np.float32)
    node = helper.make_node("Clip", ["x"], ["y"], min=-1.5, max=2.5)
    np.testing.assert_array_equal(_run(node, {"x": x}, TensorProto.FLOAT, 6),
                                  [-1.5, -1, 0, 2, 2.5, np.nan])
    unbounded = helper.make_node("Clip", ["x"], ["y"])
    np.testing.assert_array_equal(_run(unbounded, {"x": x}, TensorProto.FLOAT, 6), x)


def test_cast_1_type_name():
    x = np.array([-2.7, 0.5, 3.9], np.float32)
    node = helper.make_node("Cast", ["x"], ["y"], to="INT32")
    got = _run(node, {"x": x}, TensorProto.INT32, 1)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, [-2, 0, 3])


@pytest.mark.parametrize("saturate", [0, 1])
@pytest.mark.parametrize("round_mode", ["up", "down", "nearest"])
def test_cast_float8e8m0_rounding(round_mode, saturate):
    x = np.array([0, 1e-40, 6e-39, 1.0, 1.4, 1.5, 1.6, 3.0, 0.75, 2.0**127, 3e38, np.nan],
                 np.float32)
    node = helper.make_node("Cast", ["x"], ["y"], to=TensorProto.FLOAT8E8M0,
                            saturate=saturate, round_mode=round_mode)
    got = _run(node, {"x": x}, TensorProto.FLOAT8E8M0, 25)
    want = numpy_helper.to_float8e8m0(x, bool(saturate), round_mode)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))


def test_cast_float_to_int4_truncates_and_wraps():
    x = np.array([-9.5, -8.2, -2.5, -0.7, 0.7, 2.5, 7.9, 8.1, 13.0], np.float32)
    node = helper.make_node("Cast", ["x"], ["y"], to=TensorProto.INT4)
    got = _run(node, {"x": x}, TensorProto.INT4, 21)
    want = x.astype(ml_dtypes.int4)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got.astype(np.int8), want.astype(np.int8))


def test_pow_integer_base_float_exponent_is_exact():
    x = np.array([3, 5, 10, 7, 2], np.int64)
    y = np.array([2, 3, 4, 5, 40], np.float32)
    node = helper.make_node("Pow", ["x", "p"], ["y"])
    got = _run(node, {"x": x, "p": y}, TensorProto.INT64, 15)
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, [9, 125, 10000, 16807, 2**40])
