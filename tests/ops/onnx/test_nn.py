"""Convolution, pooling, normalization and dropout lowerings on what the conformance cases
miss: legacy opsets (BatchNormalization-7/9, Dropout-7/10, RoiAlign-10), MaxPool's Indices
with storage_order and padding, MaxUnpool with output_shape, ConvTranspose's output_shape
with auto_pad, MaxRoiPool, compared with onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
import jaxport  # noqa: E402
from tests.support.onnx_nodes import assert_same, graph_inputs, node_model, run_both  # noqa: E402


def _model(op, inputs, opset, n_outputs, constants, attrs):
    """One `op` node over inputs x0, x1, ... (None: left out); `constants` lists the positions
    given as initializers (concrete when jaxport traces the model)."""
    named = {f"x{i}": a for i, a in enumerate(inputs)}
    return node_model(op, named, opset=opset, n_outputs=n_outputs,
                      initializers=[f"x{i}" for i in constants], **attrs)


def _check(op, inputs, opset, n_outputs=1, constants=(), rtol=1e-5, atol=1e-6, **attrs):
    """Every output against onnxruntime's: same dtype, shape and values."""
    model = _model(op, inputs, opset, n_outputs, constants, attrs)
    feeds = graph_inputs(model, {f"x{i}": a for i, a in enumerate(inputs)})
    assert_same(*run_both(model, feeds), rtol=rtol, atol=atol)


def _randn(rng, *shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


@pytest.mark.usefixtures("x64_strict")
@pytest.mark.parametrize("storage_order", [0, 1])
@pytest.mark.parametrize("attrs", [
    dict(kernel_shape=[3, 3], pads=[1, 0, 1, 2], strides=[2, 1]),
    dict(kernel_shape=[2, 3], ceil_mode=1, strides=[2, 2]),
    dict(kernel_shape=[2, 2], dilations=[2, 1], pads=[1, 1, 0, 0]),
    dict(kernel_shape=[3, 3], auto_pad="SAME_UPPER", strides=[2, 2]),
])
def test_max_pool_indices(rng, storage_order, attrs):
    _check("MaxPool", [_randn(rng, 2, 3, 7, 6)], 12, n_outputs=2, storage_order=storage_order,
           **attrs)


@pytest.mark.usefixtures("x64_strict")
def test_max_pool_indices_3d_and_legacy_single_output(rng):
    _check("MaxPool", [_randn(rng, 1, 2, 5, 4, 6)], 12, n_outputs=2, kernel_shape=[2, 3, 2],
           pads=[1, 0, 1, 0, 1, 0])
    _check("MaxPool", [_randn(rng, 1, 2, 5, 6)], 7, kernel_shape=[2, 2], pads=[1, 1, 1, 1])


@pytest.mark.usefixtures("x64_strict")
def test_max_unpool_output_shape_indexes_the_output(rng):
    x = _randn(rng, 1, 2, 5, 5)
    model = _model("MaxPool", [x], 12, 2, (), dict(kernel_shape=[2, 2], strides=[2, 2]))
    y, idx = ort.InferenceSession(model.SerializeToString(),
                                  providers=["CPUExecutionProvider"]).run(None, {"x0": x})
    _check("MaxUnpool", [y, idx, np.array(x.shape, np.int64)], 11, constants=(2,),
           kernel_shape=[2, 2], strides=[2, 2])


@pytest.mark.usefixtures("x64_strict")
@pytest.mark.parametrize("attrs", [
    dict(kernel_shape=[3, 2], pads=[1, 1, 1, 0], strides=[2, 2], ceil_mode=1,
         count_include_pad=1),
    dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1], count_include_pad=0, ceil_mode=1,
         strides=[2, 2]),
    dict(kernel_shape=[2, 2], auto_pad="SAME_LOWER", count_include_pad=1, strides=[2, 3]),
    dict(kernel_shape=[2, 2], dilations=[2, 2], pads=[1, 1, 1, 1]),
    # kernels longer than the input (EfficientNet's head exports AveragePool(1280, ceil_mode))
    dict(kernel_shape=[1280, 1280], strides=[1280, 1280], ceil_mode=1),
    dict(kernel_shape=[12, 4], pads=[2, 1, 2, 1], strides=[3, 4], ceil_mode=1, count_include_pad=1),
    dict(kernel_shape=[6, 20], dilations=[2, 1], pads=[1, 0, 1, 3], strides=[4, 21], ceil_mode=1),
])
def test_average_pool(rng, attrs):
    _check("AveragePool", [_randn(rng, 2, 3, 7, 8)], 19, **attrs)


@pytest.mark.usefixtures("x64_strict")
def test_lp_pools(rng):
    _check("LpPool", [_randn(rng, 1, 2, 6, 7)], 18, kernel_shape=[3, 2], p=3, pads=[1, 0, 1, 1],
           strides=[2, 2], rtol=1e-4)
    _check("GlobalLpPool", [_randn(rng, 1, 2, 6, 7)], 2, p=1, rtol=1e-5)
    _check("LpPool", [_randn(rng, 1, 2, 6, 7)], 18, kernel_shape=[9, 16], pads=[1, 2, 1, 2],
           strides=[9, 16], ceil_mode=1, rtol=1e-4)


@pytest.mark.usefixtures("x64_strict")
def test_max_pool_with_a_kernel_longer_than_its_input(rng):
    _check("MaxPool", [_randn(rng, 2, 3, 7, 8)], 12, kernel_shape=[11, 3], dilations=[1, 3],
           pads=[2, 1, 2, 1], strides=[12, 2], ceil_mode=1)


@pytest.mark.usefixtures("x64_strict")
@pytest.mark.parametrize("opset", [7, 9, 15])
def test_batch_normalization_inference(rng, opset):
    x, s, b, m = _randn(rng, 2, 3, 4, 5), _randn(rng, 3), _randn(rng, 3), _randn(rng, 3)
    v = np.abs(_randn(rng, 3)) + 0.5
    _check("BatchNormalization", [x, s, b, m, v], opset, epsilon=1e-3)


@pytest.mark.usefixtures("x64_strict")
def test_batch_normalization_training_mode_outputs(rng):
    x, s, b, m = _randn(rng, 4, 3, 5), _randn(rng, 3), _randn(rng, 3), _randn(rng, 3)
    v = np.abs(_randn(rng, 3)) + 0.5
    _check("BatchNormalization", [x, s, b, m, v], 15, n_outputs=3, training_mode=1,
           momentum=0.8, rtol=1e-4)


@pytest.mark.usefixtures("x64_strict")
@pytest.mark.parametrize("opset,mask_dtype", [(7, np.float32), (10, np.bool_), (13, np.bool_)])
def test_dropout_inference_mask(rng, opset, mask_dtype):
    # onnxruntime's Dropout-7/10 kernels leave the mask all zero; ONNX's reference (and
    # Dropout-12 in onnxruntime) give an all-true one, as here.
    x = _randn(rng, 3, 4)
    _check("Dropout", [x], opset)
    y, mask = jaxport.from_onnx(_model("Dropout", [x], opset, 2, (), {}))(x)
    np.testing.assert_array_equal(np.asarray(y), x)
    assert np.asarray(mask).dtype == mask_dtype and np.asarray(mask).all()


@pytest.mark.usefixtures("x64_strict")
def test_dropout_training_draws_a_mask(rng):
    x = _randn(rng, 64, 64) + 5.0
    model = _model("Dropout", [x, np.array(0.25, np.float32), np.array(True)], 13, 2, (1, 2),
                   {})
    y, mask = jaxport.from_onnx(model)(x)
    y, mask = np.asarray(y), np.asarray(mask)
    assert mask.dtype == np.bool_ and 0.65 < mask.mean() < 0.85
    np.testing.assert_allclose(y, np.where(mask, x / 0.75, 0), rtol=1e-6)


@pytest.mark.usefixtures("x64_strict")
@pytest.mark.parametrize("attrs", [
    dict(strides=[2, 2], auto_pad="SAME_UPPER"),
    dict(strides=[2, 2], auto_pad="SAME_LOWER"),
    dict(strides=[2, 3], output_shape=[10, 13]),
    dict(strides=[2, 2], output_padding=[1, 0], pads=[1, 0, 0, 1], dilations=[1, 2]),
    dict(strides=[3, 2], group=2, pads=[0, 1, 2, 0]),
])
def test_conv_transpose(rng, attrs):
    _check("ConvTranspose", [_randn(rng, 1, 4, 5, 6), _randn(rng, 4, 3, 3, 3), _randn(rng, 6 if
           attrs.get("group") else 3)], 11, rtol=1e-4, atol=1e-5, **attrs)


@pytest.mark.usefixtures("x64_strict")
@pytest.mark.parametrize("attrs", [
    dict(auto_pad="SAME_LOWER", strides=[2, 2]),
    dict(group=2, dilations=[2, 1], pads=[2, 1, 0, 1]),
])
def test_conv(rng, attrs):
    w = _randn(rng, 6, 2 if attrs.get("group") else 4, 3, 3)
    _check("Conv", [_randn(rng, 2, 4, 7, 8), w, _randn(rng, 6)], 11, rtol=1e-4, atol=1e-5, **attrs)


@pytest.mark.usefixtures("x64_strict")
def test_conv_integer_zero_points(rng):
    x = rng.integers(0, 255, (1, 2, 5, 5), dtype=np.uint8)
    w = rng.integers(0, 255, (3, 2, 3, 3), dtype=np.uint8)
    _check("ConvInteger", [x, w, np.array(17, np.uint8), np.array(130, np.uint8)], 10,
           pads=[1, 1, 1, 1])


@pytest.mark.usefixtures("x64_strict")
@pytest.mark.parametrize("constant_rois", [False, True])
@pytest.mark.parametrize("opset,attrs", [
    (10, dict(output_height=3, output_width=2, spatial_scale=0.5)),
    (16, dict(output_height=2, output_width=3, sampling_ratio=2, mode="max")),
    (16, dict(output_height=4, output_width=4, coordinate_transformation_mode="half_pixel")),
])
def test_roi_align(rng, opset, attrs, constant_rois):
    x = _randn(rng, 2, 3, 10, 9)
    rois = np.array([[0.0, 0.0, 8.0, 9.0], [1.5, 2.2, 6.1, 4.0], [3.0, 3.0, 3.5, 3.2]],
                    np.float32)
    _check("RoiAlign", [x, rois, np.array([0, 1, 1], np.int64)], opset,
           constants=(1,) if constant_rois else (), rtol=1e-4, atol=1e-5, **attrs)


@pytest.mark.usefixtures("x64_strict")
def test_max_roi_pool(rng):
    rois = np.array([[0, 0.0, 0.0, 6.0, 7.0], [1, 1.4, 2.5, 5.0, 4.0], [0, 3.0, 3.0, 3.0, 3.0]],
                    np.float32)
    _check("MaxRoiPool", [_randn(rng, 2, 3, 10, 9), rois], 1, pooled_shape=[3, 2],
           spatial_scale=1.0)


@pytest.mark.usefixtures("x64_strict")
def test_normalizations(rng):
    x = _randn(rng, 2, 6, 4, 5)
    _check("LRN", [x], 13, size=5, alpha=0.01, beta=0.6, bias=1.5, rtol=1e-4)
    _check("InstanceNormalization", [x, _randn(rng, 6), _randn(rng, 6)], 6, epsilon=1e-3, rtol=1e-4,
           atol=1e-5)
    _check("LpNormalization", [x], 1, axis=1, p=1)
    _check("MeanVarianceNormalization", [x], 13, axes=[1, 3], rtol=1e-4, atol=1e-5)
    _check("LayerNormalization", [x, _randn(rng, 4, 5), _randn(rng, 4, 5)], 17, n_outputs=3, axis=2,
           rtol=1e-4, atol=1e-5)


@pytest.mark.usefixtures("x64_strict")
def test_group_normalization_18_scales_per_group(rng):
    x, scale, bias = _randn(rng, 2, 6, 3, 2), _randn(rng, 3), _randn(rng, 3)
    got = jaxport.from_onnx(_model("GroupNormalization", [x, scale, bias], 18, 1, (),
                                   dict(num_groups=3)))(x, scale, bias)
    g = x.reshape(2, 3, -1)
    want = (g - g.mean(-1, keepdims=True)) / np.sqrt(g.var(-1, keepdims=True) + 1e-5)
    want = want.reshape(x.shape) * np.repeat(scale, 2)[:, None, None]
    want = want + np.repeat(bias, 2)[:, None, None]
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-4, atol=1e-5)


@pytest.mark.usefixtures("x64_strict")
def test_deform_conv_strides_pads_dilations_without_mask(rng):
    x, w, offset = _randn(rng, 1, 2, 8, 7), _randn(rng, 3, 2, 2, 3), 2 * _randn(rng, 1, 2 * 6, 4, 2)
    _check("DeformConv", [x, w, offset], 19, strides=[2, 2], pads=[1, 0, 0, 1],
           dilations=[1, 2], rtol=1e-4, atol=1e-5)
