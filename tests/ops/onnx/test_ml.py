"""ai.onnx.ml ops and TfIdfVectorizer on what the conformance cases miss (those run strings or a
single configuration): numeric LabelEncoder (v2 lists, v4 tensors, NaN keys), every
TreeEnsemble mode, aggregate and post_transform, TfIdfVectorizer's IDF/TFIDF weighting, and
1-D ArrayFeatureExtractor. Compared with onnxruntime; calling the model runs it under jax.jit."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import jaxport  # noqa: E402
from tests.support.onnx_nodes import assert_same  # noqa: E402

_TYPES = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.float64): TensorProto.DOUBLE,
          np.dtype(np.int32): TensorProto.INT32, np.dtype(np.int64): TensorProto.INT64,
          np.dtype(np.int16): TensorProto.INT16}


def _check(op, x, out_type, *, domain="ai.onnx.ml", opset=None, atol=1e-5, **attrs):
    opsets = [helper.make_opsetid("", 21)]
    if domain:
        opsets.append(helper.make_opsetid(domain, opset))
    graph = helper.make_graph(
        [helper.make_node(op, ["x"], ["y"], domain=domain, **attrs)], "g",
        [helper.make_tensor_value_info("x", _TYPES[x.dtype], x.shape)],
        [helper.make_tensor_value_info("y", out_type, None)])
    model = helper.make_model(graph, opset_imports=opsets, ir_version=9)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (want,) = session.run(None, {"x": x})
    got = np.asarray(jaxport.from_onnx(model)(x))
    assert_same([got], [want], rtol=1e-5, atol=atol)


@pytest.mark.usefixtures("x64_strict")
def test_label_encoder_numeric():
    x = np.array([[1, 5, 3], [7, 3, 2]], np.int64)
    _check("LabelEncoder", x, TensorProto.FLOAT, opset=2, keys_int64s=[3, 1, 7],
           values_floats=[0.5, 1.5, 2.5], default_float=-7.0)
    f = np.array([0.5, 3.0, 2.0, -1.0], np.float32)
    _check("LabelEncoder", f, TensorProto.INT64, opset=2, keys_floats=[2.0, 3.0, 0.5],
           values_int64s=[20, 99, 5])
    _check("LabelEncoder", x, TensorProto.DOUBLE, opset=4,
           keys_tensor=numpy_helper.from_array(np.array([1, 2, 3], np.int64), "k"),
           values_tensor=numpy_helper.from_array(np.array([10, 20, 30], np.float64), "v"),
           default_tensor=numpy_helper.from_array(np.array([-5], np.float64), "d"))


@pytest.mark.usefixtures("x64_strict")
def test_array_feature_extractor_vector():
    x = np.arange(6, dtype=np.float32)
    graph = helper.make_graph(
        [helper.make_node("ArrayFeatureExtractor", ["x", "i"], ["y"], domain="ai.onnx.ml")],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.array([4, 1, 1], np.int64), "i")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21),
                                                    helper.make_opsetid("ai.onnx.ml", 1)])
    got = np.asarray(jaxport.from_onnx(model)(x))
    np.testing.assert_array_equal(got, np.array([[4, 1, 1]], np.float32))


def _forest():
    """Two trees over 3 features and 3 targets using every comparison mode."""
    # tree 0: n0 (f0 LEQ 0.2) -> n1 (f1 MEMBER {1, 2}) / n2 (f2 GT -0.5); n1 -> n3 (f2 EQ 0)
    # tree 1: n4 (f1 LT 0.5) -> n5 (f2 GTE 0) / n6 (f0 NEQ 3); every other branch is a leaf
    nodes = dict(
        featureids=[0, 1, 2, 2, 1, 2, 0],
        modes=[0, 6, 3, 4, 1, 2, 5],
        splits=[0.2, 0.0, -0.5, 0.0, 0.5, 0.0, 3.0],
        truenodeids=[1, 3, 3, 0, 5, 5, 7], trueleafs=[0, 0, 1, 1, 0, 1, 1],
        falsenodeids=[2, 2, 4, 1, 6, 6, 8], falseleafs=[0, 1, 1, 1, 0, 1, 1],
        missing=[1, 0, 0, 1, 0, 1, 0])
    leaves = dict(targetids=[0, 1, 2, 0, 1, 2, 0, 1, 2],
                  weights=[1.0, -2.0, 0.5, 3.0, 1.5, -0.25, 2.0, 0.75, 0.3])
    return nodes, leaves


def _tree_ensemble_model(aggregate, post):
    nodes, leaves = _forest()
    t = numpy_helper.from_array
    node = helper.make_node(
        "TreeEnsemble", ["x"], ["y"], domain="ai.onnx.ml", aggregate_function=aggregate,
        post_transform=post, n_targets=3, tree_roots=[0, 4],
        nodes_featureids=nodes["featureids"],
        nodes_modes=t(np.array(nodes["modes"], np.uint8), "m"),
        nodes_splits=t(np.array(nodes["splits"], np.float32), "s"),
        nodes_truenodeids=nodes["truenodeids"], nodes_trueleafs=nodes["trueleafs"],
        nodes_falsenodeids=nodes["falsenodeids"], nodes_falseleafs=nodes["falseleafs"],
        nodes_missing_value_tracks_true=nodes["missing"],
        membership_values=t(np.array([1.0, 2.0, np.nan], np.float32), "mv"),
        leaf_targetids=leaves["targetids"],
        leaf_weights=t(np.array(leaves["weights"], np.float32), "w"))
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    return helper.make_model(graph, ir_version=9, opset_imports=[
        helper.make_opsetid("", 21), helper.make_opsetid("ai.onnx.ml", 5)])


def _post_transform(scores, post):
    if post == 1:
        e = np.exp(scores - scores.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)
    if post == 2:
        return 1 / (1 + np.exp(-scores))
    if post == 3:
        e = np.where(scores != 0, np.exp(scores - scores.max(-1, keepdims=True)), 0)
        return e / e.sum(-1, keepdims=True)
    return scores


@pytest.mark.usefixtures("x64_strict")
@pytest.mark.parametrize("aggregate", [0, 1, 2, 3])
@pytest.mark.parametrize("post", [0, 1, 2, 3])
def test_tree_ensemble(aggregate, post):
    """Every node mode (NaN inputs too), against onnxruntime's raw scores. The post_transform
    follows the ONNX spec (1 SOFTMAX, 2 LOGISTIC); onnxruntime 1.2x reads 1 and 2 the other
    way round and skips LOGISTIC for one target (onnxruntime issue 26596), so it is checked
    with NumPy."""
    rng = np.random.default_rng(0)
    x = rng.choice([-1.0, 0.0, 0.1, 0.5, 1.0, 2.0, 3.0, np.nan], size=(64, 3)).astype(np.float32)
    raw = _tree_ensemble_model(aggregate, 0)
    session = ort.InferenceSession(raw.SerializeToString(), providers=["CPUExecutionProvider"])
    (want,) = session.run(None, {"x": x})
    want = _post_transform(want.astype(np.float64), post)
    got = np.asarray(jaxport.from_onnx(_tree_ensemble_model(aggregate, post))(x))
    assert got.dtype == np.float32 and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.usefixtures("x64_strict")
@pytest.mark.parametrize("mode", ["TF", "IDF", "TFIDF"])
@pytest.mark.parametrize("shape", [(12,), (3, 8)])
def test_tfidf_vectorizer(mode, shape):
    x = np.random.default_rng(1).integers(0, 5, size=shape).astype(np.int32)
    pool = [0, 1, 2, 3, 4, 0, 1, 2, 2, 1, 3, 3, 4, 0, 1, 2]  # 5 unigrams, 4 bigrams, 1 trigram
    _check("TfIdfVectorizer", x, TensorProto.FLOAT, domain="", mode=mode, min_gram_length=1,
           max_gram_length=3, max_skip_count=2, ngram_counts=[0, 5, 13],
           ngram_indexes=[9, 0, 1, 2, 3, 4, 5, 6, 7, 8],
           pool_int64s=pool, weights=[0.5, 1.0, 2.0, 0.25, 1.5, 3.0, 0.1, 1.0, 2.0, 4.0])


@pytest.mark.usefixtures("x64_strict")
def test_label_encoder_nan_key():
    """The spec's NaN key matches any NaN input (onnxruntime 1.2x gives the default instead)."""
    graph = helper.make_graph(
        [helper.make_node("LabelEncoder", ["x"], ["y"], domain="ai.onnx.ml",
                          keys_floats=[2.0, np.nan, 0.5], values_int64s=[20, 99, 5])],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.INT64, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21),
                                                    helper.make_opsetid("ai.onnx.ml", 4)])
    got = np.asarray(jaxport.from_onnx(model)(np.array([0.5, np.nan, 2.0, -1.0], np.float32)))
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, [5, 99, 20, -1])
