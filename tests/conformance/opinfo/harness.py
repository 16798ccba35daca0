"""Drive PyTorch's OpInfo database through torch.export -> jaxport and compare with eager PyTorch.

Each OpInfo sample becomes a tiny module whose tensor leaves are inputs and
whose other arguments are constants. It is exported, converted, run both
op-by-op and under `jax.jit`, and compared with PyTorch eager on the CPU.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import itertools
import math
import re
import unittest.mock
import warnings
from collections.abc import Callable

import jax
import numpy as np
import torch
import torch.utils._pytree as pytree

import jaxport
from jaxport import dlpack, dtypes
from jaxport.errors import ExportError, LoweringError, UnsupportedOpsError
from jaxport.ir import interpret

#: dtypes the conformance suite tests when the op supports them.
DTYPES = (
    torch.float32,
    torch.float64,
    torch.float16,
    torch.bfloat16,
    torch.complex64,
    torch.complex128,
    torch.int64,
    torch.int32,
    torch.int16,
    torch.int8,
    torch.uint8,
    torch.bool,
)

#: (rtol, atol) by dtype; XLA's CPU math differs from PyTorch's by a few ulp.
TOLERANCES = {
    torch.float32: (1e-5, 1e-5),
    torch.float16: (1e-3, 1e-3),
    torch.bfloat16: (1.6e-2, 1e-2),
    torch.float64: (1e-7, 1e-7),
    # complex values are judged part by part (`_parts`), each as its real dtype
    torch.complex64: (1e-5, 1e-5),
    torch.complex128: (1e-7, 1e-7),
}

#: Looser (rtol, atol) for some (op, dtype), each with its reason; keyed like TOLERANCES. A float32
#: entry also covers complex64, whose parts are float32 sums in the same order (`tolerance_override`).
TOLERANCE_OVERRIDES = {
    ("nn.functional.scaled_dot_product_attention", torch.float32): (
        (1e-5, 5e-5),
        "softmax and the two contractions summed in another order: 3 samples (both paths) land "
        "1.3e-5 to 2.9e-5 from PyTorch",
    ),
    ("fft.hfft2", torch.float32): (
        (1e-5, 5e-5),
        "XLA's CPU FFT (DUCC) and PyTorch's pocketfft round differently: one sample over three "
        "dims with outputs up to 251 lands 3.1e-5 from PyTorch (jaxport 4.0e-5, PyTorch 2.2e-5 "
        "from float64)",
    ),
    ("nn.functional.conv2d", torch.float32): (
        (1e-5, 3e-5),
        "large depthwise sums: float32 accumulation order differs (both ~1.3e-5 from float64)",
    ),
    ("nn.functional.conv3d", torch.float32): (
        (1e-5, 3e-4),
        "long 3-d sums with outputs up to ~440: float32 accumulation order differs (jaxport 4.5e-5, "
        "PyTorch 6.6e-5 from float64)",
    ),
    ("nn.functional.conv_transpose3d", torch.float32): (
        (1e-5, 3e-4),
        "long 3-d sums with outputs up to ~890: float32 accumulation order differs (jaxport 1.4e-4, "
        "PyTorch 9.9e-5 from float64)",
    ),
}

def tolerance_override(op, dtype) -> tuple[float, float] | None:
    """The (rtol, atol) `TOLERANCE_OVERRIDES` gives `op` in `dtype` (complex64 its float32 entry's)."""
    entry = (TOLERANCE_OVERRIDES.get((opinfo_id(op), dtype))
             or TOLERANCE_OVERRIDES.get((opinfo_id(op), {torch.complex64: torch.float32}.get(dtype))))
    return entry[0] if entry else None


#: Ops whose half-precision results PyTorch's CPU kernels round at every step (sequential
#: half-precision sums, half intermediates), while jaxport accumulates in float32. A
#: half-precision sample that misses the usual tolerance still passes if jaxport is, element
#: by element, at least as close as PyTorch to the same op run in float64.
HALF_ACCURACY_REFERENCE = {
    "_segment_reduce.lengths": "segment sums accumulate sequentially in half precision",
    "_segment_reduce.offsets": "segment sums accumulate sequentially in half precision",
    "div.floor_rounding": "the CPU kernel's steps ((a - fmod(a, b)) / b, its correction and "
    "floor) each round to half: -8.546875 // 0.0090027 gives -951 where float64 gives -950",
    "div.trunc_rounding": "the vectorized CPU kernel rounds the quotient to half before "
    "truncating (139.0 for -8.4766 / -0.0610, where its scalar path and float64 give 138)",
    "floor_divide": "the CPU kernel's steps ((a - fmod(a, b)) / b, its correction and floor) "
    "each round to half: -8.546875 // 0.0090027 gives -951 where float64 gives -950",
    "gradient": "the composite rounds each difference and its division by the spacing to half "
    "(jaxport computes each in float32 and rounds once)",
    "grid_sampler_2d": "the CPU kernel computes coordinates, weights and sums in half, rounding "
    "each step (jaxport computes in float32)",
    "grid_sampler_3d": "the CPU kernel computes coordinates, weights and sums in half, rounding "
    "each step (jaxport computes in float32)",
    "linalg.multi_dot": "each intermediate product is rounded to half, and PyTorch picks its own "
    "multiplication order",
    "linalg.vecdot": "the composite rounds each elementwise product to half before summing",
    "matrix_exp": "the CPU kernel evaluates its series in half precision and overflows to NaN "
    "where the float64 result is ~9e4",
    "mvlgamma.mvlgamma_p_3": "the composite rounds each shifted argument x - j / 2 to half before lgamma, so "
    "x = -3.002 becomes the pole -4.0 and gives inf (float64: 7.907)",
    "mvlgamma.mvlgamma_p_5": "the composite rounds each shifted argument x - j / 2 to half before lgamma, so "
    "x = -3.002 becomes the pole -4.0 and gives inf (float64: 7.907)",
    "nn.functional.adaptive_avg_pool3d": "the CPU kernel rounds intermediate sums to half",
    "nn.functional.bilinear": "the composite (_trilinear) rounds the first product to half before "
    "the second contraction",
    "nn.functional.binary_cross_entropy_with_logits": "the composite rounds each step "
    "(log-sigmoid, weight products) to half",
    "nn.functional.conv_transpose1d": "transposed convolution accumulates (col2im) in half",
    "nn.functional.conv_transpose2d": "transposed convolution accumulates (col2im) in half",
    "nn.functional.conv_transpose3d": "transposed convolution accumulates (col2im) in half",
    "nn.functional.grid_sample": "the CPU kernel computes coordinates, weights and sums in half, "
    "rounding each step (jaxport computes in float32)",
    "nn.functional.hinge_embedding_loss": "the composite rounds each step to half before the mean",
    "nn.functional.instance_norm": "the composite (batch_norm over a (1, N*C, ...) view) rounds "
    "to half",
    "nn.functional.interpolate.area": "area interpolation is adaptive average pooling, whose CPU "
    "kernel rounds intermediate sums to half",
    "nn.functional.interpolate.bicubic": "the CPU kernel rounds intermediate sums to half",
    "nn.functional.interpolate.bilinear": "the CPU kernel rounds intermediate interpolations to half",
    "nn.functional.interpolate.linear": "the CPU kernel rounds intermediate interpolations to half",
    "nn.functional.interpolate.trilinear": "the CPU kernel rounds intermediate interpolations to "
    "half",
    "nn.functional.linear_cross_entropy": "the composite rounds the logits and each log-softmax "
    "step to half",
    "nn.functional.linear_cross_entropy.chunked": "the composite rounds the logits and each "
    "log-softmax step to half",
    "nn.functional.linear_cross_entropy.chunked_none": "the composite rounds the logits and each "
    "log-softmax step to half",
    "nn.functional.mse_loss": "the mean accumulates the squared differences in half",
    "nn.functional.nll_loss": "the weighted sum and its normalization accumulate in half",
    "nn.functional.poisson_nll_loss": "the composite rounds each step (exp, products, Stirling "
    "term) to half",
    "nn.functional.upsample_bilinear": "the CPU kernel rounds intermediate interpolations to half",
}

#: Ops whose float32 results are ill-conditioned in their inputs, so that any two summation
#: orders disagree beyond the usual tolerance; judged like HALF_ACCURACY_REFERENCE.
FLOAT32_ACCURACY_REFERENCE = {
    "nn.functional.gelu": "PyTorch's float32 GELU kernel depends on the CPU's vector unit: its AVX2 "
    "kernel gives +0.0 for -0.0, its AVX-512 kernel NaN for +inf and +inf for float32's largest "
    "number; its float64 kernel gives -0.0, +inf and the number (x * Phi(x) in IEEE arithmetic), "
    "as jaxport does in float32",
    "nn.functional.multi_head_attention_forward": "OpInfo's projections give attention logits in "
    "the hundreds, so a last-ulp change in a logit moves softmax weights by ~1e-5 and outputs near "
    "1000 by up to 0.02 (4 samples: jaxport 0.0087, PyTorch 0.012 from float64)",
}

#: Ops whose outputs are random or uninitialised: only shapes and dtypes are compared.
UNCHECKED_VALUES = {
    "bernoulli": "random",
    "cauchy": "random",
    "empty": "uninitialised memory",
    "empty_like": "uninitialised memory",
    "empty_permuted": "uninitialised memory",
    "empty_strided": "uninitialised memory",
    "exponential": "random",
    "geometric": "random",
    "log_normal": "random",
    "multinomial": "random",
    "new_empty": "uninitialised memory",
    "new_empty_strided": "uninitialised memory",
    "nn.functional.alpha_dropout": "random",
    "nn.functional.dropout": "random",
    "nn.functional.dropout2d": "random",
    "nn.functional.dropout3d": "random",
    "nn.functional.feature_alpha_dropout": "random",
    "nn.functional.rrelu": "random",
    "normal": "random",
    "rand_like": "random",
    "randint": "random",
    "randint_like": "random",
    "randn": "random",
    "randn_like": "random",
    "uniform": "random",
    "torch._refs.rand": "random",
    "randperm": "random",
    "nn.functional.fractional_max_pool2d": "random",
    "nn.functional.fractional_max_pool3d": "random",
}


#: Detail of a passing sample whose output shape depends on values: checked op by op,
#: and `jax.jit` must refuse it with an error naming the op.
EAGER_ONLY = "eager only: output shape depends on tensor values; jax.jit refuses it clearly"


#: Ops whose index output may order tied elements any way (PyTorch's CPU kernels use
#: unstable std::sort / quickselect): {op: (index output, (dim keyword, position, default),
#: (keepdim keyword, position, default) or None)}. Their indices are checked by what they
#: select, not by equality; `sort(..., stable=True)` is still compared exactly.
TIE_ORDER_INDICES = {
    "argsort": (0, ("dim", 0, -1), None),
    "kthvalue": (1, ("dim", 1, -1), ("keepdim", 2, False)),
    "mode": (1, ("dim", 0, -1), ("keepdim", 1, False)),
    "sort": (1, ("dim", 0, -1), None),
    "topk": (1, ("dim", 1, -1), None),
}


#: Ops whose eigen- or singular vectors are unique only up to sign, or a unit phase where complex
#: (LAPACK builds pick differently): {op: {vector output: the axis a vector runs along}}. Each vector is compared
#: after making its largest entry positive; of a full SVD's U and V only the min(m, n)
#: vectors paired with singular values are defined, the rest only span a complement.
SIGN_FREE_VECTORS = {
    "linalg.eig": {1: -2},
    "linalg.eigh": {1: -2},
    "linalg.svd": {0: -2, 2: -1},
    "pca_lowrank": {0: -2, 2: -2},
    "svd": {0: -2, 2: -2},
    "svd_lowrank": {0: -2, 2: -2},
}


#: Why a special-values sample (`run_sample(..., special_values=True)`, tests/ops/aten/test_special_values.py)
#: is judged against PyTorch run on its inputs with subnormals flushed to zero: XLA:CPU runs
#: compiled code with denormals-are-zero and flush-to-zero set (MXCSR DAZ/FTZ), and every jaxport
#: path computes through XLA, so a subnormal input acts as a zero of its sign (1e-45 > 0 is False)
#: and a subnormal result comes out as one. Zeros are compared by sign there too.
SUBNORMALS_AS_ZERO = "XLA:CPU flushes subnormal floats to zeros of the same sign (DAZ/FTZ)"


def flush_subnormals(t):
    """`t` with its subnormal floats replaced by zeros of the same sign, as XLA:CPU reads them."""
    if not isinstance(t, torch.Tensor) or not t.is_floating_point():
        return t
    return torch.where(t.abs() < torch.finfo(t.dtype).tiny, t * 0, t)


def _signed_zeros(got: torch.Tensor, want: torch.Tensor) -> str:
    """Empty when every zero of `want` that `got` also has (subnormals counting as zeros) has its sign."""
    if not want.is_floating_point() or want.dtype != got.dtype:
        return ""
    got, want = flush_subnormals(got), flush_subnormals(want)
    wrong = (got == 0) & (want == 0) & (got.signbit() != want.signbit())
    if not wrong.any():
        return ""
    first = tuple(i.item() for i in wrong.nonzero()[0])
    return f"{int(wrong.sum())} zeros of the wrong sign, first at index {first} (expected {want[first].item()})"


#: How a failure's detail names an exception: "conversion crashed: <Name>: ..." and "<mode>: <Name>: ..."
#: (mode: eager or jit; the eager frontend's read "eager: <Name>: ...") for a failed sample, "<Name>: ..."
#: for conversion's refusals. A mismatch reads "<mode>: output 0: ..." or "eager <variant>: ...".
_FAILED_ERROR = re.compile(r"(?:conversion crashed|eager|jit): ([A-Za-z_]\w*): ")
_REFUSAL = re.compile(r"([A-Za-z_]\w*): ")


def failure_kind(status: str, detail: str) -> str:
    """The kind of a failed or unconvertible sample (`expectations.Failure.kind`) from its status
    and detail: "missing" (conversion lists ops it cannot lower), "error:<ExceptionName>"
    (conversion or a run raised it) or "mismatch" (it ran; the outputs differ)."""
    if status == "unconvertible":
        if detail.startswith("missing "):
            return "missing"
        named = _REFUSAL.match(detail)
        return f"error:{named[1]}" if named else "error:ExportError"
    named = _FAILED_ERROR.match(detail)
    return f"error:{named[1]}" if named else "mismatch"


@dataclasses.dataclass
class Outcome:
    status: str  # passed | failed | unexportable | unconvertible
    detail: str = ""
    aten_ops: tuple[str, ...] = ()
    #: For a failed sample run with a `LAYOUTS` layout: its floating operands at every output
    #: element that differs, one tensor each, the elements along the first axis (`_operands_at`).
    operands: tuple[torch.Tensor, ...] = ()

    @property
    def kind(self) -> str:
        """For a failed or unconvertible sample, its kind of failure (`failure_kind`)."""
        return failure_kind(self.status, self.detail)


class _SampleModule(torch.nn.Module):
    def __init__(self, fn, leaves, spec, tensor_positions):
        super().__init__()
        self.fn, self.leaves, self.spec, self.positions = fn, leaves, spec, tensor_positions

    def forward(self, *tensors):
        leaves = list(self.leaves)
        for pos, t in zip(self.positions, tensors):
            leaves[pos] = t
        sample_input, args, kwargs = pytree.tree_unflatten(leaves, self.spec)
        return self.fn(sample_input, *args, **kwargs)


def _sample_module(op, sample, fn=None) -> tuple[_SampleModule, list[torch.Tensor]]:
    """The sample as a module of its tensors (what torch.export captures) calling `fn` (default:
    the op), and those tensors."""
    leaves, spec = pytree.tree_flatten((sample.input, tuple(sample.args), dict(sample.kwargs)))
    positions = [i for i, x in enumerate(leaves) if isinstance(x, torch.Tensor)]
    return _SampleModule(fn or op.op, leaves, spec, positions), [leaves[i].detach() for i in positions]


def _flat_outputs(out):
    leaves, _ = pytree.tree_flatten(out)
    return leaves


def _argument(sample, spec):
    keyword, position, default = spec
    if keyword in sample.kwargs:
        return sample.kwargs[keyword]
    return sample.args[position] if len(sample.args) > position else default


def _tie_order_check(op, sample) -> dict[int, Callable]:
    """{index output: equivalence check} when tied elements may come in any order."""
    entry = TIE_ORDER_INDICES.get(op.name)
    if entry is None or sample.kwargs.get("stable"):
        return {}
    output, dim_spec, keepdim_spec = entry
    x = sample.input
    dim = _argument(sample, dim_spec)
    keepdim = _argument(sample, keepdim_spec) if keepdim_spec else True

    def selects_same(got: torch.Tensor, want: torch.Tensor) -> str:
        if x.ndim == 0:
            picked = [x.expand(idx.shape) for idx in (got, want)]
        else:
            idx = [t if keepdim else t.unsqueeze(dim) for t in (got, want)]
            picked = [torch.take_along_dim(x, t.clamp(0, x.shape[dim] - 1), dim) for t in idx]
            if any(((t < 0) | (t >= x.shape[dim])).any() for t in idx):
                return "index out of range"
        try:
            torch.testing.assert_close(picked[0], picked[1], rtol=0, atol=0, equal_nan=True)
        except AssertionError as err:
            return "indices select different elements: " + str(err).splitlines()[0]
        return ""

    return {output: selects_same}


def _sign_check(op, sample) -> dict[int, Callable]:
    """{vector output: check} comparing eigen- or singular vectors up to each one's sign."""
    axes = SIGN_FREE_VECTORS.get(opinfo_id(op))
    if not axes:
        return {}
    matrix = sample.input
    paired = min(matrix.shape[-2:]) if isinstance(matrix, torch.Tensor) and matrix.ndim >= 2 else None

    def up_to_sign(axis: int) -> Callable:
        def same_up_to_sign(got: torch.Tensor, want: torch.Tensor) -> str:
            if want.numel() == 0:
                return ""
            got, want = (v.movedim(axis, -2)[..., :paired] for v in (got, want))

            def normalized(v):  # each vector's largest-magnitude entry made real and positive
                pivot = v.abs().argmax(dim=-2, keepdim=True)
                # complex vectors are unique up to a unit phase, real ones up to a sign (sgn of both)
                return v * torch.take_along_dim(v, pivot, dim=-2).sgn().conj()

            rtol, atol = TOLERANCES[want.dtype]
            try:
                torch.testing.assert_close(normalized(got), normalized(want), rtol=rtol, atol=atol)
            except AssertionError as err:
                return "vectors differ beyond sign: " + str(err).splitlines()[0]
            return ""

        return same_up_to_sign

    return {output: up_to_sign(axis) for output, axis in axes.items()}


def _output_checks(op, sample) -> dict[int, Callable]:
    """{output: comparison} for the outputs PyTorch defines only up to tie order or sign."""
    return {**_tie_order_check(op, sample), **_sign_check(op, sample)}


def _sparse(outputs) -> bool:
    """Outputs jaxport does not produce: the sample is out of scope, not a failure."""
    return any(isinstance(e, torch.Tensor) and e.layout != torch.strided for e in outputs)


def _parts(t: torch.Tensor) -> torch.Tensor:
    """A complex tensor as its real and imaginary parts (a last dim of 2), others as they are."""
    return torch.view_as_real(t) if t.is_complex() else t


def assert_close(got: torch.Tensor, want: torch.Tensor, *, rtol: float, atol: float) -> None:
    """`torch.testing.assert_close` (NaN matching NaN), complex numbers judged as PyTorch's own
    tests judge them, by magnitude (|got - want| <= atol + rtol * |want|: a part far smaller than
    the number carries the number's rounding), except that in a number with a NaN or infinite part
    each part must match on its own: torch.testing takes a complex NaN in either part as equal to
    any other, so NaN + 1j would match NaN + 2j."""
    if not want.is_complex():
        torch.testing.assert_close(got, want, rtol=rtol, atol=atol, equal_nan=True, check_dtype=False,
                                   check_stride=False)
        return
    special = ~(_parts(got).isfinite() & _parts(want).isfinite()).all(-1)
    torch.testing.assert_close(_parts(got)[special], _parts(want)[special], rtol=rtol, atol=atol, equal_nan=True,
                               check_dtype=False)
    torch.testing.assert_close(got[~special], want[~special], rtol=rtol, atol=atol, check_dtype=False)


def _compare(actual, expected, dtype, values: bool, tolerance=None, checks=None, signed_zeros=False) -> str:
    """An empty string when `actual` (jax) matches `expected` (torch), else why not.

    `checks` maps an output to its own comparison, for outputs PyTorch defines only up to
    tie order or sign. With `signed_zeros`, zeros must also have PyTorch's sign.
    """
    if len(actual) != len(expected):
        return f"{len(actual)} outputs, expected {len(expected)}"
    for i, (a, e) in enumerate(zip(actual, expected)):
        if not isinstance(e, torch.Tensor):
            if isinstance(a, jax.Array) and a.ndim == 0:
                a = a.item()
            if values and e != a and not (isinstance(e, float) and np.isnan(e) and np.isnan(a)):
                return f"output {i}: {a!r} != {e!r}"
            continue
        if not hasattr(a, "dtype"):
            return f"output {i}: got {type(a).__name__}, expected a tensor"
        want_dtype = np.dtype(jax.dtypes.canonicalize_dtype(dtypes.numpy_dtype(e.dtype)))
        if np.dtype(a.dtype) != want_dtype:
            return f"output {i}: dtype {np.dtype(a.dtype).name}, expected {want_dtype.name}"
        if tuple(a.shape) != tuple(e.shape):
            return f"output {i}: shape {tuple(a.shape)}, expected {tuple(e.shape)}"
        if not values:
            continue
        got = dlpack.to_torch(np.array(a))
        if checks and i in checks:
            why = checks[i](got, e)
            if why:
                return f"output {i}: {why}"
            continue
        rtol, atol = tolerance or TOLERANCES.get(e.dtype, (0, 0))
        want = e.detach().cpu().resolve_conj().resolve_neg()
        try:
            assert_close(got, want, rtol=rtol, atol=atol)
        except AssertionError as err:
            lines = [ln for ln in str(err).splitlines() if ln.strip()]
            return f"output {i}: " + "; ".join(lines[:3])
        why = _signed_zeros(_parts(got), _parts(want)) if signed_zeros else ""
        if why:
            return f"output {i}: {why}"
    return ""


def convert_sample(module, tensors, decompose: str = "auto"):
    """(model, None) for a sample's module exported and converted by jaxport (strict: a missing
    lowering raises), else (None, the outcome that says why not)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            ep = torch.export.export(module, tuple(t.detach().clone() for t in tensors), strict=False)
        except Exception as e:
            return None, Outcome("unexportable", f"torch.export fails: {type(e).__name__}: {str(e)[:120]}")
        if decompose == "core":
            # PyTorch's own decompositions, which jaxport's "core" runs first: where they fail the
            # sample is out of reach (PyTorch's failure); any crash after them is jaxport's.
            try:
                ep.run_decompositions()
            except Exception as e:
                return None, Outcome("unexportable", f"run_decompositions fails: {type(e).__name__}")
        try:
            model = jaxport.from_exported_program(ep, decompose=decompose)
        except UnsupportedOpsError as e:
            return None, Outcome("unconvertible", "missing " + ", ".join(e.ops), tuple(e.ops))
        except ExportError as e:
            return None, Outcome("unconvertible", f"{type(e).__name__}: {str(e)[:200]}")
        except Exception as e:
            return None, Outcome("failed", f"conversion crashed: {type(e).__name__}: {str(e)[:200]}")
    model.strict = True
    return model, None


def further_than_torch(ours: torch.Tensor, theirs: torch.Tensor, exact: torch.Tensor,
                       tolerance: tuple[float, float]) -> int:
    """How many elements of jaxport's `ours` are further from the float64 `exact` than PyTorch's
    `theirs` is, by more than `tolerance` (rtol, atol); all three float64 (or complex128, apart by
    magnitude), NaN matching NaN."""
    rtol, atol = tolerance
    slack = (theirs - exact).abs() + atol + rtol * exact.abs()
    return int((((ours - exact).abs() > slack) & ~(ours.isnan() & exact.isnan())).sum())


def _as_accurate_as_torch(module, tensors, actual, expected, dtype) -> str:
    """Empty when `actual` is elementwise no further than PyTorch's `expected` from a float64 run."""
    wide = [t.double() if t.is_floating_point() else t for t in tensors]
    with torch.no_grad():
        exact = _flat_outputs(module(*wide))
    for i, (a, e, x) in enumerate(zip(actual, expected, exact)):
        if not isinstance(e, torch.Tensor) or not e.is_floating_point():
            continue
        worse = further_than_torch(torch.from_numpy(np.asarray(a, np.float64)), e.double(), x.double(),
                                   TOLERANCES[dtype])
        if worse:
            return f"output {i}: {worse} elements further from float64 than PyTorch"
    return ""


#: How a sample's output elements read its operands, so that a failure can name the operand
#: values at each element that differs (`Outcome.operands`, which entries about values judge):
#: "elementwise", outputs of the floating operands' broadcast shape, element i read from their
#: elements i; "rows", operands of shape (rows, n) reduced along the last dim, output element
#: (i, ...) read from row i.
LAYOUTS = ("elementwise", "rows")


def layout(op) -> str | None:
    """The `LAYOUTS` entry of an OpInfo op's samples: "elementwise" for OpInfo's unary and binary
    ufuncs, else None (its failures name no operand values)."""
    from torch.testing._internal.opinfo.core import BinaryUfuncInfo, UnaryUfuncInfo

    return "elementwise" if isinstance(op, (UnaryUfuncInfo, BinaryUfuncInfo)) else None


def differing(got: torch.Tensor, want: torch.Tensor, tolerance: tuple[float, float], signed_zeros=False) -> torch.Tensor:
    """Where `got` is not `want` (same shape), as `_compare` judges: NaN against a number, another
    infinity, further apart than `tolerance` (rtol, atol), or with `signed_zeros` zeros of other
    signs (subnormals counting as zeros); integers and bools exactly; complex numbers as
    `assert_close` judges them, by magnitude unless a part is NaN or infinite, and by parts for
    the signs of zeros."""
    if want.is_complex():
        by_parts = differing(_parts(got), _parts(want), tolerance, signed_zeros).any(-1)
        special = ~(_parts(got).isfinite() & _parts(want).isfinite()).all(-1)
        rtol, atol = tolerance
        g, w = got.to(torch.complex128), want.to(torch.complex128)
        by_magnitude = (g - w).abs() > atol + rtol * w.abs()
        if signed_zeros:
            by_magnitude |= differing(_parts(got), _parts(want), (math.inf, math.inf), signed_zeros).any(-1)
        return torch.where(special, by_parts, by_magnitude)
    if not want.is_floating_point():
        return got != want
    rtol, atol = tolerance
    g, w = got.double(), want.double()
    bad = torch.where(g.isnan() | w.isnan(), g.isnan() != w.isnan(),
                      torch.where(g.isinf() | w.isinf(), g != w, (g - w).abs() > atol + rtol * w.abs()))
    if signed_zeros and got.dtype == want.dtype:
        g, w = flush_subnormals(got), flush_subnormals(want)
        bad |= (g == 0) & (w == 0) & (g.signbit() != w.signbit())
    return bad


def _operands_at(layout_: str, tensors, actual, expected, tolerance, signed_zeros, skip) -> tuple[torch.Tensor, ...]:
    """The floating operands among `tensors` at every output element that differs, as `layout_`
    maps outputs to operands (`LAYOUTS`); empty when it cannot tell (an output of another shape or
    dtype, or none that differs by value: its own comparison failed, `skip`)."""
    floats = [t for t in tensors if t.is_floating_point()]
    mask = None
    for i, (a, e) in enumerate(zip(actual, expected)):
        if not isinstance(e, torch.Tensor) or i in skip:
            continue
        if not hasattr(a, "shape") or tuple(a.shape) != tuple(e.shape) or not floats:
            return ()
        bad = differing(dlpack.to_torch(np.array(a)), e.detach(), tolerance or TOLERANCES.get(e.dtype, (0, 0)),
                        signed_zeros)
        if layout_ == "rows":
            if bad.ndim == 0 or any(t.ndim != 2 or t.shape[0] != bad.shape[0] for t in floats):
                return ()
            bad = bad.reshape(bad.shape[0], -1).any(1)
        elif tuple(bad.shape) != tuple(torch.broadcast_shapes(*(t.shape for t in floats))):
            return ()
        mask = bad if mask is None else mask | bad
    if mask is None or not mask.any():
        return ()
    if layout_ == "rows":
        return tuple(t[mask] for t in floats)
    return tuple(t.broadcast_to(mask.shape)[mask] for t in floats)


def _judge(op, sample, dtype, actual, expected, values: bool, signed_zeros=False) -> str:
    """Why `actual` does not match PyTorch's `expected` (empty if it does), with the harness's
    per-op tolerances and float64 references applied."""
    why = _compare(actual, expected, dtype, values, tolerance_override(op, dtype),
                   _output_checks(op, sample), signed_zeros)
    referenced = (HALF_ACCURACY_REFERENCE if dtype in (torch.float16, torch.bfloat16)
                  else FLOAT32_ACCURACY_REFERENCE if dtype == torch.float32 else {})
    if why and opinfo_id(op) in referenced:
        module, tensors = _sample_module(op, sample)
        closer = _as_accurate_as_torch(module, tensors, actual, expected, dtype)
        why = closer and f"{why} ({closer})"
    return why


def _run_torch(module, tensors, *, seed: int) -> list:
    torch.manual_seed(seed)
    with torch.no_grad():
        return _flat_outputs(module(*[t.clone() for t in tensors]))


def _draws_random(model, inputs) -> bool:
    """Whether jaxport's output changes with its random key (dropout in a training-mode
    sample, a randomized algorithm). OpInfo seeds PyTorch's draws, but no two libraries'
    generators agree, so such values are compared by shape and dtype only.

    Several keys are tried because two can agree by chance: attention that puts its weight on
    one or two keys per row leaves only a few dropout draws that matter.
    """
    if not model.program.random_nodes():  # none, or all switched off (dropout_p=0, train=False)
        return False

    def run(seed):
        return interpret(model.program, model.params, inputs, rng=jax.random.key(seed))[0]

    first = run(0)
    return any(
        not np.array_equal(np.asarray(a), np.asarray(b), equal_nan=True)
        for seed in range(1, 8) for a, b in zip(first, run(seed))
    )


#: How a converted sample runs: op by op (`apply` outside jit) and under `jax.jit`.
MODES = ("eager", "jit")
#: The modes each `--opinfo` level runs: the smoke level (make test) jitted only, since a sample's
#: program is one op or a few and jitting it whole checks nearly what running it op by op does.
LEVEL_MODES = {"smoke": ("jit",), "standard": MODES, "wide": MODES, "full": MODES}


def _failed(op, sample, dtype, detail, tensors, actual, expected, ops=(), *, layout_=None,
            signed_zeros=False) -> Outcome:
    """A failed sample's outcome, naming its operands where they differ when `layout_` is given."""
    operands = ()
    if layout_:
        operands = _operands_at(layout_, tensors, actual, expected, tolerance_override(op, dtype),
                                signed_zeros, _output_checks(op, sample))
    return Outcome("failed", detail, ops, operands)


def run_sample(op, sample, dtype, *, decompose: str = "auto", special_values: bool = False,
               modes: tuple[str, ...] = MODES, layout: str | None = None) -> Outcome:
    """Export, convert and compare one OpInfo sample, run in each of `modes` ("eager": op by op,
    "jit"); a model that cannot be jitted (value-dependent shapes) always runs op by op too.

    `special_values` marks a sample built from NaN, infinities, signed zeros and subnormals:
    zeros then compare by sign, and PyTorch's reference sees subnormals as XLA:CPU does
    (`SUBNORMALS_AS_ZERO`). With a `layout` (`LAYOUTS`), a failed sample's outcome names the
    operand values at the elements that differ.
    """
    module, tensors = _sample_module(op, sample)
    try:
        if special_values:
            expected = [flush_subnormals(e) for e in
                        _run_torch(module, [flush_subnormals(t) for t in tensors], seed=0)]
        else:
            expected = _run_torch(module, tensors, seed=0)
    except Exception as e:
        return Outcome("unexportable", f"PyTorch eager fails: {type(e).__name__}")
    if _sparse(expected):
        return Outcome("unexportable", "sparse output")
    model, refused = convert_sample(module, tensors, decompose)
    if refused:
        return refused
    ops = tuple(sorted(model.program.ops()))
    inputs = [dlpack.to_jax(t) for t in tensors]
    values = op.name not in UNCHECKED_VALUES and not _draws_random(model, inputs)
    if not model.jittable and "eager" not in modes:
        modes = ("eager", *modes)
    for mode in modes:
        fn = model.apply if mode == "eager" else jax.jit(model.apply)
        try:
            actual = _flat_outputs(fn(model.params, *inputs))
        except LoweringError as e:
            if mode == "jit" and not model.jittable and "depends on tensor values" in str(e):
                # XLA cannot compile value-dependent shapes; the clear error is the right answer.
                return Outcome("passed", EAGER_ONLY, ops)
            return Outcome("failed", f"{mode}: LoweringError: {str(e).splitlines()[0][:200]}", ops)
        except Exception as e:
            return Outcome("failed", f"{mode}: {type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}", ops)
        why = _judge(op, sample, dtype, actual, expected, values, signed_zeros=special_values)
        if why:
            return _failed(op, sample, dtype, f"{mode}: {why}", tensors, actual, expected, ops, layout_=layout,
                           signed_zeros=special_values)
    return Outcome("passed", "", ops)


@functools.cache
def op_db():
    from torch.testing._internal import common_utils
    from torch.testing._internal.common_methods_invocations import op_db as db
    from torch.testing._internal.opinfo import core

    # Every sample_inputs call asks which unittest.TestCase method is running, by inspect.stack(),
    # which reads the source of every frame and scans sys.modules for each: under pytest, with
    # torch, JAX and transformers loaded, that made test_device_shapes 12x slower (433 s for 34).
    # This suite has no TestCase methods, so the answer is always None, which PyTorch reads as
    # "seed with the default SEED": answering it directly changes no sample.
    common_utils.extract_test_fn = core.extract_test_fn = _no_unittest_method
    return db


def _no_unittest_method() -> None:
    return None


def opinfo_id(op) -> str:
    return op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")


def tested_dtypes(op) -> list[torch.dtype]:
    supported = op.supported_dtypes("cpu")
    return [d for d in DTYPES if d in supported]


def samples(op, dtype, limit: int | None = None, requires_grad: bool = False) -> list:
    """OpInfo's first `limit` samples of `op` in `dtype` (None: all). Only those are drawn: OpInfo
    reseeds before each sample (so the first `limit` are the same either way), and each reseed
    costs about 5 ms."""
    torch.manual_seed(0)
    return list(itertools.islice(op.sample_inputs("cpu", dtype, requires_grad=requires_grad), limit))


def _extremity(sample) -> int:
    """2 if a floating operand holds NaN or an infinity, 1 if it holds values beyond 1e4 or
    nonzero ones below 1e-4 in magnitude, else 0."""
    leaves = [x for x in pytree.tree_leaves((sample.input, sample.args, sample.kwargs))
              if isinstance(x, torch.Tensor) and x.is_floating_point() and x.numel()]
    if any(not torch.isfinite(x).all() for x in leaves):
        return 2
    if any((x.abs() > 1e4).any() or ((x != 0) & (x.abs() < 1e-4)).any() for x in leaves):
        return 1
    return 0


def reference_samples(op, dtype, *, limit: int | None) -> list:
    """The samples of OpInfo's `reference_inputs` that `sample_inputs` lacks and that hold
    extremal values: those with NaN or infinities first, then very large or small ones, in
    `reference_inputs`' order, at most `limit` (None: all). Ops without a reference-inputs
    function have none."""
    if op.reference_inputs_func is None:
        return []
    torch.manual_seed(0)
    ranked = [(-_extremity(s), i, s) for i, s in enumerate(op.reference_inputs("cpu", dtype, requires_grad=False))]
    extremal = [s for rank, _, s in sorted(ranked, key=lambda r: r[:2]) if rank < 0]
    return extremal[:limit]


def _eager_outputs(out) -> tuple[list, str]:
    """(jax values of the JaxTensor outputs, why not when an output is not one)."""
    from jaxport.tensor import JaxTensor

    values = []
    for leaf in _flat_outputs(out):
        if isinstance(leaf, torch.Tensor):
            if not isinstance(leaf, JaxTensor):
                return [], f"returned a {type(leaf).__name__} on {leaf.device}, not a JaxTensor"
            values.append(leaf.jax())
        else:
            values.append(leaf)
    return values, ""


def _run_on_jax(fn, cloned, variant: str):
    """`fn` on copies of a sample's tensors moved to the jax device (inside `jaxport.eager()`)."""
    x, args, kwargs = pytree.tree_map_only(torch.Tensor, lambda t: t.to("jax"), cloned)
    # A sample's device (the CPU, positionally in `x.to("cpu", ...)`) is the jax device here.
    args = tuple("jax" if str(a) == "cpu" and isinstance(a, (str, torch.device)) else a for a in args)
    if "device" in kwargs:  # factories: what a user on the jax device would write
        kwargs = {**kwargs, "device": "jax"}
        if variant == "out":  # the out= tensor says where the result lives
            del kwargs["device"]
    with torch.no_grad():
        out = fn(x, *args, **kwargs)
        if variant == "out":
            out_arg = pytree.tree_map_only(torch.Tensor, lambda t: torch.empty(0, dtype=t.dtype, device="jax"), out)
            out = fn(x, *args, **kwargs, out=out_arg)
    return out


@contextlib.contextmanager
def _keys_drawn(seed: int | None = None):
    """Count the random keys the eager frontend draws; with `seed`, draw them from it instead
    of from torch's generator (which OpInfo's wrappers reseed to 42 on every call)."""
    from jaxport.tensor import dispatch as eager_dispatch

    drawn = []
    draw = eager_dispatch._next_key

    def counted(generator=None):
        drawn.append(None)
        return draw(generator) if seed is None else jax.random.key(seed * 1000 + len(drawn))

    with unittest.mock.patch.object(eager_dispatch, "_next_key", counted):
        yield drawn


def _eager_draws_random(fn, cloned, variant: str) -> bool:
    """Whether an eager result changes with its random keys (the eager twin of `_draws_random`)."""

    def run(seed):
        with _keys_drawn(seed):
            return [np.asarray(t) for t in _eager_outputs(_run_on_jax(fn, cloned, variant))[0]]

    first = run(0)
    return any(not np.array_equal(a, b, equal_nan=True) for seed in range(1, 8) for a, b in zip(first, run(seed)))


def run_sample_eager(op, sample, dtype, *, variant: str = "op", layout: str | None = None) -> Outcome:
    """Run one OpInfo sample on `device="jax"` through the eager frontend and compare.

    `variant` is "op" (the function), "inplace" (`op_`, compared through the mutated input)
    or "out" (the `out=` form, given an empty output to resize and fill); `layout` as for
    `run_sample`.
    """
    fn = op.op if variant != "inplace" else op.inplace_variant
    if fn is None:
        return Outcome("unexportable", f"no {variant} variant")
    cloned = pytree.tree_map_only(torch.Tensor, lambda t: t.detach().clone(),
                                  (sample.input, tuple(sample.args), dict(sample.kwargs)))
    try:
        with torch.no_grad():
            x, args, kwargs = pytree.tree_map_only(torch.Tensor, torch.clone, cloned)
            expected = fn(x, *args, **kwargs)
            if variant == "out":
                expected_out = pytree.tree_map_only(torch.Tensor, lambda t: t.new_empty(0), expected)
                expected = fn(x, *args, **kwargs, out=expected_out)
    except Exception as e:
        return Outcome("unexportable", f"PyTorch eager fails: {type(e).__name__}")
    expected = _flat_outputs(expected)
    if _sparse(expected):
        return Outcome("unexportable", "sparse output")
    with warnings.catch_warnings(), jaxport.eager():
        warnings.simplefilter("ignore")
        try:
            with _keys_drawn() as drawn:
                out = _run_on_jax(fn, cloned, variant)
        except UnsupportedOpsError as e:
            return Outcome("unconvertible", "missing " + ", ".join(e.ops), tuple(e.ops))
        except Exception as e:
            return Outcome("failed", f"eager: {type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}")
        actual, why = _eager_outputs(out)
        values = op.name not in UNCHECKED_VALUES and not (drawn and _eager_draws_random(fn, cloned, variant))
    if why:
        return Outcome("failed", f"eager {variant}: {why}")
    why = _judge(op, sample, dtype, actual, expected, values)
    if why:
        tensors = [t for t in pytree.tree_leaves(cloned) if isinstance(t, torch.Tensor)]
        return _failed(op, sample, dtype, f"eager {variant}: {why}", tensors, actual, expected, layout_=layout)
    return Outcome("passed")
