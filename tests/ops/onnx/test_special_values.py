"""NaN, ±inf, ±0.0, subnormals and float32's extremes through every ONNX elementwise and
reduction op, compared with onnxruntime: NaN in the same places, the same infinities, zeros of the
same sign, other values to float32 rounding.

The ops are a table (`OPS`), each entry one case; binary ops see every pair of special values.
Subnormals: XLA on CPU flushes subnormal results to zero (and may read subnormal operands as
zero) where onnxruntime keeps them, so onnxruntime reads the inputs with subnormals flushed to a
zero of their sign, and both outputs are compared with subnormals flushed likewise. Where
onnxruntime disagrees with the ONNX spec or depends on the platform, the case is listed as
"special_values:<case>" in its op family's `tests/conformance/onnx/xfails/<family>.py`, with the
reason and the cause: each difference found must be of that cause (for the ties of signed zeros,
a zero against a zero), or the case fails.
"""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import jaxport
from tests.conformance.expectations import Failure, judge
from tests.conformance.onnx import conformance
from tests.conformance.onnx.expected_failures import expected_failure

pytestmark = pytest.mark.usefixtures("x64_strict")

F32 = np.finfo(np.float32)
#: The values every op sees: NaN, infinities, signed zeros, subnormals, the extremes, and a few
#: ordinary values (halves, for Round's ties) so that comparisons and reductions have company.
SPECIALS = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, F32.smallest_subnormal, -1e-40, F32.tiny, -F32.tiny,
                     F32.max, -F32.max, 1.0, -1.0, 0.5, -2.5, 3.0, 1e-3, -100.0], np.float32)
#: The fewer values reductions see three at a time: every combination without NaN (8**3 rows), and
#: apart (the `_nan` cases, where onnxruntime's comparisons differ) every one with NaN.
REDUCED = np.array([np.inf, -np.inf, 0.0, -0.0, F32.max, -F32.max, 1.0, -2.5], np.float32)
OPSET = 20


@dataclasses.dataclass(frozen=True)
class Op:
    """One case: `op` with `attrs` on inputs of `kind`: "unary" (the special values), "binary"
    (every pair), "ternary" (every pair, and a third: the first rolled, or for Where a
    condition), "reduce" (rows of three of `REDUCED`, reduced along axis 1), "reduce_nan" (the
    rows of three of `REDUCED` and NaN that hold a NaN). `constants`: further inputs, as
    initializers (None: an optional input left out). `outputs`: how many the node has."""

    op: str
    kind: str
    attrs: dict = dataclasses.field(default_factory=dict)
    constants: tuple = ()
    outputs: int = 1
    label: str = ""
    #: Whether the inputs hold subnormals. Not for an op XLA computes on subnormal operands
    #: where it reads other ops' as zero (Pow): judged on flushed inputs, onnxruntime cannot agree.
    subnormals: bool = True

    @property
    def id(self) -> str:
        return self.label or self.op


def _unary(op, **attrs):
    return Op(op, "unary", attrs)


def _binary(op, **attrs):
    return Op(op, "binary", attrs)


AXIS_1 = np.array([1], np.int64)

REDUCTIONS = [
    *[Op(op, "reduce", {"keepdims": 0}, constants=(AXIS_1,)) for op in (
        "ReduceMax", "ReduceMin", "ReduceSum", "ReduceMean", "ReduceProd", "ReduceL1", "ReduceL2",
        "ReduceLogSumExp", "ReduceLogSum", "ReduceSumSquare")],
    *[Op(op, "reduce", {"axis": 1, "keepdims": 0, "select_last_index": last}, label=f"{op}_last{last}")
      for op in ("ArgMax", "ArgMin") for last in (0, 1)],
    Op("TopK", "reduce", {"axis": 1}, constants=(np.array([2], np.int64),), outputs=2, label="TopK"),
    Op("TopK", "reduce", {"axis": 1, "largest": 0}, constants=(np.array([2], np.int64),), outputs=2,
       label="TopK_smallest"),
    *[Op(op, "reduce", {"axis": 1}) for op in ("Softmax", "LogSoftmax", "Hardmax")],
    Op("CumSum", "reduce", constants=(np.array(1, np.int64),), label="CumSum"),
    Op("CumSum", "reduce", {"exclusive": 1, "reverse": 1}, constants=(np.array(1, np.int64),),
       label="CumSum_exclusive_reverse"),
    Op("LpNormalization", "reduce", {"axis": 1, "p": 2}, label="LpNormalization"),
]

OPS = [
    *[_unary(op) for op in (
        "Abs", "Neg", "Sign", "Floor", "Ceil", "Round", "Sqrt", "Log", "Exp", "Reciprocal", "Sigmoid", "Tanh",
        "Softplus", "Softsign", "Relu", "Elu", "Selu", "Celu", "HardSigmoid", "HardSwish", "Erf", "IsNaN", "Mish",
        "Sin", "Cos", "Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh", "Asinh", "Acosh", "Atanh", "Identity",
        "ThresholdedRelu", "Shrink")],
    Op("LeakyRelu", "unary", {"alpha": 0.1}),
    Op("Gelu", "unary", label="Gelu"),
    Op("Gelu", "unary", {"approximate": "tanh"}, label="Gelu_tanh"),
    Op("IsInf", "unary", label="IsInf"),
    Op("IsInf", "unary", {"detect_negative": 0}, label="IsInf_positive"),
    Op("IsInf", "unary", {"detect_positive": 0}, label="IsInf_negative"),
    Op("Shrink", "unary", {"lambd": 1.0, "bias": 0.5}, label="Shrink_bias"),
    Op("Clip", "unary", constants=(np.float32(-1.0), np.float32(1.0)), label="Clip"),
    Op("Clip", "unary", constants=(np.float32(0.0), None), label="Clip_min"),
    Op("Clip", "unary", constants=(None, np.float32(-0.0)), label="Clip_max"),
    Op("Clip", "unary", label="Clip_no_bounds"),
    Op("Cast", "unary", {"to": TensorProto.FLOAT16}, label="Cast_float16"),
    Op("Cast", "unary", {"to": TensorProto.DOUBLE}, label="Cast_double"),
    Op("Cast", "unary", {"to": TensorProto.BOOL}, label="Cast_bool"),
    Op("Dropout", "unary", label="Dropout"),
    *[_binary(op) for op in (
        "Add", "Sub", "Mul", "Div", "Max", "Min", "Sum", "Mean", "Equal", "Less", "Greater", "LessOrEqual",
        "GreaterOrEqual", "PRelu")],
    Op("Pow", "binary", subnormals=False),
    Op("Mod", "binary", {"fmod": 1}, label="Mod_fmod"),
    *[Op(op, "ternary", label=f"{op}_3") for op in ("Max", "Min", "Sum", "Mean")],
    Op("Where", "ternary", label="Where"),
    *[dataclasses.replace(case, kind=kind, label=case.id + suffix)
      for case in REDUCTIONS for kind, suffix in (("reduce", ""), ("reduce_nan", "_nan"))],
]


def _inputs(case: Op) -> list[np.ndarray]:
    specials = SPECIALS if case.subnormals else SPECIALS[(SPECIALS == 0) | ~(np.abs(SPECIALS) < F32.tiny)]
    if case.kind == "unary":
        return [specials]
    pairs = np.array(list(itertools.product(specials, repeat=2)), np.float32)
    if case.kind == "binary":
        return [pairs[:, 0], pairs[:, 1]]
    if case.kind == "ternary":
        if case.op == "Where":
            return [np.arange(len(pairs)) % 3 == 0, pairs[:, 0], pairs[:, 1]]
        return [pairs[:, 0], pairs[:, 1], np.roll(pairs[:, 0], 7)]
    rows = np.array(list(itertools.product(REDUCED if case.kind == "reduce" else [np.nan, *REDUCED], repeat=3)),
                    np.float32)
    return [rows if case.kind == "reduce" else rows[np.isnan(rows).any(axis=1)]]


def _model(case: Op, inputs: list[np.ndarray]) -> onnx.ModelProto:
    names = [f"x{i}" for i in range(len(inputs))]
    initializers = []
    for i, value in enumerate(case.constants):
        if value is None:
            names.append("")
        else:
            names.append(f"c{i}")
            initializers.append(numpy_helper.from_array(np.asarray(value), f"c{i}"))
    outputs = [f"y{i}" for i in range(case.outputs)]
    graph = helper.make_graph(
        [helper.make_node(case.op, names, outputs, name="node", **case.attrs)], "special",
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(x.dtype), x.shape)
         for n, x in zip(names, inputs)],
        [onnx.ValueInfoProto(name=name) for name in outputs], initializer=initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=8)
    return onnx.shape_inference.infer_shapes(model, strict_mode=True)


def _flushed(x: np.ndarray) -> np.ndarray:
    """`x` with subnormal floats replaced by a zero of their sign, as XLA on CPU computes them."""
    x = np.asarray(x)
    if x.dtype.kind != "f":
        return x
    tiny = np.finfo(x.dtype).tiny
    return np.where((x != 0) & (np.abs(x) < tiny), np.copysign(np.zeros_like(x), x), x)


def _differences(got: np.ndarray, want: np.ndarray) -> list[int]:
    """The flat positions where `got` is not `want`: NaN against a number, a different infinity,
    zeros of different signs, or more than float32 rounding apart (relative 1e-5, for the
    transcendental ops; absolute 1e-30 against a zero: `expm1(-1e-38)` is -1e-38 where
    onnxruntime's `exp(x) - 1` is 0)."""
    got, want = _flushed(got).reshape(-1), _flushed(want).reshape(-1)
    if want.dtype.kind != "f":
        return np.flatnonzero(got != want).tolist()
    got, want = got.astype(np.float64), want.astype(np.float64)
    nan = np.isnan(got) | np.isnan(want)
    infinite = np.isinf(got) | np.isinf(want)
    zeros = (got == 0) & (want == 0)
    bad = np.where(nan, np.isnan(got) != np.isnan(want),
                   np.where(infinite, got != want,
                            np.where(zeros, np.signbit(got) != np.signbit(want),
                                     ~np.isclose(got, want, rtol=1e-5, atol=1e-30))))
    return np.flatnonzero(bad).tolist()


@pytest.mark.parametrize("case", OPS, ids=[case.id for case in OPS])
def test_special_values_match_onnxruntime(case: Op):
    import onnxruntime

    inputs = _inputs(case)
    model = _model(case, inputs)
    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    expected = session.run(None, {f"x{i}": _flushed(x) for i, x in enumerate(inputs)})
    key, entry = expected_failure(f"special_values:{case.id}") or (None, None)
    try:
        actual = jaxport.from_onnx(model)(*inputs)
    except Exception as e:  # noqa: BLE001 - an entry may expect this failure: judged by its cause
        if entry is None:
            raise
        judge(key, entry, [conformance.failure(e)])
    actual = [actual] if case.outputs == 1 else list(actual)
    failures = []
    for name, a, e in zip(["y0", "y1"], actual, expected):
        a = np.asarray(a)
        assert a.dtype == e.dtype and a.shape == e.shape, (name, a.dtype, a.shape, e.dtype, e.shape)
        for position in _differences(a, e)[:5]:
            row = position if a.ndim <= 1 else position // int(np.prod(a.shape[1:]))
            given = ", ".join(np.array2string(x[row]) for x in inputs)
            failures.append(Failure("mismatch", f"{name}[{position}] on ({given}): jaxport {a.reshape(-1)[position]!r}, "
                                                f"onnxruntime {e.reshape(-1)[position]!r}"))
    judge(key, entry, failures)
