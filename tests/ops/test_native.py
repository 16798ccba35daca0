"""The compiled CPU kernels (`jaxport.ops._native`) against PyTorch and against the portable
formulation they stand in for: values on every geometry the depthwise kernel takes (strides,
dilations, asymmetric padding, channel multipliers, rows narrower than its register blocks,
planes shorter than its row groups, 1-D), every ragged edge of the product kernel's tiles and
of the attention kernel's blocks, special values, derivatives both ways, vmap, and where they
must stay out (other dtypes, weights that are arguments, masks, `portable()`, exported programs).

The kernels are built by `make setup` (`pip install -e .`); these tests fail, not skip, when
they are missing, so a build that silently left them out shows. `JAXPORT_NATIVE=0` turns them
off on purpose, and then the tests that need them skip.
"""

from __future__ import annotations

import functools
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from jax import lax

import jaxport
from jaxport.interop import to_jax
from jaxport.ops import _native, _products
from jaxport.ops._convolution import convolve
from jaxport.ops.aten._grouped import grouped_rows
from tests.support.numeric import assert_close

pytestmark = pytest.mark.skipif(os.environ.get("JAXPORT_NATIVE") == "0", reason="JAXPORT_NATIVE=0")


@pytest.fixture(autouse=True)
def product_kernel():
    """The product kernel wherever it applies, whether or not this CPU measured it faster."""
    with _native.product_kernel(True):
        yield


@pytest.fixture
def everywhere(monkeypatch):
    """The kernel on every depthwise convolution it can take, not only where it pays."""
    monkeypatch.setattr(_native, "KERNEL_TAPS", 1)

GEOMETRIES = [  # input shape, weight shape, strides, padding (low, high), dilation
    pytest.param((2, 8, 11, 9), (8, 1, 3, 3), (1, 1), [(1, 1), (1, 1)], (1, 1), id="3x3"),
    pytest.param((1, 6, 40, 37), (6, 1, 3, 3), (2, 2), [(1, 1), (1, 1)], (1, 1), id="3x3-stride2-wide"),
    pytest.param((1, 4, 30, 35), (4, 1, 5, 5), (3, 2), [(2, 1), (0, 3)], (1, 1), id="5x5-strides-asymmetric-padding"),
    pytest.param((2, 3, 14, 14), (3, 1, 7, 7), (1, 1), [(3, 3), (3, 3)], (1, 1), id="7x7-14px"),
    pytest.param((1, 5, 17, 33), (5, 1, 7, 7), (1, 1), [(3, 3), (3, 3)], (1, 1), id="7x7-row-past-two-blocks"),
    pytest.param((1, 4, 10, 16), (12, 1, 3, 3), (1, 2), [(0, 1), (2, 0)], (2, 1), id="multiplier-dilation"),
    pytest.param((1, 2, 3, 2), (2, 1, 3, 3), (1, 1), [(1, 1), (1, 1)], (1, 1), id="plane-smaller-than-a-block"),
    pytest.param((1, 2, 5, 5), (2, 1, 3, 3), (1, 1), [(4, 4), (5, 5)], (3, 3), id="padding-beyond-the-kernel"),
    pytest.param((1, 3, 5, 7), (3, 1, 5, 7), (1, 1), [(0, 0), (0, 0)], (1, 1), id="kernel-as-large-as-input"),
    pytest.param((2, 5, 37), (5, 1, 9), (2,), [(4, 3)], (2,), id="1d"),
    pytest.param((0, 4, 6, 6), (4, 1, 3, 3), (1, 1), [(1, 1), (1, 1)], (1, 1), id="empty-batch"),
]


def _case(in_shape, w_shape, seed):
    rng = np.random.default_rng(seed)
    return rng.standard_normal(in_shape, np.float32), rng.standard_normal(w_shape, np.float32)


def _convolution(strides, padding, dilation, groups):
    return jax.jit(lambda x, w: convolve(x, w, strides=strides, padding=padding, lhs_dilation=None,
                                         rhs_dilation=dilation, groups=groups))


def _reference(x, w, strides, padding, dilation, groups):
    """PyTorch's convolution of the same geometry (asymmetric padding applied to the input first)."""
    flat = [p for pair in reversed(padding) for p in pair]
    padded = torch.nn.functional.pad(torch.from_numpy(x), flat)
    conv = torch.nn.functional.conv1d if x.ndim == 3 else torch.nn.functional.conv2d
    return conv(padded, torch.from_numpy(w), stride=strides, dilation=dilation, groups=groups).numpy()


def _uses_kernel(fn, *args) -> bool:
    return _native.DEPTHWISE_TARGET in fn.lower(*args).as_text()


def test_the_kernels_are_built():
    assert _native.loaded(), f"{_native.LIBRARY} is missing or does not load: run `make setup` (pip install -e .)"


def test_a_kernel_xla_refuses_leaves_the_portable_formulation_with_a_warning(monkeypatch):
    """A library built against another jaxlib's FFI headers, whose API version this XLA refuses
    (jaxlib 0.8 refuses what 0.10's headers build), is left out with one warning, not an error
    in the middle of a conversion."""
    def refuse(*args, **kwargs):
        raise jax.errors.JaxRuntimeError("INVALID_ARGUMENT: FFI handler registration failed because the "
                                         "handler's API version (0.3) is incompatible with the framework's (0.1)")

    monkeypatch.setattr(jax.ffi, "register_ffi_target", refuse)
    monkeypatch.setattr(jax.ffi, "pycapsule", lambda handler: handler)
    with pytest.warns(RuntimeWarning, match=r"compiled CPU kernels do not load in this jaxlib .* API version"):
        assert not _native._registered({_native.MATMUL_TARGET: object()})


@pytest.mark.parametrize("in_shape, kernel, pays", [
    ((1, 96, 56, 56), 7, True),   # ConvNeXt
    ((1, 768, 7, 7), 7, True),
    ((1, 240, 28, 28), 5, True),  # EfficientNet
    ((1, 1152, 7, 7), 5, False),
    ((1, 32, 112, 112), 3, False),  # MobileNetV2: XLA's fused loop is as fast in the network
    ((1, 144, 56, 56), 3, False),
    ((1, 384, 14, 14), 3, False),
], ids=str)
def test_the_kernel_runs_where_it_pays(in_shape, kernel, pays):
    """Small kernels over small planes stay XLA's fused loop (see `_native.KERNEL_TAPS`)."""
    channels = in_shape[1]
    fn = _convolution((1, 1), [(kernel // 2, kernel // 2)] * 2, (1, 1), channels)
    x, w = jnp.zeros(in_shape, jnp.float32), jnp.zeros((channels, 1, kernel, kernel), jnp.float32)
    assert _uses_kernel(fn, x, w) == pays


@pytest.mark.parametrize("in_shape, w_shape, strides, padding, dilation", GEOMETRIES)
def test_depthwise_kernel_matches_pytorch(everywhere, in_shape, w_shape, strides, padding, dilation):
    x, w = _case(in_shape, w_shape, seed=0)
    groups = in_shape[1]
    fn = _convolution(strides, padding, dilation, groups)
    assert _uses_kernel(fn, x, w)  # an empty batch too: the kernel has nothing to write
    expected = _reference(x, w, strides, padding, dilation, groups)
    assert_close(fn(x, w), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("special", [float("nan"), float("inf"), float("-inf")], ids=str)
def test_depthwise_kernel_special_values(everywhere, special):
    """A NaN or infinity reaches exactly the outputs whose window holds it; an infinite weight
    times padding's zeros is NaN, as in PyTorch. Signed zeros: an output whose products are
    all -0.0 is +0.0 in both (the sum starts from +0.0)."""
    x, w = _case((1, 4, 9, 20), (4, 1, 3, 3), seed=1)
    x[0, 1, 3, 4] = x[0, 2, 0, 0] = x[0, 0, 8, 19] = special
    w[3, 0, 1, 1] = special
    x[0, 0, :3, :3], w[0] = -0.0, np.abs(w[0])
    fn = _convolution((1, 1), [(1, 1), (1, 1)], (1, 1), 4)
    expected = _reference(x, w, (1, 1), [(1, 1), (1, 1)], (1, 1), 4)
    out = np.asarray(fn(x, w))
    assert_close(out, expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(np.signbit(out[0, 0, :2, :2]), np.signbit(expected[0, 0, :2, :2]))


def test_depthwise_kernel_gradients_match_pytorch(everywhere):
    """Reverse mode through the kernel (its tangent is the portable formulation's) against
    PyTorch's autograd, for the input and the weights."""
    x, w = _case((2, 6, 13, 18), (6, 1, 5, 5), seed=2)
    cotangent = np.random.default_rng(3).standard_normal((2, 6, 7, 9), np.float32)
    fn = _convolution((2, 2), [(2, 2), (2, 2)], (1, 1), 6)
    grads = jax.grad(lambda x, w: jnp.sum(fn(x, w) * cotangent), argnums=(0, 1))(x, w)
    tx, tw = torch.from_numpy(x).requires_grad_(), torch.from_numpy(w).requires_grad_()
    (torch.nn.functional.conv2d(tx, tw, stride=2, padding=2, groups=6) * torch.from_numpy(cotangent)).sum().backward()
    assert_close(grads[0], tx.grad.numpy(), rtol=1e-4, atol=1e-4, name="d input")
    assert_close(grads[1], tw.grad.numpy(), rtol=1e-4, atol=1e-4, name="d weight")


def test_depthwise_kernel_forward_mode_and_vmap(everywhere):
    """`jax.jvp` (tangents in both operands, zeros in one, or one operand a constant) equals the portable formulation's, and
    `jax.vmap` over a batch of inputs equals one call per input."""
    x, w = _case((1, 4, 9, 12), (4, 1, 3, 3), seed=4)
    dx, dw = _case((1, 4, 9, 12), (4, 1, 3, 3), seed=5)
    geometry = dict(strides=(1, 1), padding=[(1, 1), (1, 1)], lhs_dilation=None, rhs_dilation=(1, 1), groups=4)

    def kernel(x, w):
        return convolve(x, w, **geometry)

    def portable(x, w):
        with _native.portable():
            return convolve(x, w, **geometry)

    for tangents in [(dx, dw), (dx, np.zeros_like(w)), (np.zeros_like(x), dw)]:
        out, tangent = jax.jit(lambda a, b: jax.jvp(kernel, (x, w), (a, b)))(*tangents)
        expected_out, expected_tangent = jax.jit(lambda a, b: jax.jvp(portable, (x, w), (a, b)))(*tangents)
        assert_close(out, expected_out, rtol=1e-6, atol=1e-6)
        assert_close(tangent, expected_tangent, rtol=1e-5, atol=1e-5)
    only_input = jax.jit(lambda a: jax.jvp(lambda x: kernel(x, w), (x,), (a,)))(dx)[1]
    assert_close(only_input, jax.jit(lambda a: jax.jvp(lambda x: portable(x, w), (x,), (a,)))(dx)[1],
                 rtol=1e-5, atol=1e-5)
    stacked = np.stack([x, dx])
    batched = jax.jit(jax.vmap(kernel, in_axes=(0, None)))(stacked, w)
    assert_close(batched, np.stack([np.asarray(jax.jit(kernel)(s, w)) for s in stacked]), rtol=1e-6, atol=1e-6)


def test_depthwise_kernel_stays_out_where_it_does_not_apply(everywhere):
    """Other dtypes, 3-D convolutions and programs traced inside `portable()` run the portable
    formulation, with no custom call in them."""
    x, w = _case((1, 4, 8, 8), (4, 1, 3, 3), seed=6)
    fn = _convolution((1, 1), [(1, 1), (1, 1)], (1, 1), 4)
    assert _uses_kernel(fn, x, w)
    assert not _uses_kernel(fn, x.astype(np.float16), w.astype(np.float16))
    with _native.portable():
        portable = jax.jit(lambda x, w: convolve(x, w, strides=(1, 1), padding=[(1, 1), (1, 1)],
                                                 lhs_dilation=None, rhs_dilation=(1, 1), groups=4))
        assert not _uses_kernel(portable, x, w)
    x3, w3 = _case((1, 3, 5, 6, 4), (3, 1, 3, 3, 3), seed=7)
    fn3 = jax.jit(lambda x, w: convolve(x, w, strides=(1, 1, 1), padding=[(1, 1)] * 3, lhs_dilation=None,
                                        rhs_dilation=None, groups=3))
    assert not _uses_kernel(fn3, x3, w3)
    general = lax.conv_general_dilated(x3, w3, (1, 1, 1), [(1, 1)] * 3, dimension_numbers=("NCDHW", "OIDHW", "NCDHW"),
                                       feature_group_count=3, precision=lax.Precision.HIGHEST)
    assert_close(fn3(x3, w3), general, rtol=1e-5, atol=1e-5)


# -- products with a constant weight (matmul.cc) -------------------------------------------------


def _constant_product(weight):
    """rows -> rows @ weight.T with `weight` a constant of the traced program, as in a frozen model."""
    return jax.jit(lambda rows: _products.rows_times_weight(rows, weight, np.float32))


@pytest.mark.parametrize("m, k, n", [(1, 64, 64), (7, 300, 130), (133, 513, 65), (6, 256, 16 * 5), (5, 70, 1100),
                                     (600, 100, 70), (0, 64, 64)], ids=str)
@pytest.mark.parametrize("layout", ["out-in", "in-out"])
def test_product_kernel_matches_float64(m, k, n, layout):
    """Rows and columns that fill no whole register tile, rows past one pass (132) and past two
    panels (256 each), depths past one packed block (256), columns past one chunk (512), and no
    rows at all; weights as `aten.linear` ([out, in]) and `aten.mm` ([in, out]) hold them."""
    rng = np.random.default_rng(m + k + n)
    rows, weight = rng.standard_normal((m, k), np.float32), rng.standard_normal((n, k), np.float32)
    if layout == "out-in":
        fn = _constant_product(jnp.asarray(weight))
    else:
        matrix = jnp.asarray(np.ascontiguousarray(weight.T))
        fn = jax.jit(lambda rows: _products.rows_times_matrix(rows, matrix, np.float32))
    assert _native.MATMUL_TARGET in fn.lower(rows).as_text()
    expected = rows.astype(np.float64) @ weight.astype(np.float64).T
    assert_close(fn(rows), expected, rtol=1e-5, atol=1e-4)


def test_product_kernel_special_values():
    """A NaN or infinity in a row reaches exactly that row's outputs (padding never meets it);
    an infinity takes each weight's sign; rows of -0.0 give +0.0, as XLA and PyTorch do."""
    rng = np.random.default_rng(8)
    rows, weight = rng.standard_normal((9, 70), np.float32), np.abs(rng.standard_normal((70, 70), np.float32))
    rows[2, 5], rows[4, 69], rows[8, 0] = np.nan, np.inf, -np.inf
    weight[3, 0] = -1.0
    rows[6] = -0.0
    out = np.asarray(_constant_product(jnp.asarray(weight))(rows))
    expected = np.asarray(torch.nn.functional.linear(torch.from_numpy(rows), torch.from_numpy(weight)))
    np.testing.assert_array_equal(np.isnan(out), np.isnan(expected))
    np.testing.assert_array_equal(np.isposinf(out), np.isposinf(expected))
    np.testing.assert_array_equal(np.isneginf(out), np.isneginf(expected))
    assert np.isnan(out[2]).all() and np.isposinf(out[4]).all()
    assert np.isposinf(out[8, 3]) and np.isneginf(np.delete(out[8], 3)).all()
    np.testing.assert_array_equal(np.signbit(out[6]), np.zeros(70, bool))
    finite = np.isfinite(expected)
    assert_close(out[finite], expected[finite], rtol=1e-5, atol=1e-4)


def test_product_kernel_derivatives_and_vmap():
    """Reverse and forward mode in the rows (the tangent is `dot_general`'s), and `jax.vmap` over
    stacks of rows, equal the portable formulation's."""
    rng = np.random.default_rng(9)
    rows, weight = rng.standard_normal((5, 96), np.float32), jnp.asarray(rng.standard_normal((80, 96), np.float32))
    cotangent = rng.standard_normal((5, 80), np.float32)

    def portable(rows):
        with _native.portable():
            return _products.rows_times_weight(rows, weight, np.float32)

    def kernel(rows):
        return _products.rows_times_weight(rows, weight, np.float32)

    def loss(fn):
        return jax.jit(jax.grad(lambda r: jnp.sum(fn(r) * cotangent)))

    assert_close(loss(kernel)(rows), loss(portable)(rows), rtol=1e-5, atol=1e-4)
    tangent = jax.jit(lambda t: jax.jvp(kernel, (rows,), (t,))[1])(cotangent[:, :1] * rows)
    assert_close(tangent, jax.jit(lambda t: jax.jvp(portable, (rows,), (t,))[1])(cotangent[:, :1] * rows),
                 rtol=1e-5, atol=1e-4)
    stacked = np.stack([rows, -rows])
    assert_close(jax.jit(jax.vmap(kernel))(stacked), jax.jit(jax.vmap(portable))(stacked), rtol=1e-5, atol=1e-4)


def test_product_kernel_only_for_a_constant_float32_weight():
    """A weight passed as an argument (the model's `__call__` and `apply`), other dtypes, small
    weights and programs traced inside `portable()` run `dot_general`."""
    rng = np.random.default_rng(10)
    rows, weight = rng.standard_normal((8, 128), np.float32), jnp.asarray(rng.standard_normal((96, 128), np.float32))
    has_kernel = lambda fn, *args: _native.MATMUL_TARGET in fn.lower(*args).as_text()  # noqa: E731
    assert has_kernel(_constant_product(weight), rows)
    assert not has_kernel(jax.jit(lambda r, w: _products.rows_times_weight(r, w, np.float32)), rows, weight)
    assert not has_kernel(jax.jit(lambda r: _products.rows_times_weight(r, weight.astype(np.float16), np.float16)),
                          rows.astype(np.float16))
    assert not has_kernel(_constant_product(weight[:32]), rows)
    with _native.portable():
        assert not has_kernel(_constant_product(weight), rows)


def test_frozen_models_multiply_on_the_kernel():
    """`frozen()` closes over the parameters, so its linear layers run on the kernel (and match
    PyTorch); calling the model, with the parameters as arguments, does not."""
    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(96, 130), torch.nn.GELU(), torch.nn.Linear(130, 64)).eval()
    x = torch.randn(2, 5, 96)
    model = jaxport.from_torch(module, (x,))
    frozen_text = jax.jit(functools.partial(model._run, dict(model.params))).lower([to_jax(x)], None).as_text()
    called_text = jax.jit(model._run).lower(model.params, [to_jax(x)], None).as_text()
    assert frozen_text.count(_native.MATMUL_TARGET) == 2 and _native.MATMUL_TARGET not in called_text
    assert_close(model.frozen()(x), module(x).detach().numpy(), rtol=1e-5, atol=1e-5)


def _constant_grouped_product(weights):
    """(rows, sizes) -> each group's rows times its weight [k, n], `weights` a constant of the
    traced program, as a frozen mixture of experts holds them."""
    return jax.jit(lambda rows, sizes: grouped_rows(rows, weights, sizes, np.float32))


@pytest.mark.parametrize("sizes", [(5, 0, 140, 1, 300), (0, 0, 0, 0, 0), (2, 3, 1, 0, 2), (600, 0, 0, 0, 40)], ids=str)
def test_grouped_product_kernel_matches_float64(sizes):
    """Groups empty, of one row, past a pass of rows (132) and a panel (256), groups that end
    before the rows do (the rest are zeros), and a last group cut off by the row count."""
    rng = np.random.default_rng(sum(sizes))
    rows, weights = rng.standard_normal((610, 70), np.float32), rng.standard_normal((5, 70, 100), np.float32)
    fn = _constant_grouped_product(jnp.asarray(weights))
    sizes = np.asarray(sizes, np.int32)
    assert _native.GROUPED_MATMUL_TARGET in fn.lower(rows, sizes).as_text()
    groups = np.repeat(np.arange(5), sizes)[:610]
    expected = np.zeros((610, 100))
    expected[:len(groups)] = np.einsum("sk,skn->sn", rows[:len(groups)].astype(np.float64), weights[groups])
    assert_close(fn(rows, sizes), expected, rtol=1e-5, atol=1e-4)


def test_grouped_product_kernel_derivatives_nan_and_where_it_stays_out():
    """A NaN reaches its own row only; reverse mode in the rows equals the portable formulation's,
    and forward mode its product; expert weights passed as arguments, small ones and `portable()`
    leave it out."""
    rng = np.random.default_rng(11)
    rows, weights = rng.standard_normal((40, 64), np.float32), jnp.asarray(rng.standard_normal((3, 64, 80), np.float32))
    sizes = np.asarray([10, 0, 25], np.int32)
    rows[3, 7] = np.nan
    out = np.asarray(_constant_grouped_product(weights)(rows, sizes))
    assert np.isnan(out[3]).all() and not np.isnan(np.delete(out, 3, axis=0)).any()
    assert not out[35:].any()
    rows[3, 7] = 0.0

    def portable(rows):
        with _native.portable():
            return grouped_rows(rows, weights, sizes, np.float32)

    def kernel(rows):
        return grouped_rows(rows, weights, sizes, np.float32)

    cotangent = rng.standard_normal((40, 80), np.float32)
    gradient = [jax.jit(jax.grad(lambda r, f=f: jnp.sum(f(r) * cotangent)))(rows) for f in (kernel, portable)]
    assert_close(gradient[0], gradient[1], rtol=1e-5, atol=1e-4)
    # the product is linear in the rows: its tangent is the product of the tangent (the portable
    # CPU form, a custom_vjp, has no forward mode of its own)
    tangent = jax.jit(lambda t: jax.jvp(kernel, (rows,), (t,))[1])(rows * 0.5)
    assert_close(tangent, jax.jit(portable)(rows * 0.5), rtol=1e-5, atol=1e-4)
    has_kernel = lambda fn, *args: _native.GROUPED_MATMUL_TARGET in fn.lower(*args).as_text()  # noqa: E731
    assert has_kernel(jax.jit(kernel), rows)
    assert not has_kernel(jax.jit(lambda r, w: grouped_rows(r, w, sizes, np.float32)), rows, weights)
    assert not has_kernel(_constant_grouped_product(weights[:, :32]), rows[:, :32], sizes)
    assert not has_kernel(jax.jit(portable), rows)


def test_frozen_mixture_of_experts_multiplies_on_the_grouped_kernel():
    """A frozen Mixtral's experts run on the grouped kernel (one call per expert layer's product)
    and match PyTorch; called with its parameters as arguments, it does not."""
    import transformers

    config = transformers.MixtralConfig(hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                                        num_attention_heads=4, num_key_value_heads=2, num_local_experts=4,
                                        num_experts_per_tok=2, vocab_size=100, use_cache=False)
    torch.manual_seed(4)
    module = transformers.MixtralModel(config).eval()
    ids = torch.randint(0, 100, (2, 9), generator=torch.Generator().manual_seed(4))
    model = jaxport.from_torch(module, kwargs={"input_ids": ids})
    inputs = [to_jax(ids)]
    frozen_text = jax.jit(functools.partial(model._run, dict(model.params))).lower(inputs, None).as_text()
    called_text = jax.jit(model._run).lower(model.params, inputs, None).as_text()
    assert frozen_text.count(_native.GROUPED_MATMUL_TARGET) >= 2 and _native.GROUPED_MATMUL_TARGET not in called_text
    with torch.no_grad():
        expected = module(input_ids=ids).last_hidden_state.numpy()
    assert_close(model.frozen()(input_ids=ids)["last_hidden_state"], expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("stride, padding, dilation", [(2, 0, 1), (1, 1, 2), (5, 3, 1)], ids=str)
def test_frozen_1d_convolutions_multiply_on_the_kernel(stride, padding, dilation):
    """A frozen plain 1-D convolution (wav2vec2's and Whisper's feature layers) runs as its tap
    windows times the weight on the product kernel, matching PyTorch in float64 with strides,
    padding and dilation; NaN and infinities in the input reach exactly the outputs whose
    windows hold them. Called with the weight as an argument, it stays XLA's convolution."""
    torch.manual_seed(stride + padding + dilation)
    conv = torch.nn.Conv1d(72, 80, 3, stride=stride, padding=padding, dilation=dilation).eval()
    x = torch.randn(2, 72, 61)
    first = -padding % stride  # a frame the first tap of some window reads, whatever the stride
    x[0, 5, first + 4 * stride], x[1, 70, first] = float("nan"), float("inf")
    model = jaxport.from_torch(conv, (x,))
    frozen_text = jax.jit(functools.partial(model._run, dict(model.params))).lower([to_jax(x)], None).as_text()
    called_text = jax.jit(model._run).lower(model.params, [to_jax(x)], None).as_text()
    assert _native.MATMUL_TARGET in frozen_text and _native.MATMUL_TARGET not in called_text
    got = np.asarray(model.frozen()(x))
    expected = conv.double()(x.double()).detach().numpy()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(expected))
    np.testing.assert_array_equal(np.isinf(got), np.isinf(expected))
    finite = np.isfinite(expected)
    assert np.isnan(got).any() and np.isinf(got).any() and finite.any()
    assert_close(got[finite], expected[finite], rtol=1e-5, atol=1e-4)


# -- attention without a mask (attention.cc) --------------------------------------------------------


@pytest.fixture
def every_attention(monkeypatch):
    """The kernel on attention of any length, not only where it pays."""
    monkeypatch.setattr(_native, "MIN_ATTENTION_QUERIES", 1)


def _sdpa(query, key, value, **kwargs):
    return jaxport.ops.aten.attention.aten_scaled_dot_product_attention(query, key, value, **kwargs)


def _flash(query, key, value):
    return jaxport.ops.aten.attention.aten__scaled_dot_product_flash_attention_for_cpu(query, key, value)


def _jit(fn):
    """`jax.jit` of a function of its own: jit's cache does not know whether `portable()` held."""
    return jax.jit(lambda *args: fn(*args))


def _attention_case(shape_q, shape_kv, seed):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(shape_q, np.float32), rng.standard_normal(shape_kv, np.float32),
            rng.standard_normal(shape_kv, np.float32))


@pytest.mark.parametrize("shape_q, shape_kv", [
    ((1, 2, 300, 64), (1, 2, 300, 64)),   # query rows past blocks of 48, keys past blocks of 128
    ((2, 4, 53, 40), (2, 2, 77, 40)),     # grouped query heads; a head size of no whole sliver
    ((3, 50, 16), (1, 131, 16)),          # no batch axis; one key/value head for three query heads
    ((2, 3, 1, 7, 80), (2, 3, 1, 129, 80)),  # two batch axes; one key past a block
    ((1, 1, 5, 24), (1, 1, 1, 24)),       # a single key
], ids=str)
def test_attention_kernel_matches_pytorch(every_attention, shape_q, shape_kv):
    """Output and logsumexp against PyTorch's math in float64, on every ragged edge of the
    kernel's blocks: query rows (tiles of 6, blocks of 48), keys (slivers of 16, blocks of 128),
    head sizes, grouped heads, leading axes."""
    query, key, value = _attention_case(shape_q, shape_kv, sum(shape_q) + sum(shape_kv))
    fn = _jit(_flash)
    assert _native.ATTENTION_TARGET in fn.lower(query, key, value).as_text()
    out, logsumexp = fn(query, key, value)
    groups = shape_q[-3] // shape_kv[-3]
    q, k, v = (torch.from_numpy(a).double() for a in (query, key, value))
    k, v = (t.repeat_interleave(groups, dim=-3) for t in (k, v))
    scores = q @ k.transpose(-1, -2) / np.sqrt(shape_q[-1])
    assert_close(out, (torch.softmax(scores, -1) @ v).numpy(), rtol=1e-5, atol=1e-5)
    assert_close(logsumexp, torch.logsumexp(scores, -1).numpy(), rtol=1e-5, atol=1e-5)
    assert_close(_jit(_sdpa)(query, key, value), out, rtol=0, atol=0)


def test_attention_kernel_special_values(every_attention):
    """A row whose scores are all -inf attends to nothing (zeros, logsumexp 0, as PyTorch's CPU
    kernels give); one with a +inf or NaN score is NaN (inf - inf); -inf scores among finite ones
    get weight 0, as a mask's do; a NaN value reaches every row that weighs it. The kernel agrees
    with the portable formulation everywhere but one logsumexp, where it agrees with PyTorch."""
    query, key, value = _attention_case((1, 2, 60, 16), (1, 2, 140, 16), 4)
    first = np.eye(16, dtype=np.float32)[0]
    key[0, 0, :, 0] = -np.inf                 # head 0: every key's first component -inf
    query[0, 0, :, 0] = 0.0                   # 0 * -inf: NaN scores
    query[0, 0, 1], query[0, 0, 2] = first, -first  # every score -inf; every score +inf
    key[0, 1, :70, 0] = -np.inf               # head 1: the first 70 keys out of reach
    query[0, 1, :, 0] = np.abs(query[0, 1, :, 0]) + 0.1
    query[0, 1, 5, 9] = np.nan
    value[0, 1, 100, 3] = np.nan
    out, logsumexp = (np.array(a) for a in _jit(_flash)(query, key, value))
    with _native.portable():
        expected, expected_lse = (np.asarray(a) for a in _jit(_flash)(query, key, value))
    np.testing.assert_array_equal(out[0, 0, 1], np.zeros(16, np.float32))
    assert logsumexp[0, 0, 1] == 0.0
    assert np.isnan(np.delete(out[0, 0], 1, axis=0)).all()
    assert np.isnan(out[0, 1, :, 3]).all() and np.isnan(out[0, 1, 5]).all()
    np.testing.assert_array_equal(np.isnan(out), np.isnan(expected))
    finite = np.isfinite(expected)
    assert finite.sum() == 16 + 59 * 15  # the empty row; head 1 but its NaN row and column
    assert_close(out[finite], expected[finite], rtol=1e-5, atol=1e-5)
    # The row of +inf scores has logsumexp NaN, as PyTorch's CPU flash kernel reports it (the
    # portable formulation: +inf); every other row's is the portable formulation's.
    assert np.isnan(logsumexp[0, 0, 2]) and expected_lse[0, 0, 2] == np.inf
    logsumexp[0, 0, 2] = expected_lse[0, 0, 2]
    assert_close(logsumexp, expected_lse, rtol=1e-5, atol=1e-5)


def test_attention_kernel_derivatives_and_vmap(every_attention):
    """Reverse and forward mode (the portable formulation's derivatives) and `jax.vmap` equal the
    portable formulation's."""
    query, key, value = _attention_case((1, 2, 30, 16), (1, 2, 40, 16), 5)

    def loss(query, key, value):
        return jnp.sum(jnp.sin(_sdpa(query, key, value)))

    grads = _jit(jax.grad(loss, argnums=(0, 1, 2)))(query, key, value)
    tangent = _jit(lambda *t: jax.jvp(_sdpa, (query, key, value), t)[1])(-query, value, key)
    stacked = [np.stack([a, -a]) for a in (query, key, value)]
    batched = _jit(jax.vmap(_sdpa))(*stacked)
    assert _native.ATTENTION_TARGET in _jit(jax.vmap(_sdpa)).lower(*stacked).as_text()
    with _native.portable():
        expected_grads = _jit(jax.grad(loss, argnums=(0, 1, 2)))(query, key, value)
        expected_tangent = _jit(lambda *t: jax.jvp(_sdpa, (query, key, value), t)[1])(-query, value, key)
        expected_batched = _jit(jax.vmap(_sdpa))(*stacked)
    for got, expected in zip(grads, expected_grads):
        assert_close(got, expected, rtol=1e-5, atol=1e-5)
    assert_close(tangent, expected_tangent, rtol=1e-5, atol=1e-5)
    assert_close(batched, expected_batched, rtol=1e-5, atol=1e-5)


def test_attention_kernel_only_without_mask_or_dropout():
    """Masks, causal attention, dropout, other dtypes, short sequences (at their default length:
    XLA is as fast there), differing value sizes and `portable()` keep the portable formulation."""
    query, key, value = _attention_case((1, 2, 300, 16), (1, 2, 300, 16), 6)
    uses = lambda fn, *args: _native.ATTENTION_TARGET in _jit(fn).lower(*args).as_text()  # noqa: E731
    assert uses(_sdpa, query, key, value)
    mask = np.ones((300, 300), bool)
    assert not uses(lambda q, k, v: _sdpa(q, k, v, attn_mask=mask), query, key, value)
    assert not uses(lambda q, k, v: _sdpa(q, k, v, is_causal=True), query, key, value)
    assert not uses(lambda q, k, v: _sdpa(q, k, v, dropout_p=0.1, key_rng=jax.random.key(0)), query, key, value)
    assert not uses(_sdpa, *(a.astype(np.float16) for a in (query, key, value)))
    assert not uses(_sdpa, query[..., :_native.MIN_ATTENTION_QUERIES - 1, :], key, value)
    assert not uses(_sdpa, query, key, np.concatenate([value, value], -1))
    with _native.portable():
        assert not uses(_sdpa, query, key, value)


def test_models_attend_on_the_kernel():
    """A module calling `scaled_dot_product_attention` over a long sequence runs the kernel in
    its converted form, called and frozen alike, and matches PyTorch."""

    class SelfAttention(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.qkv = torch.nn.Linear(64, 3 * 64)

        def forward(self, x):
            q, k, v = self.qkv(x).unflatten(-1, (3, 4, 16)).permute(2, 0, 3, 1, 4)
            return torch.nn.functional.scaled_dot_product_attention(q, k, v)

    torch.manual_seed(0)
    module, x = SelfAttention().eval(), torch.randn(1, 400, 64)
    model = jaxport.from_torch(module, (x,))
    assert _native.ATTENTION_TARGET in jax.jit(model._run).lower(model.params, [to_jax(x)], None).as_text()
    expected = module(x).detach().numpy()
    assert_close(model(x), expected, rtol=1e-5, atol=1e-5)
    assert_close(model.frozen()(x), expected, rtol=1e-5, atol=1e-5)


def test_products_stay_xlas_where_the_kernel_does_not_pay(monkeypatch):
    """By default the kernel is taken only where this CPU measured it faster than XLA's product
    (`_product_kernel_pays`, once per process); `product_kernel(False)` declines it too."""
    rng = np.random.default_rng(12)
    rows, weight = rng.standard_normal((8, 128), np.float32), jnp.asarray(rng.standard_normal((96, 128), np.float32))
    has_kernel = lambda fn, *args: _native.MATMUL_TARGET in fn.lower(*args).as_text()  # noqa: E731
    with _native.product_kernel(False):
        assert not has_kernel(_constant_product(weight), rows)
    token = _native._product_kernel_choice.set(None)  # as measured
    try:
        assert isinstance(_native._product_kernel_pays(), bool)
        for measured in (False, True):
            monkeypatch.setattr(_native, "_product_kernel_pays", lambda verdict=measured: verdict)
            assert has_kernel(_constant_product(weight), rows) is measured
    finally:
        _native._product_kernel_choice.reset(token)
