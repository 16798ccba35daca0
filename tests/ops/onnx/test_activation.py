"""Activation and loss lowerings on what the conformance cases miss: older opsets (2-D
Softmax family, Selu-1 defaults, per-channel PRelu-6), integer Relu/Shrink, half precision,
compared with onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
import jaxport  # noqa: E402
from tests.support.onnx_nodes import assert_same, node_model  # noqa: E402


def _model(op, inputs, opset, n_outputs=1, **attrs):
    return node_model(op, {f"x{i}": a for i, a in enumerate(inputs)}, opset=opset, n_outputs=n_outputs,
                      **attrs)


def _check(op, inputs, opset, n_outputs=1, rtol=1e-5, **attrs):
    """Half-precision results are held to onnxruntime's float32 ones rounded to half: both
    libraries' half arithmetic is less exact than that."""
    model = _model(op, inputs, opset, n_outputs, **attrs)
    wide = [a.astype(np.float32) if a.dtype == np.float16 else a for a in inputs]
    session = ort.InferenceSession(_model(op, wide, opset, n_outputs, **attrs).SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    want = session.run(None, {f"x{i}": a for i, a in enumerate(wide)})
    if inputs[0].dtype == np.float16:
        want = [w.astype(np.float16) for w in want]
    got = jaxport.from_onnx(model)(*inputs)
    got = list(got) if n_outputs > 1 else [got]
    assert_same(got, want, rtol=rtol, atol=1e-6)


_x = np.random.default_rng(0).standard_normal((2, 3, 4, 5)).astype(np.float32)


@pytest.mark.usefixtures("x64_strict")
@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax", "Hardmax"])
@pytest.mark.parametrize("opset,axis", [(11, None), (11, 2), (11, -1), (11, 0), (13, 1), (1, 1)])
def test_softmax_family_legacy_and_axes(op, opset, axis):
    attrs = {} if axis is None else {"axis": axis}
    _check(op, [_x], opset, **attrs)


@pytest.mark.usefixtures("x64_strict")
def test_hardmax_ties_pick_first():
    x = np.array([[1, 3, 3, 0], [2, 2, 2, 2]], np.float32)
    _check("Hardmax", [x], 13)


@pytest.mark.usefixtures("x64_strict")
def test_selu_default_constants():
    _check("Selu", [_x], 6, rtol=1e-6)
    # onnxruntime lacks Selu-1, whose defaults were 1.6732 and 1.0507.
    want = np.where(_x > 0, 1.0507 * _x, 1.0507 * 1.6732 * np.expm1(_x))
    got = jaxport.from_onnx(_model("Selu", [_x], 1))(_x)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-6)


@pytest.mark.usefixtures("x64_strict")
def test_prelu_legacy_per_channel_slope():
    slope = np.array([0.1, 0.2, 0.3], np.float32)
    want = np.where(_x < 0, slope.reshape(3, 1, 1) * _x, _x)
    got = jaxport.from_onnx(_model("PRelu", [_x, slope], 6))(_x, slope)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-6)


@pytest.mark.usefixtures("x64_strict")
@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.int64])
def test_relu_integers(dtype):
    # onnxruntime's Relu-14 lacks int64.
    x = np.arange(-5, 5, dtype=dtype)
    got = np.asarray(jaxport.from_onnx(_model("Relu", [x], 14))(x))
    assert got.dtype == dtype
    np.testing.assert_array_equal(got, np.maximum(x, 0))


@pytest.mark.usefixtures("x64_strict")
@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.float64])
def test_shrink_other_types(dtype):
    _check("Shrink", [np.arange(-5, 6).astype(dtype)], 9, lambd=1.5, bias=1.0)


@pytest.mark.usefixtures("x64_strict")
@pytest.mark.parametrize("op,attrs", [("Gelu", {}), ("Gelu", {"approximate": "tanh"}),
                                      ("Elu", {"alpha": 0.5}), ("HardSwish", {}), ("Mish", {}),
                                      ("Softplus", {}), ("Softsign", {}), ("Sigmoid", {})])
def test_half_precision(op, attrs):
    opset = {"Gelu": 20, "Mish": 18}.get(op, 14)
    _check(op, [_x.astype(np.float16)], opset, rtol=2e-3, **attrs)


@pytest.mark.usefixtures("x64_strict")
@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
@pytest.mark.parametrize("dtype", [np.float64, np.float16])
def test_softmax_cross_entropy_int32_labels(rng, reduction, dtype):
    scores = _x.astype(dtype)
    labels = rng.integers(0, 3, (2, 4, 5)).astype(np.int32)
    labels[0, 0, :2] = -100
    weights = np.array([0.5, 1.0, 2.0], dtype)
    _check("SoftmaxCrossEntropyLoss", [scores, labels, weights], 13, n_outputs=2,
           rtol=2e-3 if dtype == np.float16 else 1e-7, reduction=reduction, ignore_index=-100)
