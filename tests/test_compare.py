"""`jaxport.compare`, the one output comparator: what "matches" means for verify, the catalogue,
the benchmarks and the tests."""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np
import pytest
import torch

from jaxport.compare import compare, compare_all, first_output


def test_close_values_pass_and_report_their_errors():
    check = compare("y", np.array([1.0, 2.0, -4.0], np.float32), np.array([1.0, 2.0001, -4.0], np.float32))
    assert check.passed and check.problem == ""
    assert check.max_abs == pytest.approx(1e-4, rel=1e-2)
    assert check.max_rel == pytest.approx(5e-5, rel=1e-2)
    assert check.scale == 4.0 and check.scaled_error == pytest.approx(2.5e-5, rel=1e-2)


def test_values_beyond_tolerance_fail():
    check = compare("y", np.array([1.0, 2.1], np.float32), np.array([1.0, 2.0], np.float32), rtol=1e-3, atol=0)
    assert not check.passed and check.problem == ""


@pytest.mark.parametrize(("actual", "expected", "problem"), [
    ([math.nan, 1.0], [math.nan, 1.0], ""),
    ([math.nan, 1.0], [0.0, 1.0], "NaN at 1 place(s)"),
    ([1.0, 1.0], [math.nan, 1.0], "NaN at 1 place(s)"),
    ([math.inf, -math.inf], [math.inf, -math.inf], ""),
    ([math.inf, 1.0], [-math.inf, 1.0], "infinity differs at 1 place(s)"),
    ([math.inf, 1.0], [3e38, 1.0], "infinity differs at 1 place(s)"),
])
def test_nan_and_infinities_must_sit_in_the_same_places(actual, expected, problem):
    check = compare("y", np.array(actual, np.float32), np.array(expected, np.float32))
    assert check.passed == (problem == "")
    assert check.problem.startswith(problem)


def test_complex_values_are_judged_part_by_part():
    a = np.array([complex(math.inf, math.nan), 1 + 2j], np.complex64)
    assert compare("z", a, a.copy()).passed
    other = np.array([complex(math.inf, 0.0), 1 + 2j], np.complex64)
    assert compare("z", a, other).problem.startswith("NaN at 1 place(s)")


def test_shape_and_dtype_are_checked():
    assert compare("y", np.zeros((2, 3), np.float32), np.zeros((3, 2), np.float32)).problem == \
        "shape (2, 3), reference (3, 2)"
    check = compare("y", np.zeros(3, np.float16), np.zeros(3, np.float32))
    assert not check.passed and "dtype float16" in check.problem
    # the reference's dtype as JAX stores it (int64 as int32 with x64 off) is what must come out
    assert compare("i", np.zeros(3, np.int32), np.zeros(3, np.int64)).passed
    # a Python number (a size a model returns) has no dtype of its own to compare
    assert compare("n", 3, np.int64(3)).passed


def test_per_tensor_tolerance_scales_by_the_largest_magnitude():
    expected = np.array([1e-6, 100.0], np.float32)
    actual = np.array([2e-6, 100.0], np.float32)  # 100% off on the tiny element
    assert not compare("y", actual, expected, rtol=1e-4, atol=0).passed
    assert compare("y", actual, expected, rtol=1e-4, atol=0, per_tensor=True).passed


def test_torch_jax_and_numpy_values_compare_alike():
    values = [0.5, -1.25, 3.0]
    for actual in (torch.tensor(values), jnp.array(values), np.array(values, np.float32)):
        assert compare("y", actual, np.array(values, np.float32)).passed
    bf16 = torch.tensor(values, dtype=torch.bfloat16)
    assert compare("y", jnp.array(values, jnp.bfloat16), bf16).passed


def test_compare_all_names_outputs_and_counts_them():
    checks = compare_all([np.ones(2)], [np.ones(2), np.zeros(1)], names=["a", "b"])
    assert [c.name for c in checks] == ["a", "outputs"]
    assert checks[0].passed and not checks[1].passed and checks[1].problem == "1 outputs, reference 2"


def test_first_output_picks_the_main_tensor():
    x = np.ones(2)
    assert first_output(x) is x
    assert first_output((x, np.zeros(1))) is x
    assert first_output({"logits": x, "past": [np.zeros(1)]}) is x
    assert first_output([{"a": (x,)}]) is x
