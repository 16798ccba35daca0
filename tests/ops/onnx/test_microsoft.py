"""onnxruntime's com.microsoft ops, one node each, against onnxruntime's own CPU kernels."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper

import jaxport
from tests.support.onnx_nodes import assert_same, node_model, run_both

_MS = "com.microsoft"
def _run_both(op: str, inputs: dict[str, np.ndarray | None], n_outputs: int, domain: str = _MS, **attrs):
    """Build a one-node model and run it through onnxruntime and jaxport."""
    model = node_model(op, inputs, opset=1, n_outputs=n_outputs, domain=domain, **attrs)
    return run_both(model, {k: v for k, v in inputs.items() if v is not None})


def _check(actual, expected, atol=1e-5):
    assert_same(actual, expected, rtol=1e-5, atol=atol)


def _f(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def test_gelu_family(rng):
    x, b = _f(rng, 2, 3, 8), _f(rng, 8)
    _check(*_run_both("Gelu", {"X": x}, 1))
    _check(*_run_both("BiasGelu", {"A": x, "B": b}, 1))
    _check(*_run_both("FastGelu", {"X": x, "bias": b}, 1))
    _check(*_run_both("FastGelu", {"X": x}, 1))
    _check(*_run_both("QuickGelu", {"X": x}, 1, alpha=1.5))



def test_bias_add(rng):
    # onnxruntime has no CPU kernel for BiasAdd (CUDA only): checked against its definition.
    x, bias, skip = _f(rng, 2, 3, 8), _f(rng, 8), _f(rng, 2, 3, 8)
    node = helper.make_node("BiasAdd", ["X", "bias", "skip"], ["Y"], domain=_MS)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, v.shape)
                                            for n, v in (("X", x), ("bias", bias), ("skip", skip))],
                              [onnx.ValueInfoProto(name="Y")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(_MS, 1)])
    np.testing.assert_allclose(np.asarray(jaxport.from_onnx(model)(x, bias, skip)), x + bias + skip, rtol=1e-6)


@pytest.mark.parametrize("attrs", [{}, {"transA": 1}, {"transB": 1, "alpha": 0.5}])
def test_fused_matmul(rng, attrs):
    a = _f(rng, 2, 8, 4) if attrs.get("transA") else _f(rng, 2, 4, 8)
    b = _f(rng, 2, 6, 8) if attrs.get("transB") else _f(rng, 2, 8, 6)
    _check(*_run_both("FusedMatMul", {"A": a, "B": b}, 1, **attrs))


@pytest.mark.parametrize("with_bias", [False, True])
def test_skip_layer_normalization(rng, with_bias):
    inputs = {"input": _f(rng, 2, 5, 16), "skip": _f(rng, 2, 5, 16), "gamma": _f(rng, 16), "beta": _f(rng, 16),
              "bias": _f(rng, 16) if with_bias else None}
    actual, expected = _run_both("SkipLayerNormalization", inputs, 4, epsilon=1e-5)
    _check(actual, expected)
    simple = {"input": inputs["input"], "skip": inputs["skip"], "gamma": inputs["gamma"], "bias": inputs["bias"]}
    actual, expected = _run_both("SkipSimplifiedLayerNormalization", simple, 4, epsilon=1e-6)
    _check([actual[0], actual[3]], [expected[0], expected[3]])


def test_simplified_layer_normalization(rng):
    actual, expected = _run_both("SimplifiedLayerNormalization", {"X": _f(rng, 2, 5, 16), "scale": _f(rng, 16)}, 1,
                                 domain="", epsilon=1e-6)
    _check(actual, expected)


def test_embed_layer_normalization(rng):
    ids = rng.integers(0, 50, (2, 7)).astype(np.int32)
    segments = rng.integers(0, 2, (2, 7)).astype(np.int32)
    mask = np.ones((2, 7), np.int32)
    mask[1, 4:] = 0
    inputs = {"input_ids": ids, "segment_ids": segments, "word_embedding": _f(rng, 50, 16),
              "position_embedding": _f(rng, 10, 16), "segment_embedding": _f(rng, 2, 16), "gamma": _f(rng, 16),
              "beta": _f(rng, 16), "mask": mask}
    actual, expected = _run_both("EmbedLayerNormalization", inputs, 3, epsilon=1e-12)
    _check(actual, expected)


@pytest.mark.parametrize("mask", ["none", "lengths", "2d", "3d"])
@pytest.mark.parametrize("unidirectional", [0, 1])
def test_attention(rng, mask, unidirectional):
    batch, seq, hidden, heads = 2, 5, 16, 4
    inputs = {"input": _f(rng, batch, seq, hidden), "weights": _f(rng, hidden, 3 * hidden) * 0.3, "bias": _f(rng, 3 * hidden)}
    if mask == "lengths":
        inputs["mask_index"] = np.array([5, 3], np.int32)
    elif mask == "2d":
        inputs["mask_index"] = np.array([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]], np.int32)
    elif mask == "3d":
        inputs["mask_index"] = (rng.random((batch, seq, seq)) < 0.8).astype(np.int32)
    actual, expected = _run_both("Attention", inputs, 1, num_heads=heads, unidirectional=unidirectional)
    _check(actual, expected, atol=1e-4)


@pytest.mark.parametrize("padding", [False, True])
def test_multi_head_attention(rng, padding):
    batch, q_len, kv_len, hidden, heads = 2, 4, 6, 16, 4
    inputs = {"query": _f(rng, batch, q_len, hidden), "key": _f(rng, batch, kv_len, hidden), "value": _f(rng, batch, kv_len, hidden),
              "bias": _f(rng, 3 * hidden)}
    if padding:
        inputs["key_padding_mask"] = np.array([[1] * 6, [1, 1, 1, 1, 0, 0]], np.int32)
    actual, expected = _run_both("MultiHeadAttention", inputs, 1, num_heads=heads)
    _check(actual, expected, atol=1e-4)


def test_optimized_bert_graph_matches_onnxruntime(tmp_path):
    """A real transformer graph fused by onnxruntime's optimizer (SkipLayerNormalization, BiasGelu)."""
    import warnings

    import torch
    from onnxruntime.transformers import optimizer

    from tests.support import zoo

    module, args, kwargs = zoo.bert()
    path, fused = str(tmp_path / "bert.onnx"), str(tmp_path / "bert_fused.onnx")
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, args, kwargs=kwargs, dynamo=True, verbose=False).save(path)
        optimizer.optimize_model(path, model_type="bert", num_heads=4, hidden_size=64).save_model_to_file(fused)
    ops = {(n.domain, n.op_type) for n in onnx.load(fused).graph.node}
    assert (_MS, "SkipLayerNormalization") in ops
    feeds = {k: v.numpy() for k, v in kwargs.items()}
    expected = onnxruntime.InferenceSession(fused, providers=["CPUExecutionProvider"]).run(None, feeds)
    actual = jaxport.from_onnx(fused)(**feeds)
    for a, e in zip(actual, expected):
        assert np.abs(np.asarray(a) - e).max() <= 1e-4
