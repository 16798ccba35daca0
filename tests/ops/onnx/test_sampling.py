"""Resampling, signal, quantization and random lowerings on what the conformance cases miss:
legacy forms (Upsample-7/9, Resize-10, GridSample-16, QuantizeLinear-10/13), quantized conv
with groups and per-channel weights, DFT lengths, and the random ops (no reproducible cases),
compared with onnxruntime, or, for quantized ops, with the ONNX specification's own NumPy arithmetic."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper  # noqa: E402

import jaxport  # noqa: E402
from tests.support.onnx_nodes import assert_same, node_model, run_both, run_spec  # noqa: E402

_TYPES = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.float64): TensorProto.DOUBLE,
          np.dtype(np.uint8): TensorProto.UINT8, np.dtype(np.int8): TensorProto.INT8,
          np.dtype(np.int32): TensorProto.INT32, np.dtype(np.int64): TensorProto.INT64}
_x = np.random.default_rng(0).standard_normal((1, 2, 4, 5)).astype(np.float32)


def _model(op, x, opset, constants=(), n_outputs=1, **attrs):
    """One `op` node reading graph input `x` then `constants` (initializers), in that order."""
    names = {f"c{i}": np.asarray(c) for i, c in enumerate(constants)}
    return node_model(op, {"x": x, **names}, opset=opset, n_outputs=n_outputs, initializers=names, **attrs)


def _check(op, x, opset, constants=(), n_outputs=1, atol=1e-5, **attrs):
    """jaxport against onnxruntime on one `op` node (see `_model`)."""
    assert_same(*run_both(_model(op, x, opset, constants, n_outputs, **attrs), {"x": x}), atol=atol)


def _check_exact_against_spec(op, x, opset, constants=(), **attrs):
    """jaxport against the ONNX specification's own arithmetic (`run_spec`), value for value: the
    reference for quantized ops, whose onnxruntime kernels round differently on different CPUs."""
    model = _model(op, x, opset, constants, **attrs)
    expected = run_spec(model, {"x": x})
    actual = jaxport.from_onnx(model)(x)
    assert_same([actual], expected, rtol=0, atol=0)


@pytest.mark.usefixtures("x64_strict")
@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_legacy_upsample_and_resize(mode):
    _check("Upsample", _x, 7, mode=mode, scales=[1.0, 1.0, 2.0, 1.5])
    _check("Upsample", _x, 9, [np.array([1, 1, 2, 2.5], np.float32)], mode=mode)
    # Resize-10 shrinks too: onnxruntime rounds nearest source pixels up when shrinking.
    _check("Resize", _x, 10, [np.array([1, 1, 0.6, 0.5], np.float32)], mode=mode)
    _check("Resize", _x, 10, [np.array([1, 1, 1.7, 2.5], np.float32)], mode=mode)


@pytest.mark.usefixtures("x64_strict")
@pytest.mark.parametrize("mode", ["bilinear", "nearest", "bicubic"])
@pytest.mark.parametrize("padding_mode", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align_corners", [0, 1])
def test_grid_sample_16_matches_onnxruntime(rng, mode, padding_mode, align_corners):
    # The grid reaches past the borders, where the padding modes differ.
    grid = (rng.random((1, 3, 4, 2)) * 2.6 - 1.3).astype(np.float32)
    _check("GridSample", _x, 16, [grid], mode=mode, padding_mode=padding_mode,
           align_corners=align_corners)


@pytest.mark.usefixtures("x64_strict")
def test_quantize_dequantize_legacy_and_per_axis(rng):
    x = (rng.standard_normal((2, 3, 4)) * 3).astype(np.float32)
    _check("QuantizeLinear", x, 10, [np.float32(0.05), np.uint8(128)])
    _check("QuantizeLinear", x, 13, [np.array([0.05, 0.1, 0.2], np.float32),
                                     np.array([1, -3, 4], np.int8)])
    _check("QuantizeLinear", x, 13, [np.array([0.05, 0.1, 0.2, 0.3], np.float32)], axis=-1)
    q = rng.integers(-128, 127, (2, 3, 4)).astype(np.int8)
    _check("DequantizeLinear", q, 13, [np.array([0.05, 0.1, 0.2], np.float32),
                                       np.array([1, -3, 4], np.int8)])
    _check("DequantizeLinear", q.astype(np.int32), 10, [np.float32(0.05)])


@pytest.mark.usefixtures("x64_strict")
@pytest.mark.parametrize("x", [(np.random.default_rng(1).standard_normal((3, 5)) * 2).astype(np.float32),
                               np.zeros((3,), np.float32), np.full((3,), 2.0, np.float32)])
def test_dynamic_quantize_linear(x):
    _check("DynamicQuantizeLinear", x, 11, (), n_outputs=3)


@pytest.mark.usefixtures("x64_strict")
def test_qlinear_conv_groups_bias_per_channel_and_matmul(rng):
    x = rng.integers(0, 255, (1, 4, 7, 7)).astype(np.uint8)
    w = rng.integers(-100, 100, (6, 2, 3, 3)).astype(np.int8)
    params = [np.float32(0.02), np.uint8(120), w, np.linspace(0.01, 0.02, 6).astype(np.float32),
              np.zeros(6, np.int8), np.float32(0.5), np.uint8(100)]
    bias = rng.integers(-500, 500, 6).astype(np.int32)
    _check_exact_against_spec("QLinearConv", x, 10, [*params, bias], group=2, pads=[1, 0, 1, 2], strides=[2, 1])
    _check_exact_against_spec("QLinearConv", x.astype(np.int8) // 2, 10,
                              [np.float32(0.02), np.int8(12), w, np.float32(0.01), np.int8(0), np.float32(0.5),
                               np.int8(-3)], group=2, auto_pad="SAME_UPPER", strides=[2, 2])
    a = rng.integers(0, 255, (2, 3, 5)).astype(np.uint8)
    b = rng.integers(0, 255, (5, 4)).astype(np.uint8)
    _check_exact_against_spec("QLinearMatMul", a, 10, [np.float32(0.02), np.uint8(120), b, np.float32(0.03),
                                                       np.uint8(100), np.float32(0.3), np.uint8(128)])


@pytest.mark.usefixtures("x64_strict")
def test_dft_17_lengths_and_onesided(rng):
    from jaxport.ops.onnx.signal import dft_17

    x = rng.standard_normal((2, 7, 3, 1)).astype(np.float32)

    def pairs(z):
        return np.stack([z.real, z.imag], -1)

    for n, onesided, axis in [(None, 0, 1), (10, 1, 1), (5, 0, 1), (6, 0, 2)]:
        got = np.asarray(dft_17(x, None if n is None else np.int64(n), axis=axis, onesided=onesided))
        fft = np.fft.rfft if onesided else np.fft.fft
        np.testing.assert_allclose(got, pairs(fft(x[..., 0], n=n, axis=axis)), atol=1e-5)


def _random_model(op, opset=1, x=None, out=TensorProto.FLOAT, **attrs):
    inputs = [] if x is None else [helper.make_tensor_value_info("x", _TYPES[x.dtype], x.shape)]
    graph = helper.make_graph([helper.make_node(op, ["x"] if x is not None else [], ["y"], **attrs)],
                              "g", inputs, [helper.make_tensor_value_info("y", out, None)])
    return jaxport.from_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]))


@pytest.mark.usefixtures("x64_strict")
def test_random_ops_shapes_dtypes_and_seeds():
    y = np.asarray(_random_model("RandomNormal", shape=[300, 40], mean=5.0, scale=0.5)())
    assert y.dtype == np.float32 and y.shape == (300, 40)
    assert abs(y.mean() - 5.0) < 0.05 and abs(y.std() - 0.5) < 0.05
    y = np.asarray(_random_model("RandomUniform", shape=[1000], dtype=TensorProto.DOUBLE,
                                 out=TensorProto.DOUBLE, low=-2.0, high=-1.0)())
    assert y.dtype == np.float64 and y.min() >= -2.0 and y.max() < -1.0
    x = np.zeros((3, 4), np.float64)
    seeded = _random_model("RandomUniformLike", x=x, out=TensorProto.DOUBLE, seed=3.0)
    np.testing.assert_array_equal(np.asarray(seeded(x)), np.asarray(seeded(x)))
    assert np.asarray(seeded(x)).dtype == np.float64
    y = np.asarray(_random_model("RandomNormalLike", x=x, dtype=TensorProto.FLOAT)(x))
    assert y.dtype == np.float32 and y.shape == (3, 4)
    logits = np.array([[np.log(0.1), np.log(0.9), -np.inf], [0, 0, 0]], np.float32)
    y = np.asarray(_random_model("Multinomial", 7, x=logits, out=TensorProto.INT32,
                                 sample_size=3000)(logits))
    assert y.dtype == np.int32 and y.shape == (2, 3000)
    counts = np.bincount(y[0], minlength=3) / 3000
    assert counts[2] == 0 and abs(counts[1] - 0.9) < 0.03
    p = np.full((5000,), 0.3, np.float32)
    y = np.asarray(_random_model("Bernoulli", 15, x=p, out=TensorProto.BOOL,
                                 dtype=TensorProto.BOOL)(p))
    assert y.dtype == np.bool_ and abs(y.mean() - 0.3) < 0.03
