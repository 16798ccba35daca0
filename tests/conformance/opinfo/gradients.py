"""Gradients of OpInfo samples: jaxport's `jax.vjp` and `jax.jvp` through the converted program
against PyTorch's reverse-mode (`torch.autograd.grad`) and forward-mode (`torch.autograd.forward_ad`)
derivatives of the same sample, with the same random cotangents and tangents.

A sample's differentiable inputs are its tensors OpInfo marks `requires_grad` (floating and complex
ones; targets, indices and masks stay constants), its differentiable outputs the floating and
complex tensors PyTorch's autograd connects to them.

A sample is differentiated as OpInfo's own gradient checks differentiate it
(`_differentiated_function`).

Complex numbers: JAX's cotangents and PyTorch's gradients are conjugates of each other. For
inputs z and a cotangent v of the outputs, PyTorch's vector-Jacobian product is the conjugate of
JAX's taken at conj(v): `torch_vjp(v) == conj(jax_vjp(conj(v)))` (for a real loss, a real v:
PyTorch's `.grad` is the conjugate of `jax.grad`). Forward mode agrees as it is: both push a
tangent through the same real-linear map. Real inputs and outputs are unaffected.

Dtypes: a JAX tangent has its output's dtype. Where PyTorch's forward mode returns a wider one
(float32 for a float16 output), PyTorch's is rounded to the output's dtype before comparing.
"""

from __future__ import annotations

import functools
import zlib

import jax
import jax.numpy as jnp
import numpy as np
import torch
import torch.utils._pytree as pytree
from torch.autograd import forward_ad

from jaxport import dlpack

from . import harness
from .harness import Outcome

#: The gradient paths: reverse mode ("vjp") and forward mode ("jvp").
GRADIENT_PATHS = ("vjp", "jvp")

#: (rtol, atol) of a gradient by dtype: a derivative is a few more operations than its value, in
#: another order (a transposed product, a reduction of broadcast cotangents).
GRADIENT_TOLERANCES = {
    torch.float32: (1e-4, 1e-5),
    torch.float64: (1e-7, 1e-7),
    torch.complex64: (1e-4, 1e-5),
    torch.complex128: (1e-7, 1e-7),
    torch.float16: (1e-2, 1e-2),
    torch.bfloat16: (5e-2, 5e-2),
}


def gradient_dtypes(op, path: str) -> list[torch.dtype]:
    """The floating and complex dtypes of `harness.DTYPES` in which `op` has PyTorch derivatives on
    `path`'s mode."""
    if not op.supports_autograd or (path == "jvp" and not op.supports_forward_ad):
        return []
    supported = op.supported_backward_dtypes("cpu")
    return [d for d in harness.DTYPES if d in supported and (d.is_floating_point or d.is_complex)]


def gradient_samples(op, dtype, limit: int | None = None) -> list:
    """OpInfo's first `limit` samples of `op` (None: all) drawn for differentiation
    (`requires_grad=True`: away from the points where PyTorch's derivative is undefined, for some
    ops other samples)."""
    return harness.samples(op, dtype, limit, requires_grad=True)


def _differentiated_function(op, sample, *args, **kwargs):
    """The function of a sample OpInfo differentiates: the op through its `gradcheck_wrapper` (which,
    for ops of Hermitian matrices, makes the input Hermitian), its outputs through the sample's
    `output_process_fn_grad` (which drops what the derivative leaves undefined, such as an
    eigenvector's sign)."""
    return sample.output_process_fn_grad(op.gradcheck_wrapper(op.op, *args, **kwargs))


def _differentiable(t) -> bool:
    return isinstance(t, torch.Tensor) and (t.is_floating_point() or t.is_complex())


def _random_like(t: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    return torch.randn(t.shape, dtype=t.dtype, generator=generator)


#: Ops whose derivatives are judged normwise, each matrix against its own largest entry
#: (|got - want| <= atol + rtol * max |want| over the matrix), with the reason.
NORMWISE = {
    "matrix_exp": "the derivative of a matrix function is accurate relative to the matrix's norm, "
    "not entry by entry: jaxport differentiates JAX's Pade approximant and its squarings, PyTorch "
    "takes a block matrix's exponential, and the rounding of entries near 7.4e4 reaches the small "
    "ones (sample 0's tangents differ by 1.6e-3 at one of 25 entries on one machine, by 0.06 at "
    "an entry of 6.7e4 on another, and entry by entry the sample passed or failed by machine)",
}


def _normwise_difference(got: torch.Tensor, want: torch.Tensor, rtol: float, atol: float) -> str:
    """Empty when every matrix of `got` is within atol + rtol x its largest |entry| of `want`'s."""
    scale = want.abs().nan_to_num(posinf=0.0).amax(dim=(-2, -1), keepdim=True) if want.ndim >= 2 else want.abs()
    apart = (got - want).abs()
    outside = (apart > atol + rtol * scale) | (got.isnan() != want.isnan())
    if not outside.any():
        return ""
    return (f"{int(outside.sum())} of {outside.numel()} entries further than {rtol:g} x their matrix's "
            f"largest entry (+ {atol:g}); largest difference {apart.nan_to_num().max().item():.3g}")


def _judge(got, want, dtype, what: str, normwise: bool = False) -> str:
    """Why jaxport's derivatives `got` (jax arrays, PyTorch's convention) differ from `want`,
    entry by entry or, `normwise`, matrix by matrix (`NORMWISE`)."""
    rtol, atol = GRADIENT_TOLERANCES[dtype]
    for i, (g, w) in enumerate(zip(got, want)):
        g = g if isinstance(g, torch.Tensor) else dlpack.to_torch(np.asarray(g))
        if tuple(g.shape) != tuple(w.shape):
            return f"{what} {i}: shape {tuple(g.shape)}, expected {tuple(w.shape)}"
        if g.dtype != w.dtype:
            return f"{what} {i}: dtype {g.dtype}, expected {w.dtype}"
        if normwise:
            why = _normwise_difference(g, w.detach().resolve_conj().resolve_neg(), rtol, atol)
            if why:
                return f"{what} {i}: {why}"
            continue
        try:
            harness.assert_close(g, w.detach().resolve_conj().resolve_neg(), rtol=rtol, atol=atol)
        except AssertionError as err:
            lines = [ln for ln in str(err).splitlines() if ln.strip()]
            return f"{what} {i}: " + "; ".join(lines[:3])
    return ""


def _torch_derivatives(module, tensors, wrt, path, generator=None, directions=None):
    """(outputs compared, PyTorch's derivatives, directions): gradients in the `wrt` inputs for
    random cotangents of the differentiable outputs ("vjp"), or the outputs' tangents for random
    tangents of the `wrt` inputs ("jvp"); `directions` given, those are used instead of drawn."""
    leaves = [t.detach().clone().requires_grad_(i in wrt) for i, t in enumerate(tensors)]
    torch.manual_seed(0)
    if path == "vjp":
        outputs = harness._flat_outputs(module(*leaves))
        picked = [i for i, o in enumerate(outputs) if _differentiable(o) and o.requires_grad]
        if directions is None:
            directions = [_random_like(outputs[i], generator) for i in picked]
        want = torch.autograd.grad([outputs[i] for i in picked], [leaves[i] for i in wrt], directions,
                                   allow_unused=True, materialize_grads=True) if picked else []
        return picked, list(want), directions
    if directions is None:
        directions = [_random_like(tensors[i], generator) for i in wrt]
    with forward_ad.dual_level():
        duals = list(leaves)
        for i, tangent in zip(wrt, directions):
            duals[i] = forward_ad.make_dual(leaves[i].detach(), tangent)  # the clone, as reverse mode
        unpacked = [forward_ad.unpack_dual(o) if isinstance(o, torch.Tensor) else None
                    for o in harness._flat_outputs(module(*duals))]
    # An output without a tangent is one PyTorch's forward mode leaves undefined (batch norm's
    # saved statistics) or one no input reaches: neither is compared.
    picked = [i for i, o in enumerate(unpacked) if o is not None and _differentiable(o.primal) and o.tangent is not None]
    # JAX gives a tangent its output's dtype, where PyTorch's forward mode may promote it (frexp's
    # and renorm's float32 tangents of half outputs): it is compared as the output's dtype holds it.
    return picked, [unpacked[i].tangent.to(unpacked[i].primal.dtype) for i in picked], directions


#: The dtype a sample is widened to for `_no_less_accurate`.
_WIDE = {torch.float32: torch.float64, torch.float16: torch.float64, torch.bfloat16: torch.float64,
         torch.complex64: torch.complex128}


def _no_less_accurate(module, tensors, wrt, path, directions, got, want) -> str:
    """Empty when jaxport's derivatives `got` are, element by element, no further than PyTorch's
    `want` from PyTorch's derivatives of the same sample in float64 (or complex128): the two
    libraries' derivative formulas round differently, and where PyTorch's is the less accurate
    one the usual tolerance would blame jaxport."""
    def widened(t):
        return t.to(_WIDE[t.dtype]) if isinstance(t, torch.Tensor) and t.dtype in _WIDE else t

    try:
        _, exact, _ = _torch_derivatives(module, [widened(t) for t in tensors], wrt, path,
                                         directions=[widened(d) for d in directions])
    except Exception as e:
        return f"no float64 reference: {type(e).__name__}"
    for i, (g, w, x) in enumerate(zip(got, want, exact)):
        ours = dlpack.to_torch(np.asarray(g)).to(x.dtype)
        theirs = w.detach().resolve_conj().to(x.dtype)
        worse = harness.further_than_torch(ours, theirs, x.resolve_conj(), GRADIENT_TOLERANCES[w.dtype])
        if worse:
            return f"derivative {i}: {worse} elements further from float64 than PyTorch"
    return ""


#: Ops whose derivatives route by the order of tied elements (`harness.TIE_ORDER_INDICES`, which
#: PyTorch's unstable CPU sorts leave unspecified): {op: (dim keyword, position, default)}.
TIE_ORDER_DIMS = {name: dim for name, (_, dim, _) in harness.TIE_ORDER_INDICES.items()} | {"msort": ("", 0, 0)}


def _sorted_within_ties(keys: torch.Tensor, values: torch.Tensor, dim: int) -> torch.Tensor:
    """`values` along `dim`, rearranged so that each run of equal `keys` holds its values sorted:
    the same for two derivatives that differ only in which of the tied elements gets which."""
    if keys.ndim == 0:
        return values
    keys, values = keys.movedim(dim, -1), values.movedim(dim, -1)
    by_value = torch.sort(values, dim=-1, stable=True).indices
    keys, values = keys.gather(-1, by_value), values.gather(-1, by_value)
    return values.gather(-1, torch.sort(keys, dim=-1, stable=True).indices)


def _up_to_tie_order(op, sample, tensors, path, got, want, dtype) -> str:
    """`_judge` of derivatives compared up to the order of tied elements: reverse mode's gradient
    within runs of equal input values, forward mode's output tangents within runs of equal
    outputs, along the op's dim."""
    dim = harness._argument(sample, TIE_ORDER_DIMS[op.name])
    if path == "vjp":
        keys = [tensors[0].detach()] * len(got)
    else:
        keys = [o.detach() for o in harness._flat_outputs(op(sample.input.detach(), *sample.args, **sample.kwargs))]
        keys = [keys[0]] * len(got)  # the values output: the others (indices) have no tangent
    got = [_sorted_within_ties(k, dlpack.to_torch(np.asarray(g)), dim) for k, g in zip(keys, got)]
    want = [_sorted_within_ties(k, w.detach(), dim) for k, w in zip(keys, want)]
    return _judge(got, want, dtype, "gradient" if path == "vjp" else "tangent")


def run_gradient_sample(op, sample, dtype, path: str, *, seed: int = 0) -> Outcome:
    """One sample's derivatives on `path` ("vjp" or "jvp"), jaxport's against PyTorch's.

    The cotangents (or tangents) are drawn from a generator seeded by the op's name and `seed`.
    Samples PyTorch cannot differentiate, or whose outputs do not depend differentiably on an
    input, are "unexportable" (out of scope); random ops are compared by shape only. A float32,
    complex64 or half sample outside the tolerance passes where jaxport is no further than PyTorch
    from PyTorch's float64 derivatives (`_no_less_accurate`).
    """
    module, tensors = harness._sample_module(op, sample, functools.partial(_differentiated_function, op, sample))
    marked = [t.requires_grad for t in pytree.tree_leaves((sample.input, tuple(sample.args), dict(sample.kwargs)))
              if isinstance(t, torch.Tensor)]
    wrt = [i for i, t in enumerate(tensors) if _differentiable(t) and marked[i]]
    if not wrt:
        return Outcome("unexportable", "no differentiable input")
    generator = torch.Generator().manual_seed(zlib.crc32(harness.opinfo_id(op).encode()) + seed)
    try:
        picked, want, directions = _torch_derivatives(module, tensors, wrt, path, generator)
    except Exception as e:
        return Outcome("unexportable", f"PyTorch autograd fails: {type(e).__name__}")
    if not picked:
        return Outcome("unexportable", "no differentiable output")

    model, refused = harness.convert_sample(module, tensors)
    if refused:
        return refused
    ops = tuple(sorted(model.program.ops()))
    inputs = [dlpack.to_jax(t.detach()) for t in tensors]
    values = op.name not in harness.UNCHECKED_VALUES and not harness._draws_random(model, inputs)

    def differentiated(*args):
        full = list(inputs)
        for i, x in zip(wrt, args):
            full[i] = x
        outputs = harness._flat_outputs(model.apply(model.params, *full))
        return [outputs[i] for i in picked]

    primals = [inputs[i] for i in wrt]
    try:
        if path == "vjp":
            _, pullback = jax.vjp(differentiated, *primals)
            got = [jnp.conj(g) for g in pullback([jnp.conj(dlpack.to_jax(d)) for d in directions])]
        else:
            _, got = jax.jvp(differentiated, primals, [dlpack.to_jax(d) for d in directions])
    except Exception as e:
        return Outcome("failed", f"{path}: {type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}", ops)
    if not values:
        return Outcome("passed", "", ops)
    why = _judge(got, want, dtype, "gradient" if path == "vjp" else "tangent", normwise=op.name in NORMWISE)
    if why and op.name in TIE_ORDER_DIMS and not sample.kwargs.get("stable"):
        why = _up_to_tie_order(op, sample, tensors, path, got, want, dtype)
    if why and dtype in _WIDE:
        closer = _no_less_accurate(module, tensors, wrt, path, directions, got, want)
        why = closer and f"{why} ({closer})"
    return Outcome("failed", f"{path}: {why}", ops) if why else Outcome("passed", "", ops)
