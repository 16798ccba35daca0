"""The eager frontend: PyTorch code on `device="jax"`, checked against the same code on the CPU."""

from __future__ import annotations

import copy

import jax
import numpy as np
import pytest
import torch

import jaxport


@pytest.fixture(autouse=True)
def _eager():
    torch.manual_seed(0)
    with jaxport.eager():
        yield


def _same(got: torch.Tensor, want: torch.Tensor, **tol):
    assert isinstance(got, jaxport.JaxTensor), type(got)
    assert got.dtype == want.dtype and got.shape == want.shape
    torch.testing.assert_close(got.cpu(), want, **tol)


def test_factories_and_conversions():
    z = torch.zeros(2, 3, device="jax")
    assert isinstance(z, jaxport.JaxTensor) and z.device.type == "jax"
    _same(torch.arange(6, device="jax").reshape(2, 3), torch.arange(6).reshape(2, 3))
    _same(torch.tensor([[1.5, 2.0]], device="jax"), torch.tensor([[1.5, 2.0]]))
    _same(torch.full((2,), 7, device="jax"), torch.full((2,), 7))
    x = torch.randn(3, 4)
    xj = x.to("jax")
    _same(xj, x)
    assert xj.cpu().device.type == "cpu"
    assert np.array_equal(xj.numpy(), x.numpy())
    assert xj.sum().item() == pytest.approx(x.sum().item(), rel=1e-6)
    assert xj.tolist() == x.tolist()
    assert isinstance(xj.jax(), jax.Array) and xj.jax().shape == (3, 4)
    assert "device='jax:0'" in repr(xj)


def test_formatting_matches_cpu_tensors():
    # A 0-d tensor formats as its number: models key ModuleDicts by f"expert_{index}".
    assert f"expert_{torch.tensor(3).to('jax')}" == "expert_3"
    assert f"{torch.tensor(2.5).to('jax'):.3f}" == "2.500"
    assert f"{torch.tensor([1, 2]).to('jax')}" == "tensor([1, 2], device='jax:0')"


def test_ops_keep_pytorch_dtypes_and_promotion():
    i = torch.tensor([1, 2, 3], device="jax")
    assert i.dtype == torch.int64
    assert (i * 2.5).dtype == torch.float32
    assert (i / 2).dtype == torch.float32
    assert i.argmax().dtype == torch.int64
    h = torch.ones(2, dtype=torch.float16, device="jax")
    assert (h + torch.tensor(1.0, device="jax")).dtype == torch.float16  # 0-d does not promote
    assert (i > 1).dtype == torch.bool


def test_writes_through_views_reach_every_alias():
    base = torch.arange(12.0).reshape(3, 4)
    x = base.to("jax")
    for t in (base, x):
        t[0].add_(100)
        t.t()[1].mul_(-1)
        t.diagonal().zero_()
        t.narrow(1, 2, 2)[1] = 42.0
        t.view(12)[-1] = -7.0
    _same(x, base)


def test_views_of_views_and_slices():
    base = torch.arange(24.0).reshape(2, 3, 4)
    x = base.to("jax")
    for t in (base, x):
        v = t.transpose(0, 2)[1:3].unsqueeze(0)
        v.fill_(5.0)
        t[:, ::2, 1] += 0.5
    _same(x, base)


def test_reshapes_copy_where_no_view_can_hold_them():
    """reshape and flatten alias where strides allow it and copy where not (an unfold's overlapping
    windows, a transpose): a write through the result reaches the base only in the first case,
    and a copy reads every window (unfold_backward, behind istft, flattens an unfold)."""
    results = []
    for t in (torch.arange(12.0).reshape(3, 4), torch.arange(12.0).reshape(3, 4).to("jax")):
        t.flatten()[0] = 100.0
        transposed = t.t().reshape(12)
        transposed[1] = -1.0
        windows = t.flatten().unfold(0, 4, 2).flatten()
        results.append(torch.cat([t.flatten(), transposed, windows]))
    _same(results[1], results[0])
    grad = torch.randn(4, 8, 4, dtype=torch.complex64, generator=torch.Generator().manual_seed(0))
    _same(torch.ops.aten.unfold_backward(grad.to("jax"), [10, 8], 0, 4, 2),
          torch.ops.aten.unfold_backward(grad, [10, 8], 0, 4, 2))


def test_views_that_reinterpret_elements():
    """view_as_complex/view_as_real (complex rotary embeddings) change the element type, so they
    are computed rather than shared, with PyTorch's values and shapes."""
    g = torch.Generator().manual_seed(0)
    base = torch.randn(2, 3, 8, generator=g)
    angles = torch.polar(torch.ones(3, 4), torch.randn(3, 4, generator=g))
    results = []
    for t, f in ((base, angles), (base.to("jax"), angles.to("jax"))):
        rotated = torch.view_as_real(torch.view_as_complex(t.reshape(2, 3, 4, 2)) * f).flatten(2)
        results.append(torch.cat([rotated, rotated.view(torch.int32).float()], dim=0))
    _same(results[1], results[0])


def test_out_arguments_fill_and_resize():
    a, b = torch.randn(3), torch.randn(3)
    out = torch.empty(3, device="jax")
    result = torch.add(a.to("jax"), b.to("jax"), out=out)
    assert result is out
    _same(out, a + b)
    empty = torch.empty(0, device="jax")
    torch.mul(a.to("jax"), 2, out=empty)
    _same(empty, a * 2)


def test_copy_between_devices():
    cpu = torch.zeros(3)
    x = torch.randn(3, device="jax")
    cpu.copy_(x)
    torch.testing.assert_close(cpu, x.cpu())
    y = torch.zeros(3, device="jax")
    y.copy_(torch.ones(3))
    _same(y, torch.ones(3))


def test_manual_seed_makes_random_ops_reproducible():
    torch.manual_seed(1)
    a = torch.randn(5, device="jax")
    torch.manual_seed(1)
    b = torch.randn(5, device="jax")
    c = torch.randn(5, device="jax")
    assert torch.equal(a.cpu(), b.cpu())
    assert not torch.equal(b.cpu(), c.cpu())


def test_jax_device_rng_state_is_torchs_generator():
    # torch.accelerator names the jax device once it is registered, so torch's own helpers
    # (torch.testing's freeze_rng_state, fork_rng) save and restore its RNG state; where torch
    # had an accelerator before (a CUDA build), it stays named, and they are told the device.
    from jaxport.tensor import accelerator

    kept = accelerator.kept
    assert torch.accelerator.current_accelerator().type == (kept.type if kept is not None else "jax")
    state = torch.get_device_module("jax").get_rng_state()
    a = torch.randn(5, device="jax")
    torch.get_device_module("jax").set_rng_state(state)
    assert torch.equal(a.cpu(), torch.randn(5, device="jax").cpu())
    with torch.random.fork_rng(device_type="jax"):
        torch.randn(5, device="jax")
    assert not torch.equal(a.cpu(), torch.randn(5, device="jax").cpu())


def test_rrelu_in_training_returns_a_tensor_and_writes_its_noise():
    x = torch.tensor([-2.0, -1.0, 0.5, 3.0], device="jax")
    noise = torch.zeros(4, device="jax")
    y = torch.ops.aten.rrelu_with_noise(x, noise, 0.1, 0.3, True)
    assert isinstance(y, jaxport.JaxTensor) and y.shape == x.shape
    slopes = noise.cpu()
    assert torch.equal(slopes[2:], torch.ones(2)) and bool(((slopes[:2] >= 0.1) & (slopes[:2] <= 0.3)).all())
    _same(y, x.cpu() * slopes)
    assert isinstance(torch.rrelu(x, 0.1, 0.3, True), jaxport.JaxTensor)


@pytest.mark.parametrize("module", [torch.nn.Dropout(0.5), torch.nn.Dropout(0.2), torch.nn.Dropout1d(0.5)])
def test_dropout_modules_in_training_mode(module):
    # The module path calls bernoulli_(0.5), which PyTorch's dispatcher passes as bernoulli_().
    x = torch.ones(8, 64, 64, device="jax")
    p = module.p
    torch.manual_seed(2)
    y = module.train()(x)
    torch.manual_seed(2)
    again = module(x)
    assert torch.equal(y.cpu(), again.cpu())
    values = set(y.unique().cpu().tolist())
    assert values == {0.0, 1 / (1 - p)}, values
    assert abs((y == 0).float().mean().item() - p) < 0.03
    assert torch.equal(module.eval()(x).cpu(), x.cpu())


def test_module_to_jax_matches_cpu():
    ref = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU(), torch.nn.Flatten(),
                              torch.nn.LazyLinear(5))
    x = torch.randn(2, 3, 8, 8)
    want = ref(x)
    model = copy.deepcopy(ref).to("jax")
    assert all(isinstance(p, jaxport.JaxTensor) for p in model.parameters())
    with torch.no_grad():
        _same(model(x.to("jax")), want.detach(), rtol=1e-5, atol=1e-5)


@pytest.mark.compat
def test_mlp_trains_like_pytorch():
    ref = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    model = copy.deepcopy(ref).to("jax")
    x, y = torch.randn(32, 4), torch.randn(32, 1)
    xj, yj = x.to("jax"), y.to("jax")
    opt, opt_ref = (torch.optim.SGD(m.parameters(), lr=0.1) for m in (model, ref))
    losses, losses_ref = [], []
    for _ in range(50):
        for m, o, inputs, target, record in ((model, opt, xj, yj, losses), (ref, opt_ref, x, y, losses_ref)):
            loss = torch.nn.functional.mse_loss(m(inputs), target)
            o.zero_grad()
            loss.backward()
            o.step()
            record.append(loss.item())
    assert isinstance(model[0].weight.grad, jaxport.JaxTensor)
    np.testing.assert_allclose(losses, losses_ref, rtol=1e-4, atol=1e-4)
    assert losses[-1] < losses[0]


def test_no_grad_and_requires_grad():
    w = torch.randn(3, device="jax", requires_grad=True)
    with torch.no_grad():
        assert (w * 2).grad_fn is None
    (w * w).sum().backward()
    torch.testing.assert_close(w.grad.cpu(), 2 * w.detach().cpu())


def test_assert_close_between_jax_tensors():
    x = torch.randn(4, device="jax")
    torch.testing.assert_close(x, x.clone())
    with pytest.raises(AssertionError):
        torch.testing.assert_close(x, x + 1)


def test_value_dependent_shapes_run_eagerly():
    base = torch.tensor([[1.0, -2.0], [0.0, 3.0]])
    x = base.to("jax")
    _same(torch.nonzero(x), torch.nonzero(base))
    _same(x[x > 0], base[base > 0])
    _same(torch.unique(x), torch.unique(base))


@pytest.mark.parametrize("dtype", [torch.float32, torch.complex64])
@pytest.mark.parametrize("shape", [(4, 3), (2, 3), (2, 5, 3)], ids=["tall", "wide", "batched"])
@pytest.mark.parametrize("driver", [None, "gels", "gelsy", "gelsd", "gelss"])
def test_lstsq_fills_in_what_each_driver_does(driver, shape, dtype):
    a, b = torch.randn(shape, dtype=dtype), torch.randn(*shape[:-1], 2, dtype=dtype)
    # Outside every dispatch mode: under one, PyTorch's CPU kernel returns complex residuals
    # as the real part of the sum of squares, not of squared magnitudes.
    with torch.utils._python_dispatch._disable_current_modes():
        want = torch.linalg.lstsq(a, b, driver=driver)
    got = torch.linalg.lstsq(a.to("jax"), b.to("jax"), driver=driver)
    for g, w in zip(got, want):
        _same(g, w, rtol=1e-4, atol=1e-4)


def test_lstsq_of_a_rank_deficient_system():
    # Rank 2 as a product of factors, not as a repeated column: with two columns of equal norm,
    # the pivoting in MKL's gelsy picks rank 1 or 2 depending on the data's alignment in memory.
    # Rank-deficient, so gelsd and gelss give no residuals.
    a, b = torch.randn(5, 2) @ torch.randn(2, 3), torch.randn(5, 2)
    for driver in ("gelsy", "gelsd"):
        with torch.utils._python_dispatch._disable_current_modes():
            want = torch.linalg.lstsq(a, b, driver=driver)
        got = torch.linalg.lstsq(a.to("jax"), b.to("jax"), driver=driver)
        for g, w in zip(got[1:], want[1:]):
            _same(g, w, rtol=1e-4, atol=1e-4)
        # Any least-squares solution: equal residuals against PyTorch's (gelsy's is not the shortest).
        _same(torch.linalg.norm(a.to("jax") @ got.solution - b.to("jax"), dim=0),
              torch.linalg.norm(a @ want.solution - b, dim=0), rtol=1e-4, atol=1e-4)


def test_missing_op_names_op_and_user_line():
    x = torch.randn(3, 3, device="jax")
    with pytest.raises(jaxport.UnsupportedOpsError) as info:
        torch.linalg.ldl_factor(x @ x.T)
    message = str(info.value)
    assert "ldl_factor" in message and "test_eager.py" in message


def test_moving_to_jax_copies():
    cpu = torch.zeros(3)
    x = cpu.to("jax")
    y = torch.empty(3, device="jax")
    y.copy_(cpu)
    cpu.add_(1)  # later writes to the CPU tensor must not show through
    _same(x, torch.zeros(3))
    _same(y, torch.zeros(3))


@pytest.mark.parametrize("view", [
    lambda t: t.permute(2, 0, 1),
    lambda t: t.transpose(0, 2).unsqueeze(1),
    lambda t: t.unsqueeze(0).transpose(0, 3),
    lambda t: t.mT[:, 1:],
    lambda t: t[:, :, ::2].transpose(1, 2),
    lambda t: t.expand(3, 2, 3, 4)[1],
])
def test_reading_views(view):
    base = torch.arange(24.0).reshape(2, 3, 4)
    _same(view(base.to("jax")), view(base))


def _both(base: torch.Tensor, program) -> None:
    """Run `program` on a CPU tensor and on its copy on the jax device; they must agree."""
    x = base.to("jax")
    program(base)
    program(x)
    _same(x, base)


@pytest.mark.parametrize("program", [
    pytest.param(lambda t: t.view(6, 4)[::2].view(3, 2, 2)[1].zero_(), id="view-of-view"),
    pytest.param(lambda t: t[1:, 1:3].mul_(10), id="slice-inplace"),
    pytest.param(lambda t: t.unfold(1, 2, 1)[0].fill_(3), id="unfold-overlap"),
    pytest.param(lambda t: torch.add(t[0], 1, out=t[1]), id="out-into-view"),
    pytest.param(lambda t: t.T.contiguous().add_(1), id="contiguous-copy-is-not-alias"),
    pytest.param(lambda t: t.select(1, 2).copy_(torch.arange(4.0)), id="copy-from-cpu-into-view"),
    pytest.param(lambda t: t.view(2, 3, 4).transpose(0, 2).narrow(1, 1, 1).neg_(), id="narrow-of-transpose"),
    pytest.param(lambda t: t.as_strided((2, 2), (1, 4), 1).clamp_(max=0), id="as-strided"),
    pytest.param(lambda t: t.t_()[1].mul_(2), id="transpose-in-place-then-write"),
    pytest.param(lambda t: t.unsqueeze_(0).squeeze_(0)[:, 1].add_(1), id="unsqueeze-squeeze-in-place"),
])
def test_aliasing_follows_pytorch(program):
    # Three rounds: from the second sighting of a call signature on, it runs compiled.
    for _ in range(3):
        _both(torch.arange(24.0).reshape(4, 6), program)


def test_cpp_composites_keep_their_values():
    # PyTorch's C++ builds temporaries on the device it sees (meta) or from Python data.
    base = torch.randn(3, 5)
    x = base.to("jax")
    _same(torch.softmax(x, 1, dtype=torch.float64), torch.softmax(base, 1, dtype=torch.float64))
    _same(torch.quantile(x, 0.25, dim=1), torch.quantile(base, 0.25, dim=1))
    _same(x[[0, 2]], base[[0, 2]])
    _same(x[[True, False, True]], base[[True, False, True]])
    assert torch.allclose(x, x) and not torch.allclose(x, x + 1)
    for got, want in zip(torch.tensor_split(x, torch.tensor([1, 3]).to("jax"), dim=1),
                         torch.tensor_split(base, torch.tensor([1, 3]), dim=1)):
        _same(got, want)
    out = torch.empty(0, dtype=torch.int64, device="jax")
    torch.arange(4, out=out)
    _same(out, torch.arange(4))


def test_copy_from_jax_view_to_cpu():
    x = torch.arange(12.0).reshape(3, 4).to("jax")
    cpu = torch.zeros(3)
    cpu.copy_(x.t()[1])
    torch.testing.assert_close(cpu, torch.arange(12.0).reshape(3, 4).t()[1])


# -- compiled calls: a signature seen twice runs as one jitted function from then on --------


def test_compiled_calls_take_each_call_s_own_tensors():
    x, y = torch.tensor([1.0, 2.0]).to("jax"), torch.tensor([1.0, 3.0]).to("jax")
    for _ in range(3):
        _same(torch.eq(x, x), torch.tensor([True, True]))
    _same(torch.eq(x, y), torch.tensor([True, False]))
    for _ in range(3):
        y.add_(x, alpha=2)
    _same(y, torch.tensor([7.0, 15.0]))


def test_compiled_calls_tell_scalars_apart():
    x = torch.ones(3).to("jax")
    for _ in range(3):
        _same(x * 2, torch.full((3,), 2.0))
    _same(x * 3, torch.full((3,), 3.0))
    for _ in range(3):
        assert not torch.signbit(x * 0.0).any()
    assert torch.signbit(x * -0.0).all()
    _same(x * True, torch.ones(3))
    _same(torch.ones(3, dtype=torch.int32).to("jax") * 2.5, torch.full((3,), 2.5))


def test_compiled_calls_follow_x64_mode():
    x = torch.tensor([2**31 - 1], dtype=torch.int64).to("jax")
    for _ in range(3):
        assert (x + 1).jax().dtype == (np.int64 if jax.config.jax_enable_x64 else np.int32)
    with jax.enable_x64(not jax.config.jax_enable_x64):
        y = torch.tensor([2**31 - 1], dtype=torch.int64).to("jax")
        for _ in range(3):
            got = (y + 1).jax()
        assert got.dtype == (np.int64 if jax.config.jax_enable_x64 else np.int32)


def test_compiled_calls_follow_the_default_dtype():
    for _ in range(3):
        assert torch.arange(0.5, 3, device="jax").dtype == torch.float32
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        assert torch.arange(0.5, 3, device="jax").dtype == torch.float64
    finally:
        torch.set_default_dtype(previous)


def test_compiled_calls_stay_traceable():
    def f(a):
        return a * 2 + 1

    x = torch.ones(2).to("jax")
    for _ in range(3):
        f(x)
    traced = jaxport.interop.jax_fn(f)
    np.testing.assert_allclose(jax.jit(traced)(jax.numpy.arange(2.0)), [1.0, 3.0])
    np.testing.assert_allclose(jax.grad(lambda v: traced(v).sum())(jax.numpy.arange(2.0)), [2.0, 2.0])
