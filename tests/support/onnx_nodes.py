"""One-node ONNX models for the op tests, run through jaxport and onnxruntime and compared."""

from __future__ import annotations

from collections.abc import Collection, Mapping

import numpy as np
import onnx
from onnx import helper, numpy_helper

import jaxport
from tests.support.numeric import assert_close


def node_model(op: str, inputs: Mapping[str, np.ndarray | None], *, opset: int, n_outputs: int = 1,
               initializers: Collection[str] = (), domain: str = "", **attrs) -> onnx.ModelProto:
    """A model of one `op` node reading `inputs` (name -> array, in the node's input order; None
    leaves an optional input out), those named in `initializers` given as initializers and the
    rest as graph inputs. Its outputs y0, y1, ... take the types ONNX's shape inference gives
    them, or stay untyped (custom domains). A non-default `domain` is imported at `opset`, the
    default one at 17."""
    names = [name if value is not None else "" for name, value in inputs.items()]
    outputs = [f"y{i}" for i in range(n_outputs)]
    graph = helper.make_graph(
        [helper.make_node(op, names, outputs, domain=domain or None, **attrs)], "g",
        [helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(value.dtype), value.shape)
         for name, value in inputs.items() if value is not None and name not in initializers],
        [onnx.ValueInfoProto(name=name) for name in outputs],
        initializer=[numpy_helper.from_array(np.asarray(inputs[name]), name) for name in initializers])
    opsets = [helper.make_opsetid("", opset if not domain else 17)]
    if domain:
        opsets.append(helper.make_opsetid(domain, opset))
    model = helper.make_model(graph, opset_imports=opsets, ir_version=8)
    try:
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
        types = {v.name: v.type for v in inferred.graph.value_info}
    except onnx.shape_inference.InferenceError:
        types = {}
    for out in model.graph.output:
        if out.name in types:
            out.type.CopyFrom(types[out.name])
    return model


def graph_inputs(model: onnx.ModelProto, inputs: Mapping[str, np.ndarray | None]) -> dict[str, np.ndarray]:
    """The values of `model`'s graph inputs (those not given as initializers), by name."""
    declared = {v.name for v in model.graph.input}
    return {name: value for name, value in inputs.items() if name in declared}


def run_both(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray], *, jittable: bool | None = None):
    """(jaxport's outputs, onnxruntime's outputs), each a list; `jittable`, if given, is what
    the converted model must say about itself."""
    import onnxruntime

    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    expected = session.run(None, dict(feeds))
    converted = jaxport.from_onnx(model)
    if jittable is not None:
        assert converted.jittable == jittable
    actual = converted(*feeds.values())
    return ([actual] if len(expected) == 1 else list(actual)), expected


def run_spec(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    """`model` computed as the ONNX specification defines it, by the `onnx` package's own NumPy
    reference implementation. For quantized ops this is the reference: onnxruntime's integer
    kernels differ by CPU (its AVX2 u8s8 convolutions saturate pairwise sums in int16), the
    specification's arithmetic (accumulate in int32, requantize, round half to even) does not."""
    from onnx.reference import ReferenceEvaluator

    return list(ReferenceEvaluator(model).run(None, dict(feeds)))


def assert_same(actual, expected, *, rtol: float = 1e-5, atol: float = 1e-6) -> None:
    """Exactly the dtype and shape of onnxruntime's outputs, values within
    `atol + rtol * |expected|` (in float64, by `jaxport.compare`; NaN and infinities in the same places)."""
    assert len(actual) == len(expected), (len(actual), len(expected))
    for i, (a, e) in enumerate(zip(actual, expected)):
        a = np.asarray(a)
        assert a.dtype == e.dtype and a.shape == e.shape, (a.dtype, a.shape, e.dtype, e.shape)
        assert_close(a, e, rtol=rtol, atol=atol, check_dtype=False, name=f"output {i}")
