"""The public surface: outputs mirror torch structures, params avoid copies, the 64-bit policy."""

from __future__ import annotations

import warnings

import jax
import numpy as np
import pytest
import torch

import jaxport
from jaxport import dtypes


class Structured(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 3)
        self.register_buffer("offset", torch.ones(3))

    def forward(self, x, *, y):
        h = self.lin(x) + self.offset
        return {"h": h, "pair": (h * 2, [y + 1])}


def test_outputs_mirror_torch_structure():
    x, y = torch.randn(2, 4), torch.randn(5)
    module = Structured()
    model = jaxport.from_torch(module, (x,), {"y": y})
    out = model(x, y=y)
    expected = module(x, y=y)
    assert set(out) == {"h", "pair"} and isinstance(out["pair"], tuple) and isinstance(out["pair"][1], list)
    # float32 sums may round differently (a few ulps) from PyTorch's, whose kernel choice varies.
    np.testing.assert_allclose(np.asarray(out["pair"][0]), expected["pair"][0].detach().numpy(), rtol=1e-5, atol=1e-6)
    assert set(model.params) == {"lin.weight", "lin.bias", "offset"}


@pytest.fixture
def torch_matmul_precision():
    """Sets torch's float32 matmul precision for one test, then restores it."""
    before = torch.get_float32_matmul_precision()
    yield torch.set_float32_matmul_precision
    torch.set_float32_matmul_precision(before)


@pytest.mark.parametrize("torch_setting, traced", [
    ("highest", "Precision.HIGHEST"), ("high", "Precision.HIGH"), ("medium", "Precision.DEFAULT")])
def test_float32_products_follow_torchs_matmul_precision(torch_matmul_precision, torch_setting, traced):
    # JAX's default would be TF32 on NVIDIA GPUs where PyTorch computes full float32.
    torch_matmul_precision(torch_setting)
    module, x = torch.nn.Linear(4, 3), torch.randn(2, 4)
    model = jaxport.from_torch(module, (x,))
    torch_matmul_precision("highest")  # the setting at conversion time counts
    assert f"precision=({traced}, {traced})" in str(jax.make_jaxpr(model.apply)(model.params, jaxport.interop.to_jax(x)))
    torch_matmul_precision(torch_setting)  # eager code follows the setting of the moment
    eager = jax.make_jaxpr(jaxport.interop.jax_fn(lambda a, b: a @ b))(jaxport.interop.to_jax(x), jaxport.interop.to_jax(x.T))
    assert f"precision=({traced}, {traced})" in str(eager)


def test_onnx_float32_products_are_full_precision():
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("MatMul", ["a", "b"], ["c"])], "g",
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 2]) for n in "ab"],
                              [helper.make_tensor_value_info("c", TensorProto.FLOAT, [2, 2])])
    model = jaxport.from_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    a = np.eye(2, dtype=np.float32)
    assert "Precision.HIGHEST" in str(jax.make_jaxpr(model.apply)(model.params, a, a))


def test_frozen_model_folds_todays_params_and_keeps_the_call_signature():
    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                                 torch.nn.Conv2d(8, 4, 3, groups=4)).eval()
    x = torch.randn(2, 3, 10, 10)
    model = jaxport.from_torch(module, (x,))
    frozen = model.frozen()
    expected = module(x).detach().numpy()
    np.testing.assert_allclose(np.asarray(frozen(x)), expected, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(np.asarray(frozen(x)), np.asarray(model(x)), rtol=1e-5, atol=1e-6)
    model.params = {name: value * 0 for name, value in model.params.items()}
    np.testing.assert_allclose(np.asarray(frozen(x)), expected, rtol=1e-4, atol=1e-5)  # folded when frozen
    assert not np.asarray(model(x)).any()
    structured = jaxport.from_torch(Structured(), (torch.randn(2, 4),), {"y": torch.randn(5)}).frozen()
    assert set(structured(torch.randn(2, 4), y=torch.randn(5))) == {"h", "pair"}
    with pytest.raises(jaxport.InputError):
        frozen(torch.randn(2, 4, 10, 10))


def test_params_are_zero_copy_where_dlpack_allows():
    weight = torch.randn(64, 64)
    array = jaxport.interop.to_jax(weight)
    assert array.unsafe_buffer_pointer() == weight.data_ptr()
    back = jaxport.interop.to_torch(array)
    assert back.data_ptr() == weight.data_ptr()


def test_bfloat16_and_bool_round_trip():
    for t in [torch.randn(3, 2).to(torch.bfloat16), torch.tensor([True, False])]:
        a = jaxport.interop.to_jax(t)
        assert a.dtype == dtypes.numpy_dtype(t.dtype)
        assert torch.equal(jaxport.interop.to_torch(a), t)


class Doubles(torch.nn.Module):
    def forward(self, x):
        return x * 2


def test_float64_narrowing_warns_once_without_x64(monkeypatch):
    if jax.config.jax_enable_x64:
        pytest.skip("x64 on")
    monkeypatch.setattr(dtypes, "_warned_narrowing", set())
    x = torch.randn(3, dtype=torch.float64)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = jaxport.from_torch(Doubles(), (x,))
        out = model(x)
        model(x)
    narrowing = [w for w in caught if "x64 mode is off" in str(w.message)]
    assert len(narrowing) == 1
    assert out.dtype == np.float32


def test_int64_inputs_are_int32_without_x64():
    if jax.config.jax_enable_x64:
        pytest.skip("x64 on")
    ids = torch.arange(4)
    model = jaxport.from_torch(Doubles(), (ids,))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # int64 values that fit in int32 narrow silently
        out = model(ids)
    assert out.dtype == np.int32
    np.testing.assert_array_equal(np.asarray(out), (ids * 2).numpy())


def test_uint64_values_are_range_checked_without_x64():
    """PyTorch has no min/max for uint64 (a CUDA flash-attention backward graph takes its seeds as
    uint64): the range check reads the values as int64, the top half as what they are."""
    if jax.config.jax_enable_x64:
        pytest.skip("x64 on")
    fits = torch.tensor([1, 2**32 - 1], dtype=torch.uint64)
    assert jaxport.interop.to_jax(fits).tolist() == [1, 2**32 - 1]
    for value in (2**32, 2**63 + 5):
        with pytest.raises(jaxport.InputError, match=f"holds {value} "):
            jaxport.from_torch(Doubles(), (fits,))(torch.tensor([1, value], dtype=torch.uint64))


def test_x64_mode_keeps_exact_dtypes():
    with jax.enable_x64(True):
        x = torch.randn(3, dtype=torch.float64)
        ids = torch.arange(3)
        model = jaxport.from_torch(Doubles(), (x,))
        assert model(x).dtype == np.float64
        assert jaxport.from_torch(Doubles(), (ids,))(ids).dtype == np.int64


def test_dynamic_batch():
    module = Structured()
    x, y = torch.randn(2, 4), torch.randn(5)
    batch = torch.export.Dim("batch")
    model = jaxport.from_torch(module, (x,), {"y": y}, dynamic_shapes={"x": {0: batch}, "y": None})
    x7 = torch.randn(7, 4)
    np.testing.assert_allclose(np.asarray(model(x7, y=y)["h"]), module(x7, y=y)["h"].detach().numpy(),
                               rtol=1e-5, atol=1e-6)


def test_a_size_past_the_exported_range_is_refused_by_name():
    """torch.export keeps a program valid over a range of each symbolic size (a `Dim`'s bounds,
    or narrower where it unrolled a loop for the example's size): a size past its largest is
    refused by name, not computed."""
    rows = torch.export.Dim("rows", min=2, max=4)
    module = Structured()
    y = torch.randn(5)
    model = jaxport.from_torch(module, (torch.randn(3, 4),), {"y": y}, dynamic_shapes={"x": {0: rows}, "y": None})
    x = torch.randn(4, 4)
    np.testing.assert_allclose(np.asarray(model(x, y=y)["h"]), module(x, y=y)["h"].detach().numpy(),
                               rtol=1e-5, atol=1e-6)
    with pytest.raises(jaxport.InputError, match=r"input 'x' has size 5 in dim 0, but the model was exported for "
                       r"at most 4 there"):
        model(torch.randn(5, 4), y=y)


def test_scalar_constants_do_not_cross_x64_modes():
    """A jitted model must not reuse arrays made under the other x64 mode (a cache of scalar
    constants once did, and XLA then expected an argument that was never passed)."""
    old = jax.config.jax_enable_x64
    try:
        for x64, dtype in ((True, torch.float32), (True, torch.float64), (False, torch.float32)):
            jax.config.update("jax_enable_x64", x64)
            model = jaxport.from_torch(Doubles(), (torch.randn(3, dtype=dtype),))
            for _ in range(2):
                out = model(torch.ones(3, dtype=dtype))
            np.testing.assert_allclose(np.asarray(out), Doubles()(torch.ones(3, dtype=dtype)).numpy())
    finally:
        jax.config.update("jax_enable_x64", old)


class LastDimRuns(torch.nn.Module):
    def forward(self, x):
        values, inverse, counts = torch.unique_consecutive(x, return_inverse=True, return_counts=True, dim=-1)
        return values, inverse, counts


def test_unique_consecutive_last_dim_despite_torchs_recorded_shape():
    # torch 2.13 records float32[2, 3, ?, 2, 3, 4] for these values (its fake kernel does not
    # normalize dim=-1); the frontend puts the spec right, so the shape check passes.
    x = torch.tensor([[[1.0, 1, 2, 2], [0, 0, 5, 5], [3, 3, 3, 3]]] * 2)
    model = jaxport.from_torch(LastDimRuns(), (x,))
    for got, want in zip(model(x), LastDimRuns()(x), strict=True):
        np.testing.assert_array_equal(np.asarray(got), want.numpy())
