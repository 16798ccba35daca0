"""ATen ops only a GPU runs (no CPU kernel), tested from their schemas: cuDNN's and MIOpen's batch
norm and their backward, the fused RMS norm's backward, the `.dtype` matrix products, linear's
backward, the fused dropout and its backward, the fused LSTM and GRU cells and their backward.

No GPU runs them here, so each lowering is checked on CPU inputs from a seeded generator against
what the op's meta kernel records (shapes, dtypes, Nones; the CUDA kernel's where torch 2.13 has
no working meta kernel) and against the CPU op that computes the same thing, in float64
(`native_batch_norm`, `mm`, `torch._VF.lstm_cell`, ..., and torch.autograd of it for the
backward ops). Last, the sweep: every GPU-only op of the torch installed is lowered or refused
with a reason (`gpu_only.NOT_LOWERED`), and one model calling these ops, exported on `meta`,
runs with its real weights as PyTorch does on the CPU."""

from __future__ import annotations

import pathlib

import jax
import numpy as np
import pytest
import torch

import jaxport
from jaxport import dlpack, dtypes, versions
from jaxport.ops import registry
from tests.ops.aten import gpu_only

pytestmark = pytest.mark.usefixtures("x64_strict")

aten = torch.ops.aten
ROOT = pathlib.Path(__file__).parents[3]
#: The release of torch requirements/dev.txt pins.
_PINNED_TORCH = next(line.split("==")[1].strip() for line in (ROOT / "requirements" / "dev.txt").read_text().splitlines()
                     if line.startswith("torch=="))
#: dtype -> tolerance relative to the largest expected value (the outputs round to the dtype)
TOL = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 2e-2}
HALVES = [torch.float16, torch.bfloat16]
FLOATS = [torch.float32, *HALVES]


def _id(value):
    """Test ids: dtypes by name, output masks as 0s and 1s."""
    if isinstance(value, torch.dtype):
        return str(value).removeprefix("torch.")
    if isinstance(value, list) and all(isinstance(v, bool) for v in value):
        return "".join("1" if v else "0" for v in value)
    return None


# --- helpers ------------------------------------------------------------------------------


def _randn(seed, dtype, *shapes):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(shape, generator=g, dtype=torch.float64).to(dtype) for shape in shapes]


def _jax(value):
    """An argument as a lowering gets it: tensors as JAX arrays, dtypes as NumPy's."""
    if isinstance(value, torch.Tensor):
        return dlpack.to_jax(value)
    return dtypes.numpy_dtype(value) if isinstance(value, torch.dtype) else value


def _call(name, *args, rng=0, **kwargs):
    """The lowering of `name` ("aten.mm.dtype") on these arguments, torch tensors as JAX arrays;
    a random op gets `jax.random.key(rng)`."""
    if registry.random_keyword(name):
        kwargs[registry.random_keyword(name)] = jax.random.key(rng)
    return registry.lookup(name)(*map(_jax, args), **{k: _jax(v) for k, v in kwargs.items()})


def _meta(value):
    return value.to("meta") if isinstance(value, torch.Tensor) else value


def _specs(outputs):
    outputs = outputs if isinstance(outputs, (tuple, list)) else (outputs,)
    return [None if o is None else (tuple(o.shape), np.dtype(o.dtype)) for o in outputs]


def _torch_specs(outputs):
    outputs = outputs if isinstance(outputs, (tuple, list)) else (outputs,)
    return [None if o is None else (tuple(o.shape), dtypes.numpy_dtype(o.dtype)) for o in outputs]


def _assert_as_recorded(outputs, name, *args, **kwargs):
    """Every output (a tensor's shape and dtype, or None) as the op's meta kernel records it."""
    recorded = gpu_only.overload(name)(*map(_meta, args), **{k: _meta(v) for k, v in kwargs.items()})
    assert _specs(outputs) == _torch_specs(recorded), name


def _close(actual, expected, tol):
    expected = expected.detach().double().numpy()
    actual = np.asarray(jax.numpy.asarray(actual).astype(np.float64))
    assert actual.shape == expected.shape
    scale = max(1.0, float(np.abs(expected).max())) if expected.size else 1.0
    np.testing.assert_allclose(actual, expected, rtol=tol, atol=tol * scale)


def _double(*tensors):
    return [None if t is None else t.double() for t in tensors]


def _wide(*tensors):
    """float64 copies that take gradients."""
    return [None if t is None else t.requires_grad_() for t in _double(*tensors)]


# --- cuDNN's and MIOpen's batch norm ----------------------------------------------------------

BATCH_NORMS = ["cudnn_batch_norm", "miopen_batch_norm"]


def _batch_norm_inputs(dtype, weight_dtype, shape=(4, 3, 5), seed=0):
    x, = _randn(seed, dtype, shape)
    w, b, rm = _randn(seed + 1, weight_dtype, (shape[1],), (shape[1],), (shape[1],))
    rv = (torch.rand(shape[1], generator=torch.Generator().manual_seed(seed + 2), dtype=torch.float64) + 0.5)
    return x, w, b, rm, rv.to(weight_dtype)


@pytest.mark.parametrize("op", BATCH_NORMS)
@pytest.mark.parametrize("training", [True, False], ids=["training", "eval"])
@pytest.mark.parametrize("dtype,weight_dtype", [(torch.float32, torch.float32), (torch.float16, torch.float32),
                                                (torch.float16, torch.float16), (torch.bfloat16, torch.bfloat16)],
                         ids=["float32", "float16-float32-weights", "float16", "bfloat16"])
def test_kernel_batch_norm_is_native_batch_norm(op, training, dtype, weight_dtype):
    """Outputs as the meta kernel records them (statistics per channel in training, empty in eval)
    and as `native_batch_norm` computes them in float64; the running statistics stay as they were."""
    x, w, b, rm, rv = _batch_norm_inputs(dtype, weight_dtype)
    outputs = _call(f"aten.{op}.default", x, w, b, rm, rv, training, 0.1, 1e-5)
    _assert_as_recorded(outputs, f"aten.{op}.default", x, w, b, rm, rv, training, 0.1, 1e-5)
    out, mean, invstd = aten.native_batch_norm(*_double(x, w, b, rm, rv), training, 0.1, 1e-5)
    _close(outputs[0], out, TOL[dtype])
    if training:
        _close(outputs[1], mean, TOL[weight_dtype if op == "miopen_batch_norm" else torch.float32])
        _close(outputs[2], invstd, TOL[weight_dtype if op == "miopen_batch_norm" else torch.float32])
    if op == "cudnn_batch_norm":
        assert outputs[3].shape == (0,) and outputs[3].dtype == np.uint8


@pytest.mark.parametrize("op", BATCH_NORMS)
@pytest.mark.parametrize("case", ["no bias, no running statistics", "2-d input", "empty batch"])
def test_kernel_batch_norm_edge_cases(op, case):
    shape = (4, 3) if case == "2-d input" else (0, 3, 5) if case == "empty batch" else (4, 3, 5)
    x, w, b, rm, rv = _batch_norm_inputs(torch.float32, torch.float32, shape)
    if case.startswith("no bias"):
        b = rm = rv = None
    outputs = _call(f"aten.{op}.default", x, w, b, rm, rv, True, 0.1, 1e-5)
    _assert_as_recorded(outputs, f"aten.{op}.default", x, w, b, rm, rv, True, 0.1, 1e-5)
    if case != "empty batch":
        expected = aten.native_batch_norm(*_double(x, w, b, rm, rv), True, 0.1, 1e-5)
        for actual, want in zip(outputs, expected):
            _close(actual, want, 1e-5)


def test_cudnn_batch_norm_returns_what_the_graph_records():
    """A graph recorded on a GPU records cuDNN's reserve space at its real size: zeros of it."""
    x, w, b, rm, rv = _batch_norm_inputs(torch.float32, torch.float32)
    recorded = (((4, 3, 5), np.dtype(np.float32)), ((3,), np.dtype(np.float32)), ((3,), np.dtype(np.float32)),
                ((96,), np.dtype(np.uint8)))
    outputs = _call("aten.cudnn_batch_norm.default", x, w, b, rm, rv, True, 0.1, 1e-5, recorded=recorded)
    assert _specs(outputs) == list(recorded)
    assert not np.asarray(outputs[3]).any()


@pytest.mark.parametrize("op", BATCH_NORMS)
@pytest.mark.parametrize("dtype,weight_dtype", [(torch.float32, torch.float32), (torch.float16, torch.float32),
                                                (torch.bfloat16, torch.bfloat16)],
                         ids=["float32", "float16-float32-weights", "bfloat16"])
def test_kernel_batch_norm_backward_is_native_batch_norms_gradient(op, dtype, weight_dtype):
    """Training-mode gradients from the forward's saved mean and inverse standard deviation
    (`save_var` is the inverse standard deviation, as cuDNN and MIOpen save it), against
    torch.autograd of `native_batch_norm` in float64."""
    x, w, b, rm, rv = _batch_norm_inputs(dtype, weight_dtype)
    grad, = _randn(5, dtype, x.shape)
    _, mean, invstd = aten.native_batch_norm(x.float(), w.float(), b.float(), None, None, True, 0.1, 1e-5)
    stats = [mean.to(weight_dtype), invstd.to(weight_dtype)] if op == "miopen_batch_norm" else [mean, invstd]
    tail = [1e-5, torch.zeros(0, dtype=torch.uint8)] if op == "cudnn_batch_norm" else [1e-5]
    args = (x, grad, w, rm, rv, *stats, *tail)
    outputs = _call(f"aten.{op}_backward.default", *args)
    _assert_as_recorded(outputs, f"aten.{op}_backward.default", *args)
    xw, ww, bw = _wide(x, w, b)
    out = aten.native_batch_norm(xw, ww, bw, None, None, True, 0.1, 1e-5)[0]
    expected = torch.autograd.grad(out, (xw, ww, bw), grad.double())
    for actual, want, tol in zip(outputs, expected, (TOL[dtype], TOL[weight_dtype], TOL[weight_dtype])):
        _close(actual, want, max(tol, 1e-4))


@pytest.mark.parametrize("op", BATCH_NORMS)
def test_kernel_batch_norm_backward_without_saved_statistics_recomputes_them(op):
    """cuDNN's backward computes the batch statistics itself (with `epsilon`) when the forward's
    are not given."""
    x, w, b, rm, rv = _batch_norm_inputs(torch.float32, torch.float32)
    grad, = _randn(5, torch.float32, x.shape)
    tail = [1e-3, torch.zeros(0, dtype=torch.uint8)] if op == "cudnn_batch_norm" else [1e-3]
    outputs = _call(f"aten.{op}_backward.default", x, grad, w, None, None, None, None, *tail)
    xw, ww, bw = _wide(x, w, b)
    out = aten.native_batch_norm(xw, ww, bw, None, None, True, 0.1, 1e-3)[0]
    for actual, want in zip(outputs, torch.autograd.grad(out, (xw, ww, bw), grad.double())):
        _close(actual, want, 1e-4)


# --- the fused RMS norm -----------------------------------------------------------------------


@pytest.mark.parametrize("dtype", FLOATS, ids=_id)
@pytest.mark.parametrize("eps", [None, 1e-6])
def test_fused_rms_norm_is_pytorchs(dtype, eps):
    """The forward (a composite op on the CPU) and its float32 rstd, its default eps the opmath
    type's (float32's for float16 inputs, not float16's)."""
    x, w = _randn(0, dtype, (3, 4), (4,))
    x = x * 1e-3  # small values: float16's epsilon would dominate the mean square
    out, rstd = _call("aten._fused_rms_norm.default", x, [4], w, eps)
    want_out, want_rstd = aten._fused_rms_norm(x, [4], w, eps)
    assert _specs((out, rstd)) == _torch_specs((want_out, want_rstd))
    _close(out, want_out, TOL[dtype])
    _close(rstd, want_rstd, 1e-5)
    _close(_call("aten.rms_norm.default", x, [4], w, eps), aten.rms_norm(x, [4], w, eps), TOL[dtype])


@pytest.mark.parametrize("dtype", FLOATS, ids=_id)
@pytest.mark.parametrize("normalized_shape", [[4], [3, 4]], ids=["1-d", "2-d"])
@pytest.mark.parametrize("with_weight", [True, False], ids=["weight", "no-weight"])
@pytest.mark.parametrize("output_mask", [[True, True], [True, False], [False, True]], ids=_id)
def test_fused_rms_norm_backward_is_its_gradient(dtype, normalized_shape, with_weight, output_mask):
    x, grad = _randn(0, dtype, (2, 3, 4), (2, 3, 4))
    w = _randn(1, dtype, normalized_shape)[0] if with_weight else None
    _, rstd = _call("aten._fused_rms_norm.default", x, normalized_shape, w, 1e-5)
    args = (grad, x, normalized_shape, dlpack.to_torch(rstd), w, output_mask)
    outputs = _call("aten._fused_rms_norm_backward.default", *args)
    _assert_as_recorded(outputs, "aten._fused_rms_norm_backward.default", *args)
    xw, ww = _wide(x, w)
    out = aten._fused_rms_norm(xw, normalized_shape, ww, 1e-5)[0]
    expected = torch.autograd.grad(out, [t for t in (xw, ww) if t is not None], grad.double())
    if output_mask[0]:
        _close(outputs[0], expected[0], TOL[dtype])
    if output_mask[1] and with_weight:
        _close(outputs[1], expected[1], TOL[dtype])


def test_fused_rms_norm_backward_of_an_empty_batch():
    x = torch.zeros(0, 4)
    args = (x, x, [4], torch.zeros(0, 1), torch.ones(4), [True, True])
    outputs = _call("aten._fused_rms_norm_backward.default", *args)
    _assert_as_recorded(outputs, "aten._fused_rms_norm_backward.default", *args)
    assert not np.asarray(outputs[1]).any()


# --- matrix products with an out_dtype ---------------------------------------------------------

#: (input dtype, out_dtype): the CUDA kernels' pairs, the inputs' own dtype or float32 from half
DTYPE_PAIRS = [(torch.float16, torch.float32), (torch.bfloat16, torch.float32), (torch.float16, torch.float16),
               (torch.bfloat16, torch.bfloat16), (torch.float32, torch.float32)]
PAIR_IDS = [f"{str(a)[6:]}-{str(b)[6:]}" for a, b in DTYPE_PAIRS]


@pytest.mark.parametrize("dtype,out_dtype", DTYPE_PAIRS, ids=PAIR_IDS)
@pytest.mark.parametrize("op,shapes", [("mm", ((5, 64), (64, 3))), ("bmm", ((2, 5, 64), (2, 64, 3))),
                                       ("mm", ((0, 4), (4, 3))), ("mm", ((5, 0), (0, 3)))],
                         ids=["mm", "bmm", "mm-empty", "mm-k0"])
def test_product_with_out_dtype_accumulates_in_float32(op, shapes, dtype, out_dtype):
    """The exact float32 product rounded once to out_dtype (for float16 inputs and float32
    out_dtype: never rounded to float16)."""
    a, b = _randn(0, dtype, *shapes)
    out = _call(f"aten.{op}.dtype", a, b, out_dtype)
    _assert_as_recorded(out, f"aten.{op}.dtype", a, b, out_dtype)
    _close(out, getattr(torch, op)(a.double(), b.double()).to(out_dtype), TOL[out_dtype])


@pytest.mark.parametrize("dtype,out_dtype", DTYPE_PAIRS, ids=PAIR_IDS)
@pytest.mark.parametrize("self_shape", [(5, 3), (3,)], ids=["matrix", "row"])
@pytest.mark.parametrize("beta,alpha", [(1, 1), (0.5, 2.0), (0, 1)], ids=["plain", "scaled", "beta0"])
def test_addmm_with_out_dtype(dtype, out_dtype, self_shape, beta, alpha):
    """beta * self + alpha * mat1 @ mat2 in float32, rounded once; beta=0 ignores a NaN self."""
    s, a, b = _randn(0, dtype, self_shape, (5, 64), (64, 3))
    if beta == 0:
        s = torch.full_like(s, float("nan"))
    out = _call("aten.addmm.dtype", s, a, b, out_dtype, beta=beta, alpha=alpha)
    _assert_as_recorded(out, "aten.addmm.dtype", s, a, b, out_dtype, beta=beta, alpha=alpha)
    product = alpha * (a.double() @ b.double())
    _close(out, (product if beta == 0 else beta * s.double() + product).to(out_dtype), TOL[out_dtype])


@pytest.mark.parametrize("dtype,out_dtype", DTYPE_PAIRS, ids=PAIR_IDS)
def test_baddbmm_with_out_dtype(dtype, out_dtype):
    s, a, b = _randn(0, dtype, (2, 5, 3), (2, 5, 64), (2, 64, 3))
    out = _call("aten.baddbmm.dtype", s, a, b, out_dtype, beta=0.5, alpha=2.0)
    # torch 2.13's meta kernel for baddbmm.dtype is the decomposition of baddbmm, which takes
    # out_dtype for beta and fails; the output is the CUDA kernel's: self's shape, out_dtype.
    with pytest.raises(TypeError):
        aten.baddbmm.dtype(*map(_meta, (s, a, b)), out_dtype, beta=0.5, alpha=2.0)
    assert _specs(out) == [((2, 5, 3), dtypes.numpy_dtype(out_dtype))]
    _close(out, (0.5 * s.double() + 2.0 * (a.double() @ b.double())).to(out_dtype), TOL[out_dtype])


# --- linear's backward ------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", FLOATS, ids=_id)
@pytest.mark.parametrize("input_shape", [(2, 3, 4), (4,), (0, 4)], ids=["batched", "vector", "empty-batch"])
@pytest.mark.parametrize("output_mask", [[True, True, True], [True, False, False], [False, True, False],
                                         [False, False, True]], ids=_id)
def test_linear_backward_is_linears_gradient(dtype, input_shape, output_mask):
    """Gradients in grad_output's dtype, the weight's and bias's both whenever either is asked
    for (as the meta kernel records them), against torch.autograd of `linear` in float64."""
    x, w, b = _randn(0, dtype, input_shape, (5, 4), (5,))
    grad, = _randn(1, dtype, (*input_shape[:-1], 5))
    outputs = _call("aten.linear_backward.default", x, grad, w, output_mask)
    _assert_as_recorded(outputs, "aten.linear_backward.default", x, grad, w, output_mask)
    xw, ww, bw = _wide(x, w, b)
    expected = torch.autograd.grad(torch.nn.functional.linear(xw, ww, bw), (xw, ww, bw), grad.double())
    for actual, want in zip(outputs, expected):
        if actual is not None:
            _close(actual, want, TOL[dtype])


# --- the fused dropout ------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", FLOATS, ids=_id)
@pytest.mark.parametrize("p", [0.8, 1.0])
def test_fused_dropout_keeps_with_probability_p(dtype, p):
    """`p` is the probability of keeping: out = self * mask / p, mask uint8, about p kept."""
    x, = _randn(0, dtype, (100, 100))
    out, mask = _call("aten._fused_dropout.default", x, p)
    _assert_as_recorded((out, mask), "aten._fused_dropout.default", x, p)
    keep = dlpack.to_torch(mask)
    assert set(np.unique(np.asarray(mask))) <= {0, 1}
    assert abs(float(keep.double().mean()) - p) < 0.02
    _close(out, (x.float() * keep.float() * (1 / p)).to(dtype), TOL[dtype])
    again, mask_again = _call("aten._fused_dropout.default", x, p)
    other = _call("aten._fused_dropout.default", x, p, rng=1)[1]
    assert np.array_equal(mask, mask_again) and (p == 1.0 or not np.array_equal(mask, other))


def test_fused_dropout_edge_cases():
    """An empty input; p=0 keeps nothing and, as CUDA's kernel multiplies by 1/p, gives NaN."""
    out, mask = _call("aten._fused_dropout.default", torch.zeros(0, 3), 0.5)
    assert _specs((out, mask)) == [((0, 3), np.dtype(np.float32)), ((0, 3), np.dtype(np.uint8))]
    out, mask = _call("aten._fused_dropout.default", torch.ones(4, 3), 0.0)
    assert not np.asarray(mask).any() and np.isnan(np.asarray(out)).all()


@pytest.mark.parametrize("dtype", FLOATS, ids=_id)
@pytest.mark.parametrize("mask_shape", [(6, 5), (5,)], ids=["full", "broadcast"])
def test_masked_scale_is_mask_times_self_times_scale(dtype, mask_shape):
    x, = _randn(0, dtype, (6, 5))
    mask = (torch.rand(mask_shape, generator=torch.Generator().manual_seed(1)) < 0.7).to(torch.uint8)
    out = _call("aten._masked_scale.default", x, mask, 1.25)
    _assert_as_recorded(out, "aten._masked_scale.default", x, mask, 1.25)
    _close(out, (mask.float() * x.float() * 1.25).to(dtype), 1e-6)


# --- the fused LSTM and GRU cells ---------------------------------------------------------------

B, H = 3, 4


def _lstm_reference(gates, cx, input_bias, hidden_bias):
    """`torch._VF.lstm_cell` on gate pre-activations (float64): the input is the summed gates,
    w_ih the identity and w_hh zeros, so gates = input + b_ih + b_hh. -> (hy, cy)."""
    eye = torch.eye(4 * H, dtype=torch.float64)
    zeros = torch.zeros(4 * H, H, dtype=torch.float64)
    hx = torch.zeros(cx.shape, dtype=torch.float64)
    return torch._VF.lstm_cell(gates, (hx, cx), eye, zeros, input_bias, hidden_bias)


@pytest.mark.parametrize("dtype", FLOATS, ids=_id)
@pytest.mark.parametrize("with_bias", [True, False], ids=["bias", "no-bias"])
def test_fused_lstm_cell_is_lstm_cell(dtype, with_bias):
    gi, gh, cx, bi, bh = _randn(0, dtype, (B, 4 * H), (B, 4 * H), (B, H), (4 * H,), (4 * H,))
    if not with_bias:
        bi = bh = None
    hy, cy, workspace = _call("aten._thnn_fused_lstm_cell.default", gi, gh, cx, bi, bh)
    if with_bias:
        _assert_as_recorded((hy, cy, workspace), "aten._thnn_fused_lstm_cell.default", gi, gh, cx, bi, bh)
    else:  # torch 2.13's meta kernel fails without biases (it asks None for its device)
        want = dtypes.numpy_dtype(dtype)
        assert _specs((hy, cy, workspace)) == [((B, H), want), ((B, H), want), ((B, 4 * H), want)]
    gates = gi.double() + gh.double()
    bi64, bh64 = (bi.double(), bh.double()) if with_bias else (None, None)
    want_hy, want_cy = _lstm_reference(gates, cx.double(), bi64, bh64)
    _close(hy, want_hy, TOL[dtype])
    _close(cy, want_cy, TOL[dtype])
    pre = gates + (bi64 + bh64 if with_bias else 0)
    i, f, g, o = pre.chunk(4, 1)
    _close(workspace, torch.cat([i.sigmoid(), f.sigmoid(), g.tanh(), o.sigmoid()], 1), TOL[dtype])


@pytest.mark.parametrize("dtype", FLOATS, ids=_id)
@pytest.mark.parametrize("grads", ["both", "hy", "cy"])
@pytest.mark.parametrize("has_bias", [True, False], ids=["bias", "no-bias"])
def test_fused_lstm_cell_backward_is_its_gradient(dtype, grads, has_bias):
    gi, gh, cx, bi, bh, grad_hy, grad_cy = _randn(
        0, dtype, (B, 4 * H), (B, 4 * H), (B, H), (4 * H,), (4 * H,), (B, H), (B, H))
    grad_hy = grad_hy if grads in ("both", "hy") else None
    grad_cy = grad_cy if grads in ("both", "cy") else None
    _, cy, workspace = _call("aten._thnn_fused_lstm_cell.default", gi, gh, cx, bi, bh)
    args = (grad_hy, grad_cy, cx, dlpack.to_torch(cy), dlpack.to_torch(workspace), has_bias)
    outputs = _call("aten._thnn_fused_lstm_cell_backward_impl.default", *args)
    _assert_as_recorded(outputs, "aten._thnn_fused_lstm_cell_backward_impl.default", *args)
    gates, cx64, bi64 = _wide(gi.double() + gh.double(), cx, bi)
    hy64, cy64 = _lstm_reference(gates, cx64, bi64, bh.double())
    pairs = [(out, g) for out, g in ((hy64, grad_hy), (cy64, grad_cy)) if g is not None]
    expected = torch.autograd.grad([o for o, _ in pairs], (gates, cx64, bi64), [g.double() for _, g in pairs])
    _close(outputs[0], expected[0], 2 * TOL[dtype])
    _close(outputs[1], expected[1], 2 * TOL[dtype])
    if has_bias:
        _close(outputs[2], expected[2], 4 * TOL[dtype])


def test_fused_lstm_cell_backward_without_gradients_returns_none():
    cx, cy, workspace = torch.zeros(B, H), torch.zeros(B, H), torch.zeros(B, 4 * H)
    args = (None, None, cx, cy, workspace, True)
    outputs = _call("aten._thnn_fused_lstm_cell_backward_impl.default", *args)
    assert outputs == (None, None, None)
    _assert_as_recorded(outputs, "aten._thnn_fused_lstm_cell_backward_impl.default", *args)


def _gru_reference(input_gates, hidden_gates, hx, input_bias, hidden_bias):
    """GRUCell's equations on gate pre-activations (float64), hx entering only through the update."""
    if input_bias is not None:
        input_gates, hidden_gates = input_gates + input_bias, hidden_gates + hidden_bias
    ir, iz, in_ = input_gates.chunk(3, 1)
    hr, hz, hn = hidden_gates.chunk(3, 1)
    r, z = (ir + hr).sigmoid(), (iz + hz).sigmoid()
    n = (in_ + r * hn).tanh()
    return (1 - z) * n + z * hx


def _gru_inputs(dtype, with_bias):
    x, hx, w_ih, w_hh, bi, bh = _randn(0, dtype, (B, 5), (B, H), (3 * H, 5), (3 * H, H), (3 * H,), (3 * H,))
    gi, gh = (x.double() @ w_ih.double().T).to(dtype), (hx.double() @ w_hh.double().T).to(dtype)
    return x, hx, w_ih, w_hh, gi, gh, (bi, bh) if with_bias else (None, None)


@pytest.mark.parametrize("dtype", FLOATS, ids=_id)
@pytest.mark.parametrize("with_bias", [True, False], ids=["bias", "no-bias"])
def test_fused_gru_cell_is_gru_cell(dtype, with_bias):
    """No meta kernel in torch 2.13 (a graph records the CUDA kernel's shapes: hy as hx, a
    (batch, 5 * hidden) workspace): checked against `torch._VF.gru_cell`."""
    x, hx, w_ih, w_hh, gi, gh, (bi, bh) = _gru_inputs(dtype, with_bias)
    hy, workspace = _call("aten._thnn_fused_gru_cell.default", gi, gh, hx, bi, bh)
    want = dtypes.numpy_dtype(dtype)
    assert _specs((hy, workspace)) == [((B, H), want), ((B, 5 * H), want)]
    b64 = (bi.double(), bh.double()) if with_bias else (None, None)
    expected = torch._VF.gru_cell(x.double(), hx.double(), w_ih.double(), w_hh.double(), *b64)
    _close(hy, expected, 2 * TOL[dtype])
    reference = _gru_reference(gi.double(), gh.double(), hx.double(), *b64)
    _close(reference.numpy(), expected, 2 * TOL[dtype])  # the reference the backward test differentiates


@pytest.mark.parametrize("dtype", FLOATS, ids=_id)
@pytest.mark.parametrize("has_bias", [True, False], ids=["bias", "no-bias"])
def test_fused_gru_cell_backward_is_its_gradient(dtype, has_bias):
    _, hx, _, _, gi, gh, (bi, bh) = _gru_inputs(dtype, True)
    grad_hy, = _randn(7, dtype, (B, H))
    _, workspace = _call("aten._thnn_fused_gru_cell.default", gi, gh, hx, bi, bh)
    outputs = _call("aten._thnn_fused_gru_cell_backward.default", grad_hy, dlpack.to_torch(workspace), has_bias)
    want = dtypes.numpy_dtype(dtype)
    bias = ((3 * H,), want) if has_bias else None
    assert _specs(outputs) == [((B, 3 * H), want), ((B, 3 * H), want), ((B, H), want), bias, bias]
    leaves = _wide(gi, gh, hx, bi, bh)
    expected = torch.autograd.grad(_gru_reference(*leaves), leaves, grad_hy.double())
    for actual, want_grad in zip(outputs, expected if has_bias else expected[:3]):
        _close(actual, want_grad, 4 * TOL[dtype])


# --- every GPU-only op: lowered, or refused with a reason ----------------------------------------


# In the compatibility slice: each release (and each CUDA build, which registers ops the CPU wheel
# lacks) has its own GPU-only ops.
@pytest.mark.compat
def test_every_gpu_only_op_is_lowered_or_refused_with_a_reason():
    ops = gpu_only.gpu_only_ops()
    assert len(ops) > 40, ops  # the sweep found the kind of ops it looks for
    neither = [op for op in ops if gpu_only.lowering(op) is None and not gpu_only.NOT_LOWERED.get(op)]
    assert not neither, f"GPU-only ops neither lowered nor refused with a reason in gpu_only.NOT_LOWERED: {neither}"
    stale = [op for op in gpu_only.NOT_LOWERED if gpu_only.lowering(op) is not None]
    assert not stale, f"gpu_only.NOT_LOWERED names ops that are lowered now: {stale}"
    # Kept current against the torch requirements/dev.txt pins: in other releases an op may have
    # gained a CPU kernel (torch 2.15's Philox ops) or not exist yet.
    if versions.release(torch.__version__) == versions.release(_PINNED_TORCH):
        unknown = sorted(op for op in set(gpu_only.NOT_LOWERED) - set(ops) - set(gpu_only.GPU_ONLY_IN_OTHER_RELEASES)
                         if gpu_only.runs_on_the_cpu(op))
        assert not unknown, f"gpu_only.NOT_LOWERED names ops this torch runs on the CPU: {unknown}"
    assert all(registry.lookup(op) is not None for op in gpu_only.WITHOUT_META_KERNEL)


@pytest.mark.compat
def test_the_generated_table_names_every_gpu_only_op():
    text = gpu_only.table()
    assert "no reason given" not in text
    assert all(f"`{op}`" in text for op in gpu_only.gpu_only_ops())


def test_the_committed_table_is_current():
    """The committed table is the pinned torch's (requirements/dev.txt): checked with that torch,
    whose table it must be; another release (a compatibility set) has ops of its own."""
    if versions.release(torch.__version__) != versions.release(_PINNED_TORCH):
        pytest.skip(f"docs/gpu-only-ops.md lists the pinned torch {_PINNED_TORCH}'s ops; this is {torch.__version__}")
    committed = (ROOT / "docs" / "gpu-only-ops.md").read_text()
    command = "python -m tests.ops.aten.gpu_only docs/gpu-only-ops.md"
    assert f"torch {torch.__version__} " in committed, f"the table was made with another torch: regenerate it: {command}"
    assert committed == gpu_only.table(), f"regenerate it: {command}"


# --- end to end: a model calling them, converted on meta ------------------------------------------


class _GpuKernels(torch.nn.Module):
    """Gate products with an out_dtype, cuDNN's and MIOpen's batch norm in training, the fused
    LSTM cell and the fused dropout, as a CUDA graph would hold them."""

    def __init__(self):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.w = torch.nn.Parameter(torch.randn(5, 4 * H, generator=g))
        self.bn_weight = torch.nn.Parameter(torch.rand(4 * H, generator=g) + 0.5)
        self.bn_bias = torch.nn.Parameter(torch.randn(4 * H, generator=g))
        self.gate_bias = torch.nn.Parameter(torch.randn(4 * H, generator=g))
        self.register_buffer("running_mean", torch.randn(4 * H, generator=g))
        self.register_buffer("running_var", torch.rand(4 * H, generator=g) + 0.5)

    def forward(self, x, hidden_gates, cx):
        gates = aten.mm.dtype(x.half(), self.w.half(), torch.float32)
        bn = aten.cudnn_batch_norm(gates, self.bn_weight, self.bn_bias, self.running_mean, self.running_var,
                                   True, 0.1, 1e-5)
        bn_eval = aten.miopen_batch_norm(gates, self.bn_weight, self.bn_bias, self.running_mean,
                                         self.running_var, False, 0.1, 1e-5)
        hy, cy, _ = aten._thnn_fused_lstm_cell(bn[0], hidden_gates, cx, self.gate_bias, self.gate_bias)
        kept, mask = aten._fused_dropout(hy, 1.0)
        return bn[0], bn[1], bn_eval[0], hy, cy, kept, mask


def test_a_model_calling_gpu_only_ops_converts_on_meta_and_runs_with_its_weights():
    module = _GpuKernels()
    x, hidden_gates, cx = _randn(3, torch.float32, (B, 5), (B, 4 * H), (B, H))
    on_meta = torch.export.export(_GpuKernels().to("meta"), tuple(t.to("meta") for t in (x, hidden_gates, cx)))
    model = jaxport.from_exported_program(on_meta)
    ops = {node.op for node in model.program.nodes}
    assert {"aten.mm.dtype", "aten.cudnn_batch_norm.default", "aten.miopen_batch_norm.default",
            "aten._thnn_fused_lstm_cell.default", "aten._fused_dropout.default"} <= ops
    model.load_weights(module)
    out = model(x, hidden_gates, cx)

    with torch.no_grad():
        gates = x.half().double() @ module.w.half().double()
        params = [t.double() for t in (module.bn_weight, module.bn_bias, module.running_mean, module.running_var)]
        bn, mean, _ = aten.native_batch_norm(gates, *params[:2], params[2].clone(), params[3].clone(), True, 0.1,
                                             1e-5)
        bn_eval = aten.native_batch_norm(gates, *params, False, 0.1, 1e-5)[0]
        bias = module.gate_bias.double()
        hy, cy = _lstm_reference(bn + hidden_gates.double(), cx.double(), bias, bias)
    for actual, want in zip(out, (bn, mean, bn_eval, hy, cy, hy)):
        _close(actual, want, 1e-4)
    assert np.asarray(out[6]).dtype == np.uint8 and np.asarray(out[6]).all()
