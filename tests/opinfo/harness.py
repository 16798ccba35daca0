"""Drive PyTorch's OpInfo database through torch.export -> jaxport and compare with eager PyTorch.

Each OpInfo sample becomes a tiny module whose tensor leaves are inputs and
whose other arguments are constants. It is exported, converted, run both
op-by-op and under `jax.jit`, and compared with PyTorch eager on the CPU.
"""

from __future__ import annotations

import dataclasses
import functools
import warnings

import jax
import numpy as np
import torch
import torch.utils._pytree as pytree

import jaxport
from jaxport import _torch_utils as tu
from jaxport.errors import ExportError, UnsupportedOpsError

#: dtypes the conformance suite tests when the op supports them.
DTYPES = (
    torch.float32,
    torch.float16,
    torch.bfloat16,
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
}

#: Looser (rtol, atol) for some (op, dtype), each with its reason; keyed like TOLERANCES.
TOLERANCE_OVERRIDES = {
    ("nn.functional.conv2d", torch.float32): (
        (1e-5, 3e-5),
        "large depthwise sums: float32 accumulation order differs (both ~1.3e-5 from float64)",
    ),
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


@dataclasses.dataclass
class Outcome:
    status: str  # passed | failed | unexportable | unconvertible
    detail: str = ""
    aten_ops: tuple[str, ...] = ()


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


def _flat_outputs(out):
    leaves, _ = pytree.tree_flatten(out)
    return leaves


def _compare(actual, expected, dtype, values: bool, tolerance=None) -> str:
    """An empty string when `actual` (jax) matches `expected` (torch), else why not."""
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
        want = np.dtype(jax.dtypes.canonicalize_dtype(tu.numpy_dtype(e.dtype)))
        if np.dtype(a.dtype) != want:
            return f"output {i}: dtype {np.dtype(a.dtype).name}, expected {want.name}"
        if tuple(a.shape) != tuple(e.shape):
            return f"output {i}: shape {tuple(a.shape)}, expected {tuple(e.shape)}"
        if not values:
            continue
        got = tu.to_torch(np.array(a))
        rtol, atol = tolerance or TOLERANCES.get(e.dtype, (0, 0))
        try:
            torch.testing.assert_close(
                got, e.detach().cpu().resolve_conj().resolve_neg(), rtol=rtol, atol=atol,
                equal_nan=True, check_dtype=False, check_stride=False,
            )
        except AssertionError as err:
            lines = [ln for ln in str(err).splitlines() if ln.strip()]
            return f"output {i}: " + "; ".join(lines[:3])
    return ""


def run_sample(op, sample, dtype, *, decompose: str = "auto") -> Outcome:
    """Export, convert and compare one OpInfo sample."""
    leaves, spec = pytree.tree_flatten((sample.input, tuple(sample.args), dict(sample.kwargs)))
    positions = [i for i, x in enumerate(leaves) if isinstance(x, torch.Tensor)]
    tensors = [leaves[i].detach() for i in positions]
    module = _SampleModule(op.op, leaves, spec, positions)
    try:
        with torch.no_grad():
            expected = module(*[t.clone() for t in tensors])
    except Exception as e:
        return Outcome("unexportable", f"PyTorch eager fails: {type(e).__name__}")
    expected = _flat_outputs(expected)
    if any(isinstance(e, torch.Tensor) and (e.is_complex() or e.layout != torch.strided) for e in expected):
        return Outcome("unexportable", "complex or sparse output")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            ep = torch.export.export(module, tuple(t.clone() for t in tensors), strict=False)
        except Exception as e:
            return Outcome("unexportable", f"torch.export fails: {type(e).__name__}: {str(e)[:120]}")
        try:
            model = jaxport.from_exported_program(ep, decompose=decompose)
        except UnsupportedOpsError as e:
            return Outcome("unconvertible", "missing " + ", ".join(e.ops), tuple(e.ops))
        except ExportError as e:
            return Outcome("unconvertible", str(e)[:200])
        except Exception as e:
            if decompose == "core":
                return Outcome("unexportable", f"run_decompositions fails: {type(e).__name__}")
            return Outcome("failed", f"conversion crashed: {type(e).__name__}: {str(e)[:200]}")
    ops = tuple(sorted(model.program.ops()))
    model.strict = True
    inputs = [tu.to_jax(t) for t in tensors]
    values = op.name not in UNCHECKED_VALUES
    for mode in ("eager", "jit"):
        fn = model.apply if mode == "eager" else jax.jit(model.apply)
        try:
            actual = _flat_outputs(fn(model.params, *inputs))
        except Exception as e:
            return Outcome("failed", f"{mode}: {type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}", ops)
        override = TOLERANCE_OVERRIDES.get((opinfo_id(op), dtype))
        why = _compare(actual, expected, dtype, values, override[0] if override else None)
        if why:
            return Outcome("failed", f"{mode}: {why}", ops)
    return Outcome("passed", "", ops)


@functools.cache
def op_db():
    from torch.testing._internal.common_methods_invocations import op_db as db

    return db


def opinfo_id(op) -> str:
    return op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")


def tested_dtypes(op) -> list[torch.dtype]:
    supported = op.supported_dtypes("cpu")
    return [d for d in DTYPES if d in supported]


def samples(op, dtype):
    torch.manual_seed(0)
    return list(op.sample_inputs("cpu", dtype, requires_grad=False))
