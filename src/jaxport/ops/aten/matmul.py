"""ATen lowerings: matrix products (mm, bmm, matmul, addmm, baddbmm, addbmm, addmv, addr, dot,
vdot, einsum, tensordot, linear, multi_dot, vecdot) and grouped products.

Products accumulate float16/bfloat16 in float32 (`preferred_element_type`) and
round once, as PyTorch's kernels do; `alpha`/`beta` scaling happens in that
precision too, and `beta=0` ignores `self` entirely (NaN in it does not leak).
The `.dtype` overloads (CUDA-only: `mm.dtype`, `addmm.dtype`, ...) round that
float32 result to their `out_dtype` instead: the inputs' own, or float32 for
float16/bfloat16 inputs. Products with a weight reach the compiler through
`ops/_products.py` (`rows_times_matrix`, `rows_times_weight`), which runs the compiled CPU
kernel where it pays.
Grouped products (mixture-of-experts layers: `_grouped_mm`, transformers'
`grouped_mm_fallback`) take group sizes from the cumulative ends `offs` as
values, so shapes never depend on them: `_grouped.grouped_rows` for groups of rows or
columns (`lax.ragged_dot`; on CPU a loop over windows of rows), a masked product for groups along K. Rows (or columns) past `offs[-1]`
are 0, where PyTorch's `_grouped_mm` leaves them uninitialized.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from .._products import rows_times_matrix, rows_times_weight
from ..registry import aten, custom
from ._grouped import grouped_rows
from ._promotion import canonical, opmath_type, promote, result_type, rounded_as


def _product(fn, *operands):
    """`fn(*operands, preferred_element_type=...)` in opmath precision: (result, output dtype)."""
    dtype = result_type(*operands)
    operands = [x.astype(dtype) for x in operands]
    if dtype == np.bool_:
        out = fn(*[x.astype(np.int32) for x in operands], preferred_element_type=np.int32) != 0
        return out, dtype
    return fn(*operands, preferred_element_type=opmath_type(dtype)), dtype


def _scaled_add(self, product, beta, alpha, dtype):
    """beta * self + alpha * product, in the product's precision; `beta == 0` drops `self`."""
    if dtype == np.bool_:
        out = product & bool(alpha)
        return out | (self.astype(bool) & bool(beta)) if beta else out
    compute = product.dtype
    if alpha != 1:
        product = product * jnp.asarray(alpha, compute)
    if beta != 0:
        scaled = self.astype(compute)
        if beta != 1:
            scaled = scaled * jnp.asarray(beta, compute)
        product = product + scaled
    return product.astype(dtype)


def _matmul(a, b, preferred_element_type=None):
    if a.ndim >= 2 and b.ndim == 2 and a.dtype == b.dtype:
        return rows_times_matrix(a, b, preferred_element_type or a.dtype)
    return jnp.matmul(a, b, preferred_element_type=preferred_element_type)


def _group_bounds(offs, length):
    """(starts, ends) of the groups that end at `offs` (cumulative ends) along a dimension of `length`."""
    ends = jnp.clip(offs.astype(np.int32), 0, length)
    return jnp.concatenate([jnp.zeros((1,), np.int32), ends])[:-1], ends


def _grouped_rows(a, b, offs, dtype):
    """Row i of `a` (S, K) times `b[g]` (G, K, N) for the group g that row i falls in: (S, N)."""
    starts, ends = _group_bounds(offs, a.shape[0])
    return grouped_rows(a, b.astype(a.dtype), ends - starts, opmath_type(a.dtype)).astype(dtype)


@aten("_grouped_mm.default")
def aten__grouped_mm(self, mat2, offs=None, bias=None, out_dtype=None):
    """_grouped_mm(Tensor self, Tensor mat2, Tensor? offs=None, Tensor? bias=None, ScalarType? out_dtype=None) -> Tensor"""
    if bias is not None:
        raise ValueError("_grouped_mm with a bias is not supported (nor by PyTorch's kernels)")
    dtype = self.dtype if out_dtype is None else out_dtype
    if self.ndim == 2 and mat2.ndim == 3:  # (S, K) rows grouped by offs, (G, K, N) -> (S, N)
        return _grouped_rows(self, mat2, offs, dtype)
    if self.ndim == 3 and mat2.ndim == 2:  # (G, M, K), (K, N) columns grouped by offs -> (M, N)
        return _grouped_rows(mat2.T, jnp.swapaxes(self, 1, 2), offs, dtype).T
    compute = opmath_type(self.dtype)
    if self.ndim == 3:  # (G, M, K), (G, K, N) -> (G, M, N)
        out = lax.dot_general(self, mat2, (((2,), (1,)), ((0,), (0,))), preferred_element_type=compute)
    else:  # (M, K), (K, N), K grouped by offs -> (G, M, N)
        # A masked product: JAX cannot differentiate ragged_dot_general's ragged contraction.
        starts, ends = _group_bounds(offs, self.shape[1])
        k = jnp.arange(self.shape[1], dtype=np.int32)
        mask = (starts[:, None] <= k) & (k < ends[:, None])
        masked = jnp.where(mask[:, None, :], self[None], jnp.zeros((), self.dtype))
        out = lax.dot_general(masked, mat2, (((2,), (0,)), ((), ())), preferred_element_type=compute)
    return out.astype(dtype)


@aten("addbmm.default")
def aten_addbmm(self, batch1, batch2, *, beta=1, alpha=1):
    """addbmm(Tensor self, Tensor batch1, Tensor batch2, *, Scalar beta=1, Scalar alpha=1) -> Tensor"""
    dtype = result_type(batch1, batch2)
    if opmath_type(dtype) != dtype and batch1.shape[0] > 0:
        return _addbmm_rounded_per_batch(self, batch1, batch2, beta, alpha)
    return _addbmm(self, batch1, batch2, beta, alpha)


def _addbmm(self, batch1, batch2, beta, alpha):
    product, dtype = _product(
        lambda a, b, **kw: lax.dot_general(a, b, (((0, 2), (0, 1)), ((), ())), **kw), batch1, batch2
    )
    return _scaled_add(self, product, beta, alpha, dtype)


@functools.partial(jax.custom_jvp, nondiff_argnums=(3, 4))
def _addbmm_rounded_per_batch(self, batch1, batch2, beta, alpha):
    """addbmm in a 16-bit dtype as PyTorch's CPU kernel: one addmm per batch into the 16-bit
    result, rounding after each."""
    out = aten_addmm(self, batch1[0], batch2[0], beta=beta, alpha=alpha)
    out = jnp.broadcast_to(out, (batch1.shape[1], batch2.shape[2]))

    def step(acc, mats):
        return aten_addmm(acc, mats[0], mats[1], beta=1, alpha=alpha), None

    return lax.scan(step, out, (batch1[1:], batch2[1:]))[0]


@_addbmm_rounded_per_batch.defjvp
def _addbmm_rounded_per_batch_jvp(beta, alpha, primals, tangents):
    # The derivative sums in float32 and rounds once: rounding the tangent after every batch too
    # would take it further from the exact derivative than PyTorch's formula (its terms rounded once each).
    (self, batch1, batch2), (d_self, d1, d2) = primals, tangents
    dtype = result_type(batch1, batch2)
    dims, compute = (((0, 2), (0, 1)), ((), ())), opmath_type(dtype)
    product = (lax.dot_general(d1.astype(dtype), batch2.astype(dtype), dims, preferred_element_type=compute)
               + lax.dot_general(batch1.astype(dtype), d2.astype(dtype), dims, preferred_element_type=compute))
    return (_addbmm_rounded_per_batch(self, batch1, batch2, beta, alpha),
            _scaled_add(d_self, product, beta, alpha, dtype))


@aten("addmm.default")
def aten_addmm(self, mat1, mat2, *, beta=1, alpha=1):
    """addmm(Tensor self, Tensor mat1, Tensor mat2, *, Scalar beta=1, Scalar alpha=1) -> Tensor"""
    product, dtype = _product(_matmul, mat1, mat2)
    return _scaled_add(self, product, beta, alpha, dtype)


@aten("addmm.dtype")
def aten_addmm_dtype(self, mat1, mat2, out_dtype, *, beta=1, alpha=1):
    """addmm.dtype(Tensor self, Tensor mat1, Tensor mat2, ScalarType out_dtype, *, Scalar beta=1, Scalar alpha=1) -> Tensor"""
    product, _ = _product(_matmul, mat1, mat2)
    return _scaled_add(self, product, beta, alpha, out_dtype)


@aten("addmv.default")
def aten_addmv(self, mat, vec, *, beta=1, alpha=1):
    """addmv(Tensor self, Tensor mat, Tensor vec, *, Scalar beta=1, Scalar alpha=1) -> Tensor"""
    product, dtype = _product(_matmul, mat, vec)
    return _scaled_add(self, product, beta, alpha, dtype)


@aten("addr.default")
def aten_addr(self, vec1, vec2, *, beta=1, alpha=1):
    """addr(Tensor self, Tensor vec1, Tensor vec2, *, Scalar beta=1, Scalar alpha=1) -> Tensor"""
    dtype = result_type(vec1, vec2)
    if opmath_type(dtype) != dtype:
        # PyTorch's kernel computes beta * self + alpha * vec1 * vec2 elementwise, rounding each op.
        def r(x):
            return rounded_as(x, dtype)

        product = r(r(r(jnp.asarray(alpha, np.float32)) * vec1.astype(np.float32))[:, None] * vec2.astype(np.float32))
        if beta != 0:
            product = r(r(jnp.asarray(beta, np.float32)) * self.astype(np.float32)) + product
        return jnp.broadcast_to(product, (vec1.shape[0], vec2.shape[0])).astype(dtype)
    product, dtype = _product(
        lambda a, b, **kw: lax.dot_general(a[:, None], b[None, :], (((1,), (0,)), ((), ())), **kw), vec1, vec2
    )
    return _scaled_add(self, product, beta, alpha, dtype)


@aten("baddbmm.default")
def aten_baddbmm(self, batch1, batch2, *, beta=1, alpha=1):
    """baddbmm(Tensor self, Tensor batch1, Tensor batch2, *, Scalar beta=1, Scalar alpha=1) -> Tensor"""
    product, dtype = _product(_matmul, batch1, batch2)
    return _scaled_add(self, product, beta, alpha, dtype)


@aten("baddbmm.dtype")
def aten_baddbmm_dtype(self, batch1, batch2, out_dtype, *, beta=1, alpha=1):
    """baddbmm.dtype(Tensor self, Tensor batch1, Tensor batch2, ScalarType out_dtype, *, Scalar beta=1, Scalar alpha=1) -> Tensor"""
    product, _ = _product(_matmul, batch1, batch2)
    return _scaled_add(self, product, beta, alpha, out_dtype)


def _inner(a, b, **kw):
    return lax.dot_general(a, b, (((0,), (0,)), ((), ())), **kw)


@aten("dot.default")
def aten_dot(self, tensor):
    """dot(Tensor self, Tensor tensor) -> Tensor"""
    out, dtype = _product(_inner, self, tensor)  # no conjugate: that is vdot
    return out.astype(dtype)


@aten("vdot.default")
def aten_vdot(self, other):
    """vdot(Tensor self, Tensor other) -> Tensor"""
    out, dtype = _product(lambda a, b, **kw: _inner(jnp.conj(a) if jnp.iscomplexobj(a) else a, b, **kw), self, other)
    return out.astype(dtype)


@aten("einsum.default")
def aten_einsum(equation, tensors, *, path=None):
    """einsum(str equation, Tensor[] tensors, *, int[]? path=None) -> Tensor"""
    dtype = result_type(*tensors)
    if opmath_type(dtype) != dtype or len(tensors) == 1:
        # 16-bit floats and pure reductions are computed in opmath (float32 accumulation)
        out = jnp.einsum(equation, *[t.astype(opmath_type(dtype)) for t in tensors])
    else:
        out, dtype = _product(lambda *ops, **kw: jnp.einsum(equation, *ops, **kw), *tensors)
    if dtype == np.bool_ or jnp.issubdtype(dtype, jnp.integer):
        # PyTorch sums away a label found in one operand only with `sum`, which widens to int64.
        inputs, _, output = equation.replace(" ", "").partition("->")
        terms = inputs.split(",")

        def summed_early(i):
            others = set(output) | {c for j, t in enumerate(terms) if j != i for c in t}
            if "..." in terms[i] and "..." not in output:
                return True
            return any(c.isalpha() and c not in others for c in terms[i])

        if "->" in equation and all(summed_early(i) for i in range(len(terms))):
            dtype = canonical(np.int64)
    return out.astype(dtype)


@aten("linalg_multi_dot.default")
def aten_linalg_multi_dot(tensors):
    """linalg_multi_dot(Tensor[] tensors) -> Tensor"""
    out, dtype = _product(lambda *ops, **kw: jnp.linalg.multi_dot(ops), *tensors)
    return out.astype(dtype)


@aten("linalg_vecdot.default")
def aten_linalg_vecdot(x, y, *, dim=-1):
    """linalg_vecdot(Tensor x, Tensor y, *, int dim=-1) -> Tensor"""
    x, y = promote(x, y)
    compute = opmath_type(x.dtype)
    return jnp.sum(jnp.conj(x.astype(compute)) * y.astype(compute), axis=dim).astype(x.dtype)


@aten("linear.default")
def aten_linear(input, weight, bias=None):
    """linear(Tensor input, Tensor weight, Tensor? bias=None) -> Tensor"""
    dtype = np.dtype(input.dtype)
    out = rows_times_weight(input, weight.astype(dtype), opmath_type(dtype))
    if bias is not None:
        out = out + bias.astype(out.dtype)
    return out.astype(dtype)


@aten("bmm.default", "matmul.default", "mm.default", "mv.default")
def aten_matmul(self, other):
    """matmul(Tensor self, Tensor other) -> Tensor"""
    out, dtype = _product(_matmul, self, other)
    return out.astype(dtype)


@aten("bmm.dtype", "mm.dtype")
def aten_mm_dtype(self, mat2, out_dtype):
    """mm.dtype(Tensor self, Tensor mat2, ScalarType out_dtype) -> Tensor"""
    out, _ = _product(_matmul, self, mat2)
    return out.astype(out_dtype)


@aten("tensordot.default")
def aten_tensordot(self, other, dims_self, dims_other):
    """tensordot(Tensor self, Tensor other, int[] dims_self, int[] dims_other) -> Tensor"""
    # A contracted pair may differ in size when one side is 1: PyTorch sums the other side over it.
    for a, b in zip(dims_self, dims_other):
        if self.shape[a] == 1 and other.shape[b] != 1:
            other = jnp.sum(other, axis=b, keepdims=True, dtype=other.dtype)
        elif other.shape[b] == 1 and self.shape[a] != 1:
            self = jnp.sum(self, axis=a, keepdims=True, dtype=self.dtype)
    out, dtype = _product(
        lambda a, b, **kw: jnp.tensordot(a, b, axes=(tuple(dims_self), tuple(dims_other)), **kw), self, other
    )
    return out.astype(dtype)


# -- other libraries' ops -------------------------------------------------------------------------


@custom("transformers", "grouped_mm_fallback.default")
def transformers_grouped_mm_fallback(input, weight, offs):
    """grouped_mm_fallback(Tensor input, Tensor weight, Tensor offs) -> Tensor"""
    return _grouped_rows(input, weight, offs, input.dtype)
