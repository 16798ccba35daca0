"""Lowerings OpInfo cannot check, called directly and compared with PyTorch eager: core ATen
ops no OpInfo sample reaches, and ops whose OpInfo samples draw random inputs inside the graph
(here they get fixed ones).

Each test builds real torch inputs (backward ops take theirs from a forward call), runs
`torch.ops.aten.<op>` eagerly, and calls the lowering under `jax.jit` the way jaxport's
interpreter does: positional arguments as in the schema, tensors as JAX arrays, dtypes as
canonical NumPy dtypes. JAX's default x64-off mode: int64 compares as int32, float64 as float32.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from jaxport import dtypes
from jaxport.ops import registry

F32, F16, BF16 = torch.float32, torch.float16, torch.bfloat16
I64, I32 = torch.int64, torch.int32

#: (rtol, atol) by result dtype; XLA's CPU math differs from PyTorch's by a few ulp.
TOLERANCES = {F16: (1e-3, 1e-3), BF16: (1.6e-2, 1e-2)}

#: Output masks of the normalization and convolution backward ops, with readable ids.
MASKS = {"TTT": (True, True, True), "TFF": (True, False, False),
         "FTF": (False, True, False), "FFT": (False, False, True)}


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def _jax(value):
    """A torch argument as the interpreter passes it to a lowering."""
    if isinstance(value, torch.Tensor):
        if value.dtype == BF16:
            return jnp.asarray(value.float().numpy()).astype(jnp.bfloat16)
        return jnp.asarray(value.numpy())
    if isinstance(value, torch.dtype):
        return np.dtype(jax.dtypes.canonicalize_dtype(dtypes.numpy_dtype(value)))
    if isinstance(value, (list, tuple)):
        return type(value)(_jax(v) for v in value)
    if isinstance(value, dict):
        return {k: _jax(v) for k, v in value.items()}
    return value


def _jitted(fn, args, kwargs):
    """`fn(*args, **kwargs)` under jax.jit, with only the arrays traced (as in a converted model)."""
    leaves, tree = jax.tree_util.tree_flatten((args, kwargs))
    traced = [i for i, leaf in enumerate(leaves) if isinstance(leaf, jax.Array)]

    def run(*arrays):
        filled = list(leaves)
        for i, x in zip(traced, arrays):
            filled[i] = x
        a, k = jax.tree_util.tree_unflatten(tree, filled)
        return fn(*a, **k)

    return jax.jit(run)(*[leaves[i] for i in traced])


def _assert_same(got, want, tol):
    if isinstance(want, (tuple, list)):
        assert isinstance(got, (tuple, list)) and len(got) == len(want)
        for g, w in zip(got, want):
            _assert_same(g, w, tol)
    elif not isinstance(want, torch.Tensor):
        assert got == want and type(got) is type(want)
    else:
        assert got is not None
        assert got.dtype == jax.dtypes.canonicalize_dtype(dtypes.numpy_dtype(want.dtype))
        assert tuple(got.shape) == tuple(want.shape)
        rtol, atol = tol or TOLERANCES.get(want.dtype, (1e-5, 1e-5))
        if want.dtype == BF16:
            got, want = got.astype(jnp.float32), want.float()
        torch.testing.assert_close(torch.from_numpy(np.array(got)), want, rtol=rtol, atol=atol,
                                   check_dtype=False, equal_nan=True)


def check(op, *args, tol=None, mask=None, jit=True, reference_dtype=None, **kwargs):
    """Compare `aten.<op>(*args, **kwargs)` in PyTorch eager with jaxport's lowering of it.

    `tol` overrides the dtype's (rtol, atol). With an output `mask`, the outputs it leaves out
    must be None: PyTorch eager sometimes computes them anyway, but they are undefined.
    `jit=False` calls the lowering eagerly (for ops that return Python ints). With
    `reference_dtype`, PyTorch computes in that dtype and its outputs are rounded back.
    """
    name, overload = op.split(".")
    torch_op = getattr(getattr(torch.ops.aten, name), overload)
    if reference_dtype is None:
        want = torch_op(*args, **kwargs)
    else:
        wide = [a.to(reference_dtype) if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args]
        narrow = next(a.dtype for a in args if isinstance(a, torch.Tensor) and a.is_floating_point())
        want = torch_op(*wide, **kwargs)
        want = want.to(narrow) if isinstance(want, torch.Tensor) else type(want)(w.to(narrow) for w in want)
    lowering, args, kwargs = registry.lookup(f"aten.{op}"), _jax(args), _jax(kwargs)
    got = _jitted(lowering, args, kwargs) if jit else lowering(*args, **kwargs)
    if mask is not None:
        want = [w if keep else None for w, keep in zip(want, mask)]
    _assert_same(got, want, tol)


def randn(*shape, dtype=F32):
    return torch.randn(shape).to(dtype)


def _id(value):
    return "x".join(map(str, value)) if isinstance(value, (tuple, list)) else str(value)


def masked(cases, *, weighted=lambda values: True):
    """Each case crossed with the output masks. Cases without a weight get grad_input only:
    PyTorch eager raises for weight or bias gradients without a weight."""
    return [pytest.param(*case.values, mask, id=f"{case.id}-{name}")
            for case in cases for name, mask in MASKS.items()
            if weighted(case.values) or name == "TFF"]


# -- pooling, sampling, padding --------------------------------------------------------------


@pytest.mark.parametrize("shape, out, dtype", [
    ((2, 3, 7, 9), (3, 4), F32),
    ((3, 8, 8), (4, 4), F32),
    ((1, 2, 5, 5), (5, 5), F32),
    ((1, 1, 4, 6), (1, 1), F32),
    ((2, 2, 6, 5), (4, 3), F16),
    ((2, 2, 6, 5), (4, 3), BF16),
    ((0, 2, 4, 4), (2, 2), F32),
], ids=_id)
def test_adaptive_avg_pool2d_backward(shape, out, dtype):
    x = randn(*shape, dtype=dtype)
    grad = torch.randn_like(torch.ops.aten._adaptive_avg_pool2d(x, out))
    check("_adaptive_avg_pool2d_backward.default", grad, x)


@pytest.mark.parametrize("shape, kernel, stride, padding, ceil_mode, include_pad, divisor, dtype", [
    pytest.param((2, 3, 8, 8), [2, 2], [2, 2], [0, 0], False, True, None, F32, id="k2s2"),
    pytest.param((1, 2, 7, 9), [3, 2], [2, 1], [1, 1], False, True, None, F32, id="pad-include"),
    pytest.param((1, 2, 7, 9), [3, 3], [2, 2], [1, 1], False, False, None, F32, id="pad-exclude"),
    pytest.param((1, 2, 7, 9), [3, 3], [2, 2], [1, 0], True, False, None, F32, id="ceil-exclude"),
    pytest.param((1, 2, 8, 7), [3, 3], [3, 3], [1, 1], True, True, None, F32, id="ceil-include"),
    pytest.param((2, 6, 6), [2, 3], [], [0, 0], False, True, None, F32, id="unbatched-no-stride"),
    pytest.param((1, 2, 6, 6), [3, 3], [1, 1], [1, 1], False, True, 4, F32, id="divisor-override"),
    pytest.param((2, 3, 8, 8), [2, 2], [2, 2], [1, 1], False, True, None, F16, id="float16"),
    pytest.param((2, 3, 8, 8), [2, 2], [2, 2], [1, 1], False, False, None, BF16, id="bfloat16"),
])
def test_avg_pool2d_backward(shape, kernel, stride, padding, ceil_mode, include_pad, divisor, dtype):
    x = randn(*shape, dtype=dtype)
    args = (kernel, stride, padding, ceil_mode, include_pad, divisor)
    grad = torch.randn_like(torch.ops.aten.avg_pool2d(x, *args))
    check("avg_pool2d_backward.default", grad, x, *args)


@pytest.mark.parametrize("shape, kernel, stride, padding, include_pad", [
    pytest.param((1, 4, 7, 7), [1280, 1280], [1280, 1280], [0, 0], True, id="efficientnet-head"),
    pytest.param((2, 3, 5, 9), [10, 4], [3, 5], [2, 1], True, id="long-rows-pad-include"),
    pytest.param((2, 3, 5, 9), [10, 30], [3, 31], [2, 1], False, id="long-both-pad-exclude"),
])
def test_avg_pool2d_kernel_longer_than_its_input(shape, kernel, stride, padding, include_pad):
    x = randn(*shape)
    x[0, 0, 0, 0], x[-1, -1, -1, -1] = -0.0, float("inf")
    check("avg_pool2d.default", x, kernel, stride, padding, True, include_pad)
    # Taps past the input's end are cut from the window: it visits no more than the input.
    lowered = registry.lookup("aten.avg_pool2d.default")
    jaxpr = jax.make_jaxpr(lambda v: lowered(v, kernel, stride, padding, True, include_pad))(_jax(x))
    (window,) = [e.params["window_dimensions"] for e in jaxpr.eqns if e.primitive.name.startswith("reduce_window")]
    assert all(w <= n + p for w, n, p in zip(window[-2:], shape[-2:], padding))


@pytest.mark.parametrize("shape, output_size, scales, dtype", [
    pytest.param((1, 2, 4, 5), None, [2.0, 2.0], F32, id="scale2"),
    pytest.param((2, 1, 5, 4), None, [1.5, 0.5], F32, id="scale1.5x0.5"),
    pytest.param((2, 1, 5, 4), None, [1.7, 2.3], F32, id="scale-fractional"),
    pytest.param((1, 3, 4, 4), [7, 5], None, F32, id="size7x5"),
    pytest.param((1, 3, 6, 9), [4, 3], None, F32, id="size-down"),
    pytest.param((1, 2, 3, 3), [6, 6], None, torch.uint8, id="uint8"),
    pytest.param((1, 2, 3, 3), None, [2.0, 3.0], F16, id="float16"),
    pytest.param((1, 2, 3, 3), None, [2.0, 3.0], BF16, id="bfloat16"),
    pytest.param((0, 2, 3, 3), [6, 6], None, F32, id="empty-batch"),
])
def test_upsample_nearest2d_vec(shape, output_size, scales, dtype):
    x = (randn(*shape) * 50).abs().to(dtype)
    check("upsample_nearest2d.vec", x, output_size, scales)


@pytest.mark.parametrize("op, shape, padding, dtype", [
    pytest.param(op, shape, padding, dtype, id=f"{op[:-2]}-{_id(shape)}-{_id(padding)}-{str(dtype)[6:]}")
    for op, shape, padding, dtype in [
        ("reflection_pad1d", (2, 3, 6), [2, 3], F32),
        ("reflection_pad1d", (3, 5), [4, 0], F32),
        ("reflection_pad1d", (2, 3, 6), [-2, 1], F32),
        ("reflection_pad1d", (1, 2, 4), [3, 3], I64),
        ("reflection_pad2d", (2, 3, 5, 6), [1, 2, 3, 4], F32),
        ("reflection_pad2d", (3, 4, 4), [3, 0, 0, 3], F32),
        ("reflection_pad2d", (1, 2, 5, 6), [-1, 2, 2, -3], F32),
        ("reflection_pad2d", (1, 2, 5, 6), [1, 2, 2, 1], BF16),
        ("reflection_pad3d", (1, 2, 3, 4, 5), [1, 2, 2, 1, 0, 2], F32),
        ("reflection_pad3d", (2, 4, 4, 4), [3, 3, 1, 1, 2, 2], F32),
        ("reflection_pad3d", (1, 1, 4, 4, 4), [-1, 2, 0, -2, 1, 1], F32),
        ("reflection_pad3d", (1, 1, 3, 3, 3), [1, 1, 1, 1, 1, 1], F16),
        ("replication_pad2d", (2, 3, 5, 6), [1, 2, 3, 4], F32),
        ("replication_pad2d", (3, 1, 1), [2, 2, 3, 3], F32),
        ("replication_pad2d", (1, 2, 5, 6), [-1, 2, 2, -3], F32),
        ("replication_pad2d", (1, 2, 3, 3), [2, 1, 0, 2], I32),
        ("replication_pad2d", (1, 2, 3, 3), [2, 1, 0, 2], F16),
        ("replication_pad3d", (1, 2, 3, 4, 5), [1, 2, 2, 1, 0, 2], F32),
        ("replication_pad3d", (2, 2, 2, 2), [4, 0, 1, 1, 0, 3], F32),
        ("replication_pad3d", (1, 1, 4, 4, 4), [-1, 2, 0, -2, 1, 1], F32),
        ("replication_pad3d", (1, 1, 2, 3, 2), [1, 1, 2, 0, 1, 1], BF16),
    ]
])
def test_pad(op, shape, padding, dtype):
    check(f"{op}.default", (randn(*shape) * 100).to(dtype), padding)


# -- convolution -----------------------------------------------------------------------------


CONVS = [  # input shape, weight shape, stride, padding, dilation, groups
    pytest.param((2, 3, 10), (4, 3, 3), [1], [0], [1], 1, id="1d"),
    pytest.param((2, 4, 9), (6, 2, 3), [2], [1], [2], 2, id="1d-stride-dilation-groups"),
    pytest.param((2, 3, 8, 7), (5, 3, 3, 2), [1, 1], [1, 0], [1, 1], 1, id="2d"),
    pytest.param((1, 4, 9, 9), (4, 1, 3, 3), [2, 2], [1, 1], [1, 1], 4, id="2d-depthwise-stride"),
    pytest.param((2, 6, 8, 8), (4, 3, 2, 2), [1, 2], [0, 1], [2, 1], 2, id="2d-groups-dilation"),
    pytest.param((1, 2, 5, 6, 4), (3, 2, 2, 3, 2), [1, 2, 1], [1, 0, 1], [1, 1, 1], 1, id="3d"),
]


CPU_CONVS = [  # input shape, weight shape, stride, padding, dilation, groups: the CPU's own formulations
    pytest.param((2, 8, 11, 9), (8, 1, 3, 3), [1, 1], [1, 1], [1, 1], 8, id="depthwise-3x3"),
    pytest.param((1, 6, 12, 12), (6, 1, 5, 5), [2, 2], [2, 2], [1, 1], 6, id="depthwise-5x5-stride"),
    pytest.param((2, 4, 13, 10), (4, 1, 7, 7), [1, 1], [3, 3], [1, 1], 4, id="depthwise-7x7"),
    pytest.param((1, 4, 10, 10), (8, 1, 3, 3), [1, 2], [0, 1], [2, 1], 4, id="depthwise-multiplier-dilation"),
    pytest.param((2, 5, 17), (5, 1, 9), [1], [4], [1], 5, id="depthwise-1d"),
    pytest.param((1, 3, 5, 6, 4), (3, 1, 3, 3, 3), [1, 1, 1], [1, 1, 1], [1, 1, 1], 3, id="depthwise-3d"),
    pytest.param((0, 4, 6, 6), (4, 1, 3, 3), [1, 1], [1, 1], [1, 1], 4, id="depthwise-empty-batch"),
    pytest.param((2, 8, 9, 9), (12, 2, 3, 3), [1, 1], [1, 1], [1, 1], 4, id="grouped-4"),
    pytest.param((1, 16, 7, 7), (16, 2, 3, 3), [2, 2], [1, 1], [1, 1], 8, id="grouped-8-stride"),
    pytest.param((2, 8, 9), (8, 2, 80), [1], [40], [1], 4, id="grouped-long-kernel-1d"),
    pytest.param((3, 8, 9, 7), (5, 8, 1, 1), [1, 1], [0, 0], [1, 1], 1, id="pointwise"),
    pytest.param((2, 6, 9, 8), (4, 6, 1, 1), [2, 2], [0, 0], [1, 1], 1, id="pointwise-stride"),
    pytest.param((2, 6, 11), (4, 6, 1), [1], [0], [1], 1, id="pointwise-1d"),
    pytest.param((1, 4, 3, 5, 4), (6, 4, 1, 1, 1), [1, 1, 1], [0, 0, 0], [1, 1, 1], 1, id="pointwise-3d"),
    pytest.param((0, 4, 5, 5), (6, 4, 1, 1), [1, 1], [0, 0], [1, 1], 1, id="pointwise-empty-batch"),
    pytest.param((1, 4, 3, 3), (40, 4, 3, 3), [1, 1], [1, 1], [1, 1], 1, id="weight-bound-3x3"),
    pytest.param((2, 3, 7, 7), (64, 3, 3, 3), [2, 2], [1, 1], [2, 2], 1, id="weight-bound-stride-dilation"),
    pytest.param((1, 4, 6), (16, 4, 3), [1], [0], [1], 1, id="weight-bound-1d"),
    pytest.param((1, 2, 3, 3, 3), (30, 2, 2, 2, 2), [1, 1, 1], [0, 1, 0], [1, 1, 1], 1, id="weight-bound-3d"),
    pytest.param((0, 4, 3, 3), (8, 4, 3, 3), [1, 1], [1, 1], [1, 1], 1, id="weight-bound-empty-batch"),
]


@pytest.mark.parametrize("in_shape, w_shape, stride, padding, dilation, groups", CPU_CONVS)
@pytest.mark.parametrize("dtype", [F32, F16, BF16], ids=str)
def test_cpu_convolution_formulations(in_shape, w_shape, stride, padding, dilation, groups, dtype):
    x, w, b = randn(*in_shape, dtype=dtype), randn(*w_shape, dtype=dtype), randn(w_shape[0], dtype=dtype)
    geometry = (stride, padding, dilation, False, [0] * len(stride), groups)
    # Up to 49 products per output, summed in another order than PyTorch's kernels. Half
    # precision against PyTorch's float32 rounded once, as its AVX2 kernels compute: its oneDNN
    # kernels on AVX-512 give the long grouped 1-d kernel 12.3 away from float64 in bfloat16.
    check("convolution.default", x, w, b, *geometry, tol=(1e-5, 1e-5) if dtype == F32 else None,
          reference_dtype=None if dtype == F32 else F32)


@pytest.mark.parametrize("special", [float("nan"), float("inf"), float("-inf")], ids=str)
def test_depthwise_convolution_special_values(special):
    """A NaN or infinity reaches exactly the outputs whose window holds it, as in PyTorch; an
    infinite weight makes NaN where it meets padding's zeros too (0 * inf)."""
    x, w = randn(1, 4, 8, 8), randn(4, 1, 3, 3)
    x[0, 1, 3, 4] = special
    x[0, 2, 0, 0] = special
    w[3, 0, 1, 1] = special
    geometry = ([1, 1], [1, 1], [1, 1], False, [0, 0], 4)
    check("convolution.default", x, w, None, *geometry, tol=(1e-5, 1e-5))


@pytest.mark.parametrize("special", [float("nan"), float("inf"), float("-inf")], ids=str)
def test_weight_bound_convolution_special_values(special):
    """As one product over (channel, tap): a NaN or infinity reaches the outputs whose window
    holds it, an infinite weight makes NaN where it meets padding's zeros, as in PyTorch."""
    x, w = randn(1, 4, 3, 3), randn(40, 4, 3, 3)
    x[0, 1, 0, 2] = special
    w[7, 2, 0, 0] = special
    check("convolution.default", x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1, tol=(1e-5, 1e-5))


def _convolution_eqns(in_shape, w_shape, groups, platform="cpu", padding=(1, 1)):
    """The equations of `aten.convolution` as `platform` compiles it: of each platform-dependent
    choice (`lax.platform_dependent`), the branch that platform takes."""
    lowering = registry.lookup("aten.convolution.default")
    closed = jax.make_jaxpr(lambda x, w: lowering(x, w, None, [1] * (len(in_shape) - 2), list(padding),
                                                  [1] * (len(in_shape) - 2), False, [0] * (len(in_shape) - 2), groups))(
        jnp.ones(in_shape), jnp.ones(w_shape))

    def walk(jaxpr):
        for eqn in jaxpr.eqns:
            choices = eqn.params.get("branches_platforms") if eqn.primitive.name == "cond" else None
            if choices:
                index = next(i for i, names in enumerate(choices) if names is None or platform in names)
                yield from walk(eqn.params["branches"][index].jaxpr)
            elif eqn.primitive.name != "platform_index":
                yield eqn
    return list(walk(closed.jaxpr))


def _groups_used(eqns) -> list[int]:
    return [eqn.params["feature_group_count"] for eqn in eqns if eqn.primitive.name == "conv_general_dilated"]


def test_grouped_convolutions_avoid_xlas_grouped_path_on_cpu():
    """On CPU, depthwise convolutions become shifted multiply-adds and other grouped ones one
    convolution per group: no `feature_group_count > 1` reaches XLA (its slow path there);
    elsewhere (cuDNN) they stay one grouped convolution, in the same program."""
    for in_shape, w_shape, groups in [((1, 8, 9, 9), (8, 1, 3, 3), 8), ((1, 8, 9, 9), (8, 2, 3, 3), 4)]:
        on_cpu = _convolution_eqns(in_shape, w_shape, groups)
        assert on_cpu and all(g == 1 for g in _groups_used(on_cpu)), _groups_used(on_cpu)
        assert _groups_used(_convolution_eqns(in_shape, w_shape, groups, platform="cuda")) == [groups]


def test_weight_bound_convolutions_are_one_product_on_cpu():
    """More output channels than output positions: one matrix product with the weights as
    they lie (no per-call kernel transpose); otherwise XLA's convolution."""
    def primitives(in_shape, w_shape, platform="cpu"):
        return {eqn.primitive.name for eqn in _convolution_eqns(in_shape, w_shape, 1, platform)}

    weight_bound = primitives((1, 512, 7, 7), (512, 512, 3, 3))
    assert "dot_general" in weight_bound and "conv_general_dilated" not in weight_bound
    assert "conv_general_dilated" in primitives((1, 512, 7, 7), (512, 512, 3, 3), platform="cuda")
    assert "conv_general_dilated" in primitives((1, 64, 56, 56), (64, 64, 3, 3))


def test_grouped_convolutions_with_long_kernels_stay_grouped():
    """wav2vec2's positional convolution (128 taps over a few dozen frames) runs faster as one
    grouped convolution than as one convolution per group."""
    convolutions = _groups_used(_convolution_eqns((1, 64, 49), (64, 4, 128), 16, padding=(64,)))
    assert convolutions == [16], convolutions


@pytest.mark.parametrize("in_shape, w_shape, stride, padding, dilation, groups, mask", masked(CONVS))
def test_convolution_backward(in_shape, w_shape, stride, padding, dilation, groups, mask):
    x, w, b = randn(*in_shape), randn(*w_shape), randn(w_shape[0])
    geometry = (stride, padding, dilation, False, [0] * len(stride), groups)
    grad = torch.randn_like(torch.ops.aten.convolution(x, w, b, *geometry))
    # Sums of up to a few hundred products: float32 accumulation order differs.
    check("convolution_backward.default", grad, x, w, [w_shape[0]], *geometry, list(mask),
          mask=mask, tol=(1e-5, 1e-4))


@pytest.mark.parametrize("dtype", [F16, BF16], ids=str)
def test_convolution_backward_low_precision(dtype):
    x, w = randn(2, 3, 6, 6, dtype=dtype), randn(4, 3, 3, 3, dtype=dtype)
    geometry = ([1, 1], [1, 1], [1, 1], False, [0, 0], 1)
    grad = torch.randn_like(torch.ops.aten.convolution(x, w, None, *geometry))
    # Half-precision rounding of sums of up to 72 products.
    tol = (1e-2, 1e-2) if dtype == F16 else (3e-2, 5e-2)
    check("convolution_backward.default", grad, x, w, None, *geometry, [True, True, True], tol=tol)


@pytest.mark.parametrize("in_shape, w_shape, stride, padding, output_padding, groups", [
    pytest.param((2, 4, 5, 5), (4, 3, 3, 3), [2, 2], [1, 1], [1, 0], 1, id="2d-stride-outpad"),
    pytest.param((1, 4, 6), (4, 2, 3), [1], [0], [0], 2, id="1d-groups"),
])
def test_convolution_backward_transposed(in_shape, w_shape, stride, padding, output_padding, groups):
    x, w = randn(*in_shape), randn(*w_shape)
    geometry = (stride, padding, [1] * len(stride), True, output_padding, groups)
    grad = torch.randn_like(torch.ops.aten.convolution(x, w, None, *geometry))
    check("convolution_backward.default", grad, x, w, [w_shape[1] * groups], *geometry,
          [True, True, True], tol=(1e-5, 1e-4))


@pytest.mark.parametrize("channels, size, kernel, dilation, padding, stride, batched, dtype", [
    pytest.param(2, [6, 7], [2, 3], [1, 1], [0, 0], [1, 1], True, F32, id="basic"),
    pytest.param(3, [8, 8], [3, 3], [1, 1], [1, 1], [2, 2], True, F32, id="pad-stride"),
    pytest.param(1, [9, 7], [2, 2], [2, 1], [1, 0], [1, 2], True, F32, id="dilation"),
    pytest.param(2, [5, 5], [3, 3], [1, 1], [1, 1], [1, 1], False, F32, id="unbatched"),
    pytest.param(2, [5, 5], [3, 3], [1, 1], [1, 1], [1, 1], True, F16, id="float16"),
    pytest.param(2, [5, 5], [3, 3], [1, 1], [1, 1], [1, 1], True, BF16, id="bfloat16"),
])
def test_col2im(channels, size, kernel, dilation, padding, stride, batched, dtype):
    x = randn(*([2] if batched else []), channels, *size, dtype=dtype)
    cols = torch.randn_like(torch.ops.aten.im2col(x, kernel, dilation, padding, stride))
    # PyTorch's CPU kernel sums up to 9 overlapping float16 values in float16; jaxport in float32.
    tol = (5e-3, 5e-3) if dtype == F16 else None
    check("col2im.default", cols, size, kernel, dilation, padding, stride, tol=tol)


# -- normalization ---------------------------------------------------------------------------


@pytest.mark.parametrize("shape, affine, dtype", [
    pytest.param((6, 3), True, F32, id="2d"),
    pytest.param((4, 3, 5), False, F32, id="3d-plain"),
    pytest.param((2, 3, 4, 4), True, F32, id="4d"),
    pytest.param((2, 2, 3, 2, 2), False, F32, id="5d-plain"),
    pytest.param((2, 3, 4, 4), True, F16, id="float16"),
    pytest.param((2, 3, 4, 4), True, BF16, id="bfloat16"),
])
def test_native_batch_norm_legit_no_stats(shape, affine, dtype):
    x = randn(*shape, dtype=dtype) * 3 + 1
    w, b = (randn(shape[1], dtype=dtype), randn(shape[1], dtype=dtype)) if affine else (None, None)
    check("_native_batch_norm_legit.no_stats", x, w, b, True, 0.1, 1e-5)



@pytest.mark.parametrize("shape, dim, dtype", [
    pytest.param((6, 3, 5), 0, F32, id="dim0"),  # nn.utils.parametrizations.weight_norm's default
    pytest.param((6, 3, 5), 2, F32, id="last"),  # wav2vec2's positional conv
    pytest.param((6, 3, 5), 1, F32, id="middle"),
    pytest.param((6, 3, 5), -1, F32, id="whole"),  # -1: the norm of all of v
    pytest.param((4, 8), 0, BF16, id="bfloat16"),
])
def test_weight_norm(shape, dim, dtype):
    v = randn(*shape, dtype=dtype)
    g = randn(*[1] * len(shape), dtype=dtype) if dim == -1 else randn(
        *[n if d == dim else 1 for d, n in enumerate(shape)], dtype=dtype)
    check("_weight_norm.default", v, g, dim)

LAYER_NORMS = [
    pytest.param((4, 6), [6], True, F32, id="2d"),
    pytest.param((2, 3, 4, 5), [4, 5], True, F32, id="4d-last2"),
    pytest.param((3, 5), [3, 5], True, F32, id="all-dims"),
    pytest.param((2, 3, 8), [8], False, F32, id="no-affine"),
    pytest.param((4, 16), [16], True, F16, id="float16"),
    pytest.param((4, 16), [16], True, BF16, id="bfloat16"),
]


@pytest.mark.parametrize("shape, normalized, affine, dtype, mask",
                         masked(LAYER_NORMS, weighted=lambda v: v[2]))
def test_native_layer_norm_backward(shape, normalized, affine, dtype, mask):
    x = randn(*shape, dtype=dtype)
    w, b = (randn(*normalized, dtype=dtype), randn(*normalized, dtype=dtype)) if affine else (None, None)
    out, mean, rstd = torch.ops.aten.native_layer_norm(x, normalized, w, b, 1e-5)
    grad = torch.randn_like(out)
    # float32: the mean-subtracted gradient cancels to ~1e-5 absolute, accumulation order differs.
    check("native_layer_norm_backward.default", grad, x, normalized, mean, rstd, w, b, list(mask),
          mask=mask, tol=(1e-4, 1e-4) if dtype == F32 else None)


GROUP_NORMS = [
    pytest.param((2, 6, 4, 4), 3, True, F32, id="4d"),
    pytest.param((3, 4, 5), 2, True, F32, id="3d"),
    pytest.param((4, 6), 2, True, F32, id="2d"),
    pytest.param((2, 4, 3, 3), 1, False, F32, id="one-group-no-weight"),
    pytest.param((2, 4, 2, 2, 2), 4, True, F32, id="5d-instance"),
    pytest.param((2, 4, 4, 4), 2, True, F16, id="float16"),
    pytest.param((2, 4, 4, 4), 2, True, BF16, id="bfloat16"),
]


@pytest.mark.parametrize("shape, groups, affine, dtype, mask",
                         masked(GROUP_NORMS, weighted=lambda v: v[2]))
def test_native_group_norm_backward(shape, groups, affine, dtype, mask):
    n, c, hxw = shape[0], shape[1], int(np.prod(shape[2:]))
    x = randn(*shape, dtype=dtype) * 2 - 1
    w, b = (randn(c, dtype=dtype), randn(c, dtype=dtype)) if affine else (None, None)
    out, mean, rstd = torch.ops.aten.native_group_norm(x, w, b, n, c, hxw, groups, 1e-5)
    grad = torch.randn_like(out)
    # float32: as for layer norm.
    check("native_group_norm_backward.default", grad, x, mean, rstd, w, n, c, hxw, groups,
          list(mask), mask=mask, tol=(1e-4, 1e-4) if dtype == F32 else None)


# -- products --------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(5, 8), (2, 3, 8), (2, 0, 3, 8), (8,)], ids=_id)
@pytest.mark.parametrize("bias", [False, True])
def test_linear_multiplies_one_matrix_of_rows(shape, bias):
    """Inputs with leading dims multiply as one [rows, in] matrix with the [out, in] weight: a
    frozen model's constant weight then keeps that layout in XLA:CPU (not transposed to
    [in, out], where its products are up to 1.7x slower)."""
    x, weight = randn(*shape), randn(6, 8)
    args = (x, weight, randn(6)) if bias else (x, weight)
    check("linear.default", *args)
    jaxpr = jax.make_jaxpr(registry.lookup("aten.linear.default"))(*_jax(args))
    products = [e for e in jaxpr.eqns if e.primitive.name == "dot_general"]
    assert [e.invars[0].aval.ndim for e in products] == [min(len(shape), 2)]
    assert [e.params["dimension_numbers"][0][1] for e in products] == [(1,)]  # the weight's `in`


# -- embedding -------------------------------------------------------------------------------


@pytest.mark.parametrize("index_shape, num_weights, padding_idx, scale, dtype", [
    pytest.param((7,), 5, -1, False, F32, id="1d"),
    pytest.param((3, 4), 6, -1, False, F32, id="2d"),
    pytest.param((2, 3, 4), 4, 2, False, F32, id="3d-padding-idx"),
    pytest.param((5, 6), 4, -1, True, F32, id="scale-by-freq"),
    pytest.param((5, 6), 4, 0, True, F32, id="scale-by-freq-padding-idx"),
    pytest.param((0,), 3, -1, False, F32, id="empty"),
    pytest.param((4, 5), 3, 1, True, F16, id="float16"),
    pytest.param((4, 5), 3, 1, True, BF16, id="bfloat16"),
])
def test_embedding_dense_backward(index_shape, num_weights, padding_idx, scale, dtype):
    indices = torch.randint(0, num_weights, index_shape)
    grad = torch.randn_like(torch.ops.aten.embedding(randn(num_weights, 3, dtype=dtype), indices))
    check("embedding_dense_backward.default", grad, indices, num_weights, padding_idx, scale)


INDICES = [1, 2, 4, 5, 4, 3, 2, 9]


@pytest.mark.parametrize("indices, offsets, mode, weighted, last, padding_idx, dtype", [
    pytest.param(INDICES, [0, 4], 0, False, False, -1, F32, id="sum"),
    pytest.param(INDICES, [0, 4], 1, False, False, -1, F32, id="mean"),
    pytest.param(INDICES, [0, 4], 2, False, False, -1, F32, id="max"),
    pytest.param(INDICES, [0, 3, 8], 0, True, True, -1, F32, id="sum-weighted-last"),
    pytest.param(INDICES, [0, 2, 2, 5], 1, False, False, -1, F32, id="mean-empty-bag"),
    pytest.param(INDICES, [0, 2, 2, 5], 2, False, False, -1, F32, id="max-empty-bag"),
    pytest.param(INDICES, [0, 4, 6], 0, False, False, 4, F32, id="sum-padding-idx"),
    pytest.param(INDICES, [0, 4, 8], 1, False, True, 2, F32, id="mean-padding-idx-last"),
    pytest.param([4, 4, 3, 4], [0, 1], 2, False, False, 4, F32, id="max-padding-idx"),
    pytest.param([], [0, 0], 0, False, False, -1, F32, id="no-indices"),
    pytest.param(INDICES, [0, 3, 5], 0, True, False, -1, F16, id="sum-weighted-float16"),
    pytest.param(INDICES, [0, 3, 5], 1, False, False, -1, F16, id="mean-float16"),
    pytest.param(INDICES, [0, 3, 5], 2, False, False, 3, BF16, id="max-bfloat16"),
    # No bfloat16 sum: PyTorch's eager kernel then leaves offset2bag empty, but its meta function,
    # whose shapes an exported graph records (and jaxport follows), does not.
    pytest.param(INDICES, [0, 3, 5], 1, False, False, 3, BF16, id="mean-bfloat16"),
])
def test_embedding_bag(indices, offsets, mode, weighted, last, padding_idx, dtype):
    weight = randn(10, 3, dtype=dtype)
    indices, offsets = torch.tensor(indices, dtype=I64), torch.tensor(offsets)
    per_sample = randn(len(indices), dtype=dtype) if weighted else None
    check("_embedding_bag.default", weight, indices, offsets, False, mode, False, per_sample, last,
          padding_idx)


# -- scatter, elementwise --------------------------------------------------------------------


@pytest.mark.parametrize("shape, dim, index_shape, value, dtype", [
    pytest.param((4, 5), 0, (2, 5), 2.5, F32, id="dim0-float"),
    pytest.param((4, 5), -1, (3, 3), -7, I64, id="dim-neg1-int64"),
    pytest.param((3, 4, 5), 1, (2, 2, 5), 9, I32, id="3d-int32"),
    pytest.param((4, 5), 1, (4, 2), True, torch.bool, id="bool"),
    pytest.param((4, 5), 0, (2, 3), 1.5, F16, id="float16"),
    pytest.param((4, 5), 0, (2, 3), 1.5, BF16, id="bfloat16"),
    pytest.param((), 0, (), 3.0, F32, id="0d"),
    pytest.param((4, 5), 0, (0, 5), 3.0, F32, id="empty-index"),
])
def test_scatter_value(shape, dim, index_shape, value, dtype):
    x = randn(*shape).mul(10).to(dtype)
    index = torch.randint(0, shape[dim] if shape else 1, index_shape)
    check("scatter.value", x, dim, index, value)


@pytest.mark.parametrize("op", ["bitwise_and", "bitwise_or", "bitwise_xor"])
@pytest.mark.parametrize("dtype, other, shape", [
    pytest.param(I64, 0b1011, (3, 4), id="int64"),
    pytest.param(I32, -6, (5,), id="int32-negative"),
    pytest.param(torch.int16, 300, (2, 3), id="int16"),
    pytest.param(torch.int8, -1, (4,), id="int8"),
    pytest.param(torch.uint8, 0xA5, (2, 2), id="uint8"),
    pytest.param(torch.bool, True, (6,), id="bool-true"),
    pytest.param(torch.bool, False, (6,), id="bool-false"),
    pytest.param(torch.bool, 6, (6,), id="bool-int"),
    pytest.param(I32, 12, (), id="0d"),
    pytest.param(I64, 12, (0, 3), id="empty"),
])
def test_bitwise_scalar(op, dtype, other, shape):
    x = (randn(*shape) * 100).to(dtype) if dtype != torch.bool else torch.rand(shape) < 0.5
    check(f"{op}.Scalar", x, other)


@pytest.mark.parametrize("mode", [None, "trunc", "floor"])
@pytest.mark.parametrize("dtype, other", [
    pytest.param(F32, 2.5, id="float32"),
    pytest.param(F32, -0.75, id="float32-negative"),
    pytest.param(F32, 0.0, id="float32-by-zero"),
    pytest.param(I64, 3, id="int64"),
    pytest.param(I32, -4, id="int32-negative"),
    pytest.param(I64, 2.5, id="int64-by-float"),
    pytest.param(torch.uint8, 3, id="uint8"),
    pytest.param(F16, 1.5, id="float16"),
    pytest.param(BF16, -3, id="bfloat16"),
])
def test_div_scalar_mode(dtype, other, mode):
    values = torch.tensor([-50.0, -7, -1, 0, 1, 7, 50, -6.5, 6.5]).view(3, 3)
    x = (values.abs() if dtype == torch.uint8 else values).to(dtype)
    check("div.Scalar_mode", x, other, rounding_mode=mode)


@pytest.mark.parametrize("a_shape, b_shape, dtype, out_dtype", [
    pytest.param((3, 4), (3, 4), F32, F32, id="float32"),
    pytest.param((2, 1, 4), (3, 1), F32, F32, id="broadcast"),
    pytest.param((5,), (5,), I64, F32, id="int-inputs"),
    pytest.param((3, 4), (4,), F32, F16, id="into-float16"),
    pytest.param((4,), (4,), F32, torch.float64, id="into-float64"),
    pytest.param((3, 4), (3, 4), F16, F16, id="float16"),
    pytest.param((3, 4), (3, 4), BF16, BF16, id="bfloat16"),
    pytest.param((), (), F32, F32, id="0d"),
    pytest.param((0, 2), (2,), F32, F32, id="empty"),
])
def test_atan2_out(a_shape, b_shape, dtype, out_dtype):
    a, b = (randn(*a_shape) * 5).to(dtype), (randn(*b_shape) * 5).to(dtype)
    out = torch.empty(torch.broadcast_shapes(a_shape, b_shape), dtype=out_dtype)
    check("atan2.out", a, b, out=out)


@pytest.mark.usefixtures("x64_strict")
@pytest.mark.parametrize("op, args, kwargs", [
    pytest.param("bitwise_xor.Scalar", (2**40 + 5,), {}, id="bitwise_xor"),
    pytest.param("bitwise_and.Scalar", (-(2**35) - 1,), {}, id="bitwise_and"),
    pytest.param("div.Scalar_mode", (-(2**33) - 3,), {"rounding_mode": "floor"}, id="div-floor"),
    pytest.param("div.Scalar_mode", (7,), {"rounding_mode": "trunc"}, id="div-trunc"),
    pytest.param("div.Scalar_mode", (2**33,), {"rounding_mode": None}, id="div-true"),
])
def test_int64_beyond_int32(op, args, kwargs):
    """With x64 on, int64 stays int64: values past the int32 range survive, promotion is strict."""
    x = torch.tensor([2**45 + 3, -(2**41) - 7, 0, 12, -1])
    check(op, x, *args, **kwargs)


@pytest.mark.usefixtures("x64_strict")
def test_scatter_value_int64_beyond_int32():
    check("scatter.value", torch.zeros(3, 4, dtype=I64), 1, torch.tensor([[0, 3], [1, 1], [2, 0]]),
          2**50 + 1)


# -- fft, random, symbolic -------------------------------------------------------------------


@pytest.mark.parametrize("shape, dim", [
    pytest.param((3, 7), [1], id="1d-odd"),
    pytest.param((4, 5, 6), [2, 0], id="2d-outer-axes"),
    pytest.param((2, 3, 4), [0, 1, 2], id="3d"),
])
@pytest.mark.parametrize("normalization", [0, 1, 2], ids=["none", "by-sqrt-n", "by-n"])
@pytest.mark.parametrize("onesided", [True, False], ids=["onesided", "full"])
def test_fft_r2c(shape, dim, normalization, onesided):
    # Unnormalized sums of up to 120 terms of order 1: float32 rounding is ~1e-5 absolute.
    check("_fft_r2c.default", randn(*shape), dim, normalization, onesided, tol=(1e-5, 1e-4))


def test_fft_r2c_float64_input():
    # x64 off: a float64 input is float32 in JAX, so the result is complex64.
    check("_fft_r2c.default", randn(4, 6, dtype=torch.float64), [1], 1, True, tol=(1e-5, 1e-5))


@pytest.mark.parametrize("n, dtype", [
    (0, I64), (1, I64), (7, I32), (100, I64), (100, torch.int16), (50, F32),
], ids=_id)
def test_randperm(n, dtype):
    want = torch.ops.aten.randperm.default(n, dtype=dtype)
    lowering = registry.lookup("aten.randperm.default")
    got = jax.jit(lambda key: lowering(n, dtype=_jax(dtype), key=key))(jax.random.key(0))
    assert got.dtype == _jax(dtype) and got.shape == tuple(want.shape) == (n,)
    np.testing.assert_array_equal(np.sort(np.asarray(got)), np.arange(n))


SHAPES = [(), (0,), (5,), (2, 3, 4), (2, 0, 3), (3, 1, 2, 4), (4, 0)]


@pytest.mark.parametrize("shape", SHAPES, ids=_id)
def test_sym_numel(shape):
    check("sym_numel.default", torch.empty(shape), jit=False)


@pytest.mark.parametrize("shape, dim", [
    pytest.param(shape, dim, id=f"{_id(shape)}-dim{dim}")
    for shape in SHAPES if shape for dim in range(-len(shape), len(shape))
])
def test_sym_stride(shape, dim):
    check("sym_stride.int", torch.empty(shape), dim, jit=False)


@pytest.mark.parametrize("op, n", [("special_zeta.default", 2), ("special_zeta.default", 5), ("polygamma.default", 2),
                                   ("polygamma.default", 4)])
def test_zeta_far_below_zero(op, n):
    """Hurwitz zeta (and polygamma through it) at q far below zero, where PyTorch sums millions
    of terms one by one: -4988429.2 is OpInfo's reference sample (jaxport gave -9.7e-27 for
    polygamma(4), PyTorch 74935.5); huge orders, integer and non-integer q, NaN and infinities."""
    q = torch.tensor([-4988429.2, -13437.7, -1001.2, -8.3157, -0.5, -3.0, 0.3, 7.5, float("nan"), float("-inf"),
                      float("inf")], dtype=torch.float64)
    with jax.enable_x64(True):
        if op == "polygamma.default":
            check(op, n, q, tol=(1e-9, 0.0))
        else:
            check(op, torch.full_like(q, n), q, tol=(1e-9, 0.0))
            check(op, torch.full_like(q, 1e20), q, tol=(1e-9, 0.0))


# -- ops OpInfo samples feed random inputs -------------------------------------------------------


def _with_nan(shape, dtype=F32):
    x = randn(*shape, dtype=dtype)
    x.view(-1)[3] = float("nan")  # PyTorch keeps the last NaN of a window
    return x


@pytest.mark.parametrize("shape, kernel, out, dtype", [
    pytest.param((2, 3, 7, 9), (2, 3), (4, 5), F32, id="batched"),
    pytest.param((3, 10, 10), (3, 3), (5, 4), F32, id="unbatched"),
    pytest.param((1, 1, 5, 5), (2, 2), (1, 1), F32, id="one-window"),
    pytest.param((1, 2, 6, 6), (2, 2), (5, 5), F16, id="float16"),
])
def test_fractional_max_pool2d(shape, kernel, out, dtype):
    samples = torch.rand(shape[0] if len(shape) == 4 else 1, shape[-3], 2).to(dtype)
    check("fractional_max_pool2d.default", _with_nan(shape, dtype), list(kernel), list(out), samples)


@pytest.mark.parametrize("shape, kernel, out", [
    pytest.param((2, 2, 6, 7, 8), (2, 2, 3), (3, 4, 5), id="batched"),
    pytest.param((2, 5, 5, 5), (2, 2, 2), (3, 3, 2), id="unbatched"),
])
def test_fractional_max_pool3d(shape, kernel, out):
    samples = torch.rand(shape[0] if len(shape) == 5 else 1, shape[-4], 3)
    check("fractional_max_pool3d.default", _with_nan(shape), list(kernel), list(out), samples)


@pytest.mark.parametrize("shape, size, align_corners", [
    pytest.param((1, 2, 32, 24), (5, 7), False, id="downsample"),
    pytest.param((2, 1, 9, 30), (20, 4), False, id="mixed"),
    pytest.param((1, 3, 17, 17), (6, 6), True, id="align-corners"),
    pytest.param((1, 1, 4, 5), (8, 10), False, id="upsample"),
])
def test_upsample_bilinear2d_aa(shape, size, align_corners):
    """OpInfo has only 7 float samples, mostly upsampling: add strong downsampling."""
    check("_upsample_bilinear2d_aa.default", randn(*shape), list(size), align_corners)



# -- complex views (rotary embeddings written with complex numbers: Llama 4) ---------------------


def _special_values(*shape):
    """Random floats with NaN, ±inf and -0.0 among them, which must pass through unchanged."""
    x = randn(*shape)
    flat = x.view(-1)
    for i, v in enumerate([float("nan"), float("inf"), float("-inf"), -0.0][: flat.numel()]):
        flat[i] = v
    return x


@pytest.mark.parametrize("shape", [(2,), (3, 2), (2, 5, 4, 2), (0, 2), (4, 0, 2)], ids=_id)
def test_view_as_complex(shape):
    check("view_as_complex.default", _special_values(*shape))


@pytest.mark.parametrize("shape", [(), (3,), (2, 5, 4), (0,)], ids=_id)
def test_view_as_real(shape):
    x = torch.complex(_special_values(*shape), randn(*shape))
    check("view_as_real.default", x)


@pytest.mark.parametrize("shapes", [((3, 4), (3, 4)), ((2, 1, 4), (5, 1)), ((), ()), ((0, 3), (3,))], ids=_id)
def test_polar(shapes):
    check("polar.default", _special_values(*shapes[0]).abs(), _special_values(*shapes[1]))


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128])
@pytest.mark.parametrize("shape", [(), (4, 3), (0,)], ids=_id)
def test_angle_of_complex_numbers(shape, dtype):
    """atan2(imag, real) in the real dtype of the same width (the lowering once took the angle
    of the real part alone: 0 or pi), NaN, infinities and signed zeros in either part included."""
    parts = [_special_values(*shape).to(dtype.to_real()), randn(*shape, dtype=dtype.to_real())]
    check("angle.default", torch.complex(*parts))
    check("angle.default", torch.complex(*parts[::-1]))


@pytest.mark.parametrize("shapes", [((3, 4), (3, 4)), ((2, 1, 4), (5, 1)), ((), ()), ((0, 3), (3,))], ids=_id)
def test_complex(shapes):
    check("complex.default", _special_values(*shapes[0]), _special_values(*shapes[1]))


@pytest.mark.parametrize("op", ["_is_all_true.default", "_is_any_true.default"])
@pytest.mark.parametrize("values", [[True, True], [True, False], [False, False], []], ids=str)
def test_is_all_or_any_true(op, values):
    check(op, torch.tensor(values, dtype=torch.bool).reshape(-1, 1))


@pytest.mark.parametrize("other", [2.5, "tensor"])
def test_multiply_alias(other):
    x = _special_values(3, 4)
    check("multiply.Tensor" if other == "tensor" else "multiply.Scalar", x,
          randn(4) if other == "tensor" else other)


@pytest.mark.parametrize(("op", "torch_fn"), [
    ("log_sigmoid.default", torch.nn.functional.logsigmoid),
    ("special_entr.default", torch.special.entr),
    ("special_i1.default", torch.special.i1),
    ("special_i1e.default", torch.special.i1e),
    ("special_modified_bessel_i1.default", torch.special.i1),
])
def test_zero_sign_fixes_keep_gradient(op, torch_fn):
    """The lowerings that give PyTorch's +0.0 at -0.0 (or where the result underflows) must not
    lose the derivative there: jax.grad of the lowering equals PyTorch's autograd at both zeros."""
    x = torch.tensor([0.0, -0.0, 1e-3, -1e-3, 0.5, -2.5, 3.0, 30.0])
    leaf = x.clone().requires_grad_()
    torch_fn(leaf).sum().backward()
    lowering = registry.lookup(f"aten.{op}")
    got = jax.jit(jax.grad(lambda v: lowering(v).sum()))(_jax(x))
    np.testing.assert_allclose(np.asarray(got), leaf.grad.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", [F32, BF16, I32])
def test_prims_fma_is_one_multiply_add(dtype):
    """Inductor's `prims.fma` (a compiled optimizer's addcmul_), against the product and sum in
    float64 (one rounding, as a fused kernel gives it): within an ulp of the product elsewhere
    (`multiply_add`), exact in the special values a fused kernel keeps."""
    generator = torch.Generator().manual_seed(11)
    if dtype == I32:
        a, b, c = (torch.randint(-50, 50, (4, 5), generator=generator, dtype=dtype) for _ in range(3))
        want = a * b + c
    else:
        a, b, c = (torch.randn(4, 5, generator=generator).to(dtype) for _ in range(3))
        big = torch.finfo(dtype).max
        a[0, :4] = torch.tensor([float("inf"), float("nan"), -0.0, big], dtype=dtype)
        b[0, :4] = torch.tensor([2.0, 1.0, 1.0, 2.0], dtype=dtype)
        c[0, :4] = torch.tensor([1.0, 1.0, -0.0, -big], dtype=dtype)  # big * 2 - big: finite once fused
        want = (a.double() * b.double() + c.double()).to(dtype)
    got = jax.jit(registry.lookup("prims.fma.default"))(*(_jax(t) for t in (a, b, c)))
    assert got.dtype == jax.dtypes.canonicalize_dtype(dtypes.numpy_dtype(dtype))
    got = torch.from_numpy(np.array(got.astype(jnp.float32) if dtype == BF16 else got)).to(dtype)
    tolerance = dict(rtol=0, atol=0) if dtype == I32 else dict(rtol=1e-6, atol=1e-6) if dtype == F32 else {}
    torch.testing.assert_close(got, want, equal_nan=True, **tolerance)
    if dtype != I32:
        assert torch.signbit(got[0, 2]) and torch.isfinite(got[0, 3])
