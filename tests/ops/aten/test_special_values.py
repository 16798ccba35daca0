"""Special values through jaxport's ATen lowerings: NaN, infinities, signed zeros, subnormals and
the largest floats must come out exactly as PyTorch gives them (issue 18).

Generated from PyTorch's OpInfo database. Every elementwise op (OpInfo's unary and binary
ufuncs, and the elementwise `EXTRA_ELEMENTWISE`) runs once per distinct way its OpInfo samples
call it, with each floating operand replaced by `SPECIAL_VALUES` along its own axis, so a
binary op sees the full cross product in one tensor. Every reduction (OpInfo's
`ReductionOpInfo`s, and `ROW_CALLS` for sorts, scans, softmax and friends) reduces the last
dim of `ROWS`, a matrix whose rows are the cases that go wrong: NaN first, inside or last,
infinities of both signs, zeros of both signs, ties. Each sample goes through
`tests/conformance/opinfo/harness.py` (torch.export -> jaxport, under `jax.jit`, and op by op
too from `--opinfo=standard` up) with
`special_values=True`: NaNs in the same places, infinities equal, zeros of the same sign, and
subnormals read as XLA:CPU reads them (`harness.SUBNORMALS_AS_ZERO`).

Expected failures are listed with each op's other entries in its family's
`tests/conformance/opinfo/xfails/<family>.py` (`"opinfo_id:*:special"`), most under the causes
in `xfails/reasons.py`. Each names the operand values its reason is about (`Expected.values`:
tied zeros, a subnormal operand, ...), and a listed op xfails only when every element that
differs, in every call, has them and the entry's stated cause (for the sign of zeros, a detail
naming zeros of the wrong sign); a difference anywhere else fails it. A listed op runs op by op
and jitted at every level, so one whose calls all pass fails too, even at the smoke level:
stale entries get removed.

`make test` runs every op in float32 and every second op (by name) in float64; the other float64
cases are `slow` (`make test-slow`).
"""

from __future__ import annotations

import math
import zlib

import jax
import numpy as np
import pytest
import torch
import torch.utils._pytree as pytree
from torch.testing._internal.opinfo.core import (
    BinaryUfuncInfo,
    ReductionOpInfo,
    SampleInput,
    UnaryUfuncInfo,
)

import jaxport
from jaxport import dlpack
from tests.conformance.expectations import Failure, judge
from tests.conformance.opinfo import harness
from tests.conformance.opinfo.expected_failures import SPECIAL, expected_failure
from tests.support.modules import Call

DTYPES = (torch.float32, torch.float64)


def special_values(dtype: torch.dtype) -> list[float]:
    """NaN, the infinities, signed zeros, the smallest subnormal and normal numbers, the largest
    finite numbers, and the numbers where activations, rounding and clamping change branch."""
    info = torch.finfo(dtype)
    subnormal = info.smallest_normal * info.eps
    return [
        math.nan, math.inf, -math.inf, 0.0, -0.0, subnormal, -subnormal, info.tiny, -info.tiny,
        info.max, -info.max, 1.0, -1.0, 0.5, -0.5, 1.5, -2.5, 3.0, -3.0, 6.0, 20.0, -100.0, math.pi,
        1e-3,
    ]


def _rows(dtype: torch.dtype) -> torch.Tensor:
    """The matrix reductions reduce along its last dim, one case per row."""
    nan, inf, big = math.nan, math.inf, torch.finfo(dtype).max
    sub = torch.finfo(dtype).smallest_normal * torch.finfo(dtype).eps
    rows = [
        [0.5, -2.0, 3.0, 1.0, -0.5, 2.0, 0.0],  # finite
        [nan, 1.0, 2.0, -1.0, 3.0, 0.0, 0.5],  # NaN first
        [1.0, nan, 2.0, nan, -1.0, 0.0, 0.5],  # two NaNs inside
        [1.0, 2.0, -1.0, 3.0, 0.0, 0.5, nan],  # NaN last
        [inf, 1.0, -inf, 0.0, 2.0, -1.0, 0.5],  # both infinities
        [1.0, inf, 2.0, inf, 3.0, -1.0, 0.0],  # tied infinities
        [-inf] * 7,
        [inf] * 7,
        [nan] * 7,
        [0.0, -0.0, 0.0, -0.0, 0.0, -0.0, 0.0],  # zeros of both signs
        [-0.0] * 7,
        [-0.0, -1.0, -2.0, -3.0, -0.5, -inf, -4.0],  # -0.0 the largest
        [big, big, big, 1.0, -1.0, 0.5, 2.0],  # sums overflow
        [sub, -sub, 0.0, -0.0, 1.0, -1.0, 0.5],  # subnormals
        [2.0, 2.0, 1.0, 2.0, 1.0, 1.0, 0.0],  # ties
        [nan, inf, -inf, nan, -0.0, 0.0, 1.0],  # everything
    ]
    return torch.tensor(rows, dtype=dtype)


#: Elementwise OpInfo entries that are not `UnaryUfuncInfo` or `BinaryUfuncInfo`.
EXTRA_ELEMENTWISE = (
    "addcdiv",
    "addcmul",
    "clamp",
    "lerp",
    "logaddexp2",
    "masked_fill",
    "nn.functional.gelu",
    "nn.functional.hardswish",
    "nn.functional.leaky_relu",
    "where",
)

#: Reductions, scans and sorts that are not `ReductionOpInfo`s: the calls on `_rows`, each
#: ((args), {kwargs}), every one along the last dim.
ROW_CALLS = {
    "aminmax": [((), {"dim": -1})],
    "argsort": [((), {"dim": -1}), ((), {"dim": -1, "descending": True})],
    "cummax": [((-1,), {})],
    "cummin": [((-1,), {})],
    "cumprod": [((-1,), {})],
    "cumsum": [((-1,), {})],
    "kthvalue": [((2, -1), {})],
    "log_softmax": [((-1,), {})],
    "logcumsumexp": [((-1,), {})],
    "logsumexp": [((-1,), {})],
    "max.reduction_no_dim": [((), {})],
    "max.reduction_with_dim": [((-1,), {})],
    "median": [((-1,), {})],
    "min.reduction_no_dim": [((), {})],
    "min.reduction_with_dim": [((-1,), {})],
    "mode": [((-1,), {})],
    "msort": [((), {})],
    "nanmedian": [((-1,), {})],
    # pooling along the rows: 7 -> 3 are uneven, overlapping windows; 7 -> 1 a global pool
    "nn.functional.adaptive_avg_pool1d": [((3,), {}), ((1,), {})],
    "nn.functional.adaptive_max_pool1d": [((3,), {}), ((1,), {})],
    "nn.functional.softmin": [((-1,), {})],
    "softmax": [((-1,), {})],
    "sort": [((), {"dim": -1}), ((), {"dim": -1, "descending": True}), ((), {"dim": -1, "stable": True})],
    "std_mean": [((), {"dim": -1})],
    "topk": [((3, -1), {}), ((3, -1, False), {})],
    "var_mean": [((), {"dim": -1})],
}

#: At most this many distinct call patterns (scalar arguments, operand kinds) per elementwise op.
MAX_CALLS = 3


def _kind(op) -> str | None:
    name = harness.opinfo_id(op)
    if isinstance(op, (UnaryUfuncInfo, BinaryUfuncInfo)) or name in EXTRA_ELEMENTWISE:
        return "elementwise"
    if isinstance(op, ReductionOpInfo) or name in ROW_CALLS:
        return "rows"
    return None


def _elementwise_samples(op, dtype) -> list[SampleInput]:
    """The op's OpInfo samples, one per distinct call pattern, with the special values in.

    The k-th floating operand that is not a single number takes the special values along
    axis k (size 1 elsewhere), bool operands [True, False] along their own axis, and
    single-element floating operands -0.0, so every combination meets in one broadcast.
    """
    values = torch.tensor(special_values(dtype), dtype=dtype)
    seen, out = set(), []
    for sample in harness.samples(op, dtype, 20):
        if not isinstance(sample.input, torch.Tensor):
            continue
        leaves, spec = pytree.tree_flatten((sample.input, tuple(sample.args), dict(sample.kwargs)))
        tensors = [i for i, x in enumerate(leaves) if isinstance(x, torch.Tensor)]
        crossed = [i for i in tensors if leaves[i].numel() > 1 or i == 0]
        key = (str(spec), repr([x for x in leaves if not isinstance(x, torch.Tensor)]),
               tuple((leaves[i].dtype, i in crossed) for i in tensors))
        if key in seen:
            continue
        seen.add(key)
        kept = tensors[1:] if "_polynomial_" in harness.opinfo_id(op) else []  # the degree n: PyTorch loops n times
        crossed = [i for i in crossed if i not in kept]
        for axis, i in enumerate(crossed):
            t = leaves[i]
            shape = [1] * len(crossed)
            if t.dtype == torch.bool:
                shape[axis] = 2
                leaves[i] = torch.tensor([True, False]).reshape(shape)
            elif t.is_floating_point():
                shape[axis] = len(values)
                leaves[i] = values.to(t.dtype).reshape(shape)
            else:  # integer operands keep their values
                continue
        for i in tensors:
            if i not in crossed and i not in kept and leaves[i].is_floating_point():
                leaves[i] = torch.full_like(leaves[i], -0.0)
        x, args, kwargs = pytree.tree_unflatten(leaves, spec)
        out.append(SampleInput(x, args=args, kwargs=kwargs))
        if len(out) == MAX_CALLS:
            break
    return out


def _row_samples(op, dtype) -> list[SampleInput]:
    rows = _rows(dtype)
    name = harness.opinfo_id(op)
    if name in ROW_CALLS:
        return [SampleInput(rows.clone(), args=args, kwargs=kwargs) for args, kwargs in ROW_CALLS[name]]
    samples = []
    for args, kwargs in op.generate_args_kwargs(rows, dim=-1):
        samples.append(SampleInput(rows.clone(), args=args, kwargs={**kwargs, "dim": -1}))
    return samples


def _cases():
    for op in harness.op_db():
        kind = _kind(op)
        if kind is None:
            continue
        for dtype in DTYPES:
            if dtype in op.supported_dtypes("cpu"):
                slow = dtype == torch.float64 and zlib.crc32(harness.opinfo_id(op).encode()) % 2
                yield pytest.param(op, dtype, kind, id=f"{harness.opinfo_id(op)}-{str(dtype)[6:]}",
                                   marks=[pytest.mark.slow] if slow else [])


@pytest.mark.usefixtures("x64_strict")
@pytest.mark.parametrize(("op", "dtype", "kind"), list(_cases()))
def test_special_values(op, dtype, kind, request):
    torch.manual_seed(0)  # the OpInfo samples the calls are taken from
    samples = _elementwise_samples(op, dtype) if kind == "elementwise" else _row_samples(op, dtype)
    key, expected = expected_failure(harness.opinfo_id(op), str(dtype), SPECIAL) or (None, None)
    # A listed op runs op by op and jitted at every level, so that its entry is judged whole.
    modes = harness.MODES if expected else harness.LEVEL_MODES[request.config.getoption("--opinfo")]
    outcomes = [harness.run_sample(op, sample, dtype, special_values=True, modes=modes, layout=kind)
                for sample in samples]
    ran = [o for o in outcomes if o.status != "unexportable"]
    if not ran:
        why = "; ".join(sorted({o.detail for o in outcomes})) or "no samples"
        if expected:  # an entry nothing can judge any more is stale
            pytest.fail(f"{key} lists an expected failure, but no sample runs: {why}")
        pytest.skip(why)
    failures = [Failure(o.kind, o.detail, f"call {i}", o.operands) for i, o in enumerate(outcomes)
                if o.status in ("failed", "unconvertible")]
    judge(key, expected, failures)


#: The values `test_ties_and_nans_as_pytorch` crosses: zeros of both signs, NaN, infinities and
#: numbers around the bounds its calls use.
_TIE_VALUES = [math.nan, math.inf, -math.inf, 0.0, -0.0, 1.0, -1.0, 0.5, 6.0, 7.0, -2.5]


def _crossed(dtype):
    values = torch.tensor(_TIE_VALUES, dtype=dtype)
    return values.repeat_interleave(len(values)), values.repeat(len(values))


def _tie_rows(dtype):
    nan = math.nan
    return torch.tensor([[0.0, -0.0, 0.0, -0.0], [-0.0, 0.0, -0.0, 0.0], [-0.0, -0.0, -0.0, -0.0],
                         [nan, 1.0, nan, 2.0], [1.0, nan, nan, -0.0], [nan, nan, nan, nan],
                         [2.0, 1.0, 2.0, 1.0], [-0.0, -1.0, 0.0, -2.0]], dtype=dtype)


#: Calls whose zero signs and NaN indices PyTorch gives the same in every CPU loop (its scalar
#: loop for one element, its vectorized one for many), where jaxport gave IEEE 754's maximum and
#: minimum (clamp, hardtanh, relu6 with scalar bounds; fmax, fmin), lost -0.0 in JAX's associative
#: scan and kept the first NaN's index (cummax, cummin), or took the values apart from the indices
#: (max.dim, min.dim): {name: (inputs(dtype), call)}. PyTorch keeps `x` where it ties with a bound
#: or the other operand, and the later of tied running extremes (each NaN taking over).
TIES = {
    "clamp-min": (lambda d: _crossed(d)[:1], lambda x: torch.clamp(x, min=0.0)),
    "clamp-max": (lambda d: _crossed(d)[:1], lambda x: torch.clamp(x, max=-0.0)),
    "clamp-min-above-max": (lambda d: _crossed(d)[:1], lambda x: torch.clamp(x, 3.0, 1.0)),
    "clamp-nan-bound": (lambda d: _crossed(d)[:1], lambda x: torch.clamp(x, min=math.nan)),
    "clamp_min": (lambda d: _crossed(d)[:1], lambda x: torch.clamp_min(x, 0.0)),
    "clamp_max": (lambda d: _crossed(d)[:1], lambda x: torch.clamp_max(x, -0.0)),
    "hardtanh": (lambda d: _crossed(d)[:1], lambda x: torch.nn.functional.hardtanh(x, 0.0, 6.0)),
    "hardtanh-min-above-max": (lambda d: _crossed(d)[:1], lambda x: torch.ops.aten.hardtanh(x, 3.0, 1.0)),
    "relu6": (lambda d: _crossed(d)[:1], torch.nn.functional.relu6),
    "fmax": (_crossed, torch.fmax),
    "fmin": (_crossed, torch.fmin),
    "cummax": (lambda d: (_tie_rows(d),), lambda x: torch.cummax(x, -1)),
    "cummin": (lambda d: (_tie_rows(d),), lambda x: torch.cummin(x, -1)),
    "max.dim": (lambda d: (_tie_rows(d),), lambda x: torch.max(x, -1)),
    "min.dim": (lambda d: (_tie_rows(d),), lambda x: torch.min(x, -1)),
}


def _same(got, want: torch.Tensor) -> bool:
    """Equal, NaN for NaN, zeros by sign."""
    got = torch.from_numpy(np.array(got))
    if not want.is_floating_point():
        return torch.equal(got, want)
    return bool((((got == want) | (got.isnan() & want.isnan())) & (got.signbit() == want.signbit())).all())


@pytest.mark.usefixtures("x64_strict")
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("name", sorted(TIES))
def test_ties_and_nans_as_pytorch(name, dtype):
    """Where PyTorch's kernels give one answer for tied zeros and repeated NaNs in every CPU loop,
    jaxport gives it, op by op and jitted."""
    make_inputs, fn = TIES[name]
    inputs = make_inputs(dtype)
    want = [t for t in pytree.tree_leaves(fn(*inputs)) if isinstance(t, torch.Tensor)]
    # one element at a time: PyTorch's scalar loop, which agrees with its vectorized one here
    rows = [pytree.tree_leaves(fn(*(x[i:i + 1] for x in inputs))) for i in range(len(inputs[0]))]
    for w, scalar in zip(want, zip(*rows)):
        assert _same(torch.cat(scalar).numpy(), w), f"PyTorch's loops disagree on {name}: not a defined answer"
    model = jaxport.from_exported_program(torch.export.export(Call(fn), inputs))
    for mode, run in (("op by op", model.apply), ("jitted", jax.jit(model.apply))):
        got = pytree.tree_leaves(run(model.params, *(dlpack.to_jax(x) for x in inputs)))
        for i, (g, w) in enumerate(zip(got, want)):
            assert _same(g, w), f"{name} {mode}, output {i}:\n{np.array(g)}\nPyTorch:\n{w}"


@pytest.mark.parametrize("name,fn", [
    ("hardtanh", lambda x: torch.nn.functional.hardtanh(x, -1.0, 1.0)),
    ("relu6", torch.nn.functional.relu6),
    ("clamp", lambda x: torch.clamp(x, -1.0, 1.0)),
])
def test_gradients_at_the_bounds_as_pytorch(name, fn):
    """`jax.grad` through the forward lowering at and around the bounds: hardtanh's backward
    passes nothing at a tie with a bound, clamp's passes it all, and -0.0 ties at 0."""
    x = torch.tensor([-2.0, -1.0, -0.0, 0.0, 0.5, 1.0, 6.0, 7.0], requires_grad=True)
    (want,) = torch.autograd.grad(fn(x).sum(), x)
    model = jaxport.from_exported_program(torch.export.export(Call(fn), (x.detach(),)))
    got = jax.grad(lambda v: model.apply(model.params, v).sum())(jax.numpy.asarray(x.detach().numpy()))
    np.testing.assert_array_equal(np.asarray(got), want.numpy())
