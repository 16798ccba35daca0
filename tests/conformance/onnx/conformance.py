"""ONNX's own node conformance cases (`onnx.backend.test.case.node`) through `from_onnx`.

Each case is a one-op model (or its function expansion) with inputs and expected outputs.
A case passes when every output has the expected dtype and shape and matches within the
case's tolerance, the way ONNX's backend test runner compares. Models whose shapes do not
depend on input values run under `jax.jit`, as `JaxModel.__call__` runs them; the others
run op by op.
"""

from __future__ import annotations

import functools
import re
import warnings

import jax
import numpy as np

import jaxport
from jaxport.errors import UnsupportedOpsError
from tests.conformance.expectations import Failure


@functools.cache
def node_cases() -> dict:
    """{case name: onnx TestCase} for every node case the installed onnx ships."""
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        return {case.name: case for case in collect_testcases(None) if case.kind == "node"}


@functools.cache
def _op_names() -> list[tuple[str, str]]:
    """(snake_case name, op type) of every op the onnx package defines, longest first."""
    import onnx

    names = {}
    for schema in onnx.defs.get_all_schemas_with_history():
        snake = re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", schema.name).lower()
        names[snake] = schema.name
    return sorted(names.items(), key=lambda item: -len(item[0]))


def op_under_test(case) -> str:
    """The op a case tests: its single node's op, or for a multi-node case (an expanded
    function, a model around one op) the op its name starts with."""
    nodes = case.model.graph.node
    if len(nodes) == 1:
        return nodes[0].op_type
    name = case.name.removeprefix("test_")
    for snake, op in _op_names():
        if name == snake or name.startswith(snake + "_"):
            return op
    return nodes[-1].op_type


class Mismatch(AssertionError):
    """A case ran, and an output differs from the expected one (its kind, type, dtype, shape or
    values): the comparison's own failure, told apart from an error raised on the way."""


def _check(condition: bool, message: str) -> None:
    if not condition:
        raise Mismatch(message)


def failure(error: BaseException) -> Failure:
    """What a case's exception says of its failure (`expectations.Failure`): a "mismatch" from the
    comparison, "missing" ops from conversion, else an "error:<ExceptionName>"."""
    kind = ("mismatch" if isinstance(error, Mismatch) else "missing" if isinstance(error, UnsupportedOpsError)
            else f"error:{type(error).__name__}")
    detail = f"{type(error).__name__}: {error}".strip().splitlines()
    return Failure(kind, " ".join(line.strip() for line in detail if line.strip())[:400])


def _compare(actual, expected, rtol: float, atol: float, where: str) -> None:
    if isinstance(expected, (list, tuple)):
        _check(isinstance(actual, (list, tuple)), f"{where}: expected a sequence, got {type(actual).__name__}")
        _check(len(actual) == len(expected), f"{where}: sequence of {len(actual)}, expected {len(expected)}")
        for i, (a, e) in enumerate(zip(actual, expected)):
            _compare(a, e, rtol, atol, f"{where}[{i}]")
        return
    if expected is None:
        _check(actual is None, f"{where}: expected an empty optional, got {type(actual).__name__}")
        return
    actual = np.asarray(actual)
    expected = np.asarray(expected)
    _check(actual.shape == expected.shape, f"{where}: shape {actual.shape}, expected {expected.shape}")
    _check(actual.dtype == expected.dtype, f"{where}: dtype {actual.dtype}, expected {expected.dtype}")
    if actual.dtype.name == "bfloat16":
        rtol = max(rtol, 2**-6)
    if actual.dtype.kind not in "biufc":
        actual, expected = actual.astype(np.float32), expected.astype(np.float32)
    try:
        np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol, err_msg=where)
    except AssertionError as e:
        raise Mismatch(str(e)) from None


def _as_values(data):
    """A case's inputs/outputs with TensorProtos (the Cast cases store them so) as arrays."""
    from onnx import TensorProto, numpy_helper

    if isinstance(data, TensorProto):
        return numpy_helper.to_array(data)
    if isinstance(data, (list, tuple)):
        return type(data)(_as_values(d) for d in data)
    return data


def run_case(case) -> str:
    """Run one case; raises `Mismatch` where an output differs, whatever conversion or the run
    raises where they fail (`failure` tells which). Returns how it ran: "jit" or "op by op"."""
    model = jaxport.from_onnx(case.model)
    model.strict = True
    mode = "jit" if model.jittable else "op by op"
    for inputs, expected in case.data_sets:
        inputs, expected = _as_values(list(inputs)), _as_values(list(expected))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            outputs = model(*inputs)
        outputs = list(outputs) if len(expected) > 1 else [outputs]
        _check(len(outputs) == len(expected), f"{len(outputs)} outputs, expected {len(expected)}")
        for name, actual, want in zip(model.output_names, outputs, expected):
            actual = jax.tree_util.tree_map(np.asarray, actual)
            _compare(actual, want, case.rtol, case.atol, f"output '{name}'")
    return mode
