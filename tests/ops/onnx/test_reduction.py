"""Reduction and linear-algebra lowerings on what the conformance cases miss: axes as an
attribute (older opsets), axes baked in as constants (the jit path), integer means, TopK's
smallest/ties/older signatures, Unique in first-occurrence order, legacy Gemm broadcast and
per-row MatMulInteger zero points, compared with onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
import jaxport  # noqa: E402
from tests.support.onnx_nodes import assert_same, node_model, run_both  # noqa: E402


def _model(op, inputs, opset, n_outputs=1, constants=None, **attrs):
    """One `op` node over graph inputs `inputs` (name -> array) and initializers `constants`."""
    constants = constants or {}
    return node_model(op, {**inputs, **constants}, opset=opset, n_outputs=n_outputs,
                      initializers=constants, **attrs)


def _check(op, inputs, opset, n_outputs=1, constants=None, rtol=1e-5, jit=None, **attrs):
    assert_same(*run_both(_model(op, inputs, opset, n_outputs, constants, **attrs), inputs, jittable=jit),
                rtol=rtol)


_x = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)
_REDUCE = ["ReduceL1", "ReduceL2", "ReduceLogSumExp", "ReduceMax", "ReduceMean", "ReduceMin",
           "ReduceProd", "ReduceSum", "ReduceSumSquare"]


@pytest.mark.usefixtures("x64_strict")
@pytest.mark.parametrize("op", [*_REDUCE, "ReduceLogSum"])
@pytest.mark.parametrize("axes,keepdims", [(None, 1), ((0, -1), 0), ((1,), 1)])
def test_reduce_axes_attribute(op, axes, keepdims):
    x = np.abs(_x) if op == "ReduceLogSum" else _x
    attrs = {"keepdims": keepdims} if axes is None else {"axes": axes, "keepdims": keepdims}
    _check(op, {"x": x}, 11, **attrs)


@pytest.mark.usefixtures("x64_strict")
@pytest.mark.parametrize("op", _REDUCE)
def test_reduce_constant_axes_run_under_jit(op):
    opset = 13 if op == "ReduceSum" else 18
    _check(op, {"x": _x}, opset, constants={"axes": np.array([-1, 0])}, keepdims=0, jit=True)


@pytest.mark.usefixtures("x64_strict")
def test_reduce_sum_square_noop_still_squares():
    _check("ReduceSumSquare", {"x": _x}, 18, constants={"axes": np.zeros(0, np.int64)},
           noop_with_empty_axes=1)


@pytest.mark.usefixtures("x64_strict")
@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_reduce_mean_integers_truncate(dtype):
    x = np.array([[-7, 2, 0], [5, 5, 1]], dtype)
    _check("ReduceMean", {"x": x}, 18, constants={"axes": np.array([1])})


@pytest.mark.usefixtures("x64_strict")
def test_argmax_legacy_negative_axis():
    _check("ArgMax", {"x": _x}, 11, axis=-1, keepdims=0)


@pytest.mark.usefixtures("x64_strict")
@pytest.mark.parametrize("exclusive,reverse", [(0, 1), (1, 1)])
def test_cumsum_2d_exclusive_reverse(exclusive, reverse):
    x = np.arange(12, dtype=np.int64).reshape(3, 4)
    _check("CumSum", {"x": x}, 11, constants={"axis": np.array(1)},
           exclusive=exclusive, reverse=reverse)


@pytest.mark.usefixtures("x64_strict")
@pytest.mark.parametrize("dtype", [np.int32, np.float32])
def test_topk_smallest_with_ties(dtype):
    x = np.array([[3, 1, 1, 2, 1], [0, 0, 5, -4, -4]], dtype)
    _check("TopK", {"x": x}, 11, 2, constants={"k": np.array([3])}, largest=0)


@pytest.mark.usefixtures("x64_strict")
@pytest.mark.parametrize("opset", [1, 10])
def test_topk_older_signatures(opset):
    if opset == 1:
        _check("TopK", {"x": _x}, 1, 2, axis=1, k=2)
    else:
        _check("TopK", {"x": _x}, 10, 2, constants={"k": np.array([2])}, axis=1)


@pytest.mark.usefixtures("x64_strict")
@pytest.mark.parametrize("axis", [None, 0])
def test_unique_first_occurrence_order(axis):
    x = np.array([[3, 1], [2, 2], [3, 1], [0, 5]], np.int64)
    attrs = {} if axis is None else {"axis": axis}
    _check("Unique", {"x": x}, 11, 4, sorted=0, **attrs)


@pytest.mark.usefixtures("x64_strict")
def test_gemm_legacy_broadcast(rng):
    a, b = rng.standard_normal((3, 4)).astype(np.float32), rng.standard_normal((5, 4)).astype(np.float32)
    c = rng.standard_normal(5).astype(np.float32)
    # onnxruntime has no Gemm-6 kernel: compare with NumPy.
    model = _model("Gemm", {"a": a, "b": b, "c": c}, 6, broadcast=1, transB=1, alpha=0.5, beta=2.0)
    got = np.asarray(jaxport.from_onnx(model)(a, b, c))
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, 0.5 * a @ b.T + 2.0 * c, rtol=1e-5)


@pytest.mark.usefixtures("x64_strict")
def test_gemm_without_c_transposed_a(rng):
    a, b = rng.standard_normal((4, 3)).astype(np.float32), rng.standard_normal((4, 5)).astype(np.float32)
    _check("Gemm", {"a": a, "b": b}, 11, transA=1)


@pytest.mark.usefixtures("x64_strict")
def test_matmul_integer_per_row_zero_point(rng):
    a = rng.integers(0, 255, (4, 3)).astype(np.uint8)
    b = rng.integers(-128, 127, (3, 2)).astype(np.int8)
    az, bz = np.array([1, 2, 3, 4], np.uint8), np.array([-1, 2], np.int8)
    # onnxruntime takes only scalar zero points: compare with NumPy.
    model = _model("MatMulInteger", {"a": a, "b": b}, 10, constants={"az": az, "bz": bz})
    got = np.asarray(jaxport.from_onnx(model)(a, b))
    want = (a.astype(np.int32) - az.astype(np.int32)[:, None]) @ (b.astype(np.int32) - bz)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, want)
