"""ATen lowerings: creation, conversion and random ops.

Factory ops receive `dtype` already filled in from the dtype torch.export
recorded, so none of them guesses PyTorch's defaults. Sizes and scalar
arguments are static Python values, so ranges (`arange`, `linspace`, ...) are
computed with NumPy in float64, as PyTorch's CPU kernels accumulate in double.

Fill values wider than the requested dtype (the int64 minimum that attention
masks use, with JAX's x64 mode off) are clipped to the dtype's range.

Random ops take a keyword-only `key` (a `jax.random` key) from the
interpreter; they reproduce PyTorch's distributions, not its random streams.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from ..registry import aten, prims
from ._promotion import canonical, cast, fill_value, float_type, opmath_type, real_type, result_type


def _full(size, value, dtype):
    return jnp.full(tuple(size), fill_value(value, dtype), dtype=dtype)


def _float_dtype(dtype):
    return np.dtype(dtype) if dtype is not None else np.dtype(np.float32)


def _uniform(key, shape, dtype, low=0.0, high=1.0):
    """Uniform draws in [low, high); a complex dtype draws its two parts so, as PyTorch does."""
    if jnp.issubdtype(dtype, jnp.complexfloating):
        parts = _uniform(key, (*shape, 2), real_type(dtype), low, high)
        return jax.lax.complex(parts[..., 0], parts[..., 1]).astype(dtype)
    compute = opmath_type(dtype)
    return jax.random.uniform(key, tuple(shape), compute, low, high).astype(dtype)


def _normal(key, shape, dtype):
    return jax.random.normal(key, tuple(shape), opmath_type(dtype)).astype(dtype)


def _constant(values: np.ndarray, dtype) -> jax.Array:
    """A NumPy float64/int64 result cast once to `dtype`."""
    dtype = np.dtype(dtype)
    if jnp.issubdtype(dtype, jnp.integer) and values.dtype.kind == "f":
        values = np.trunc(values)
    return jnp.asarray(values.astype(dtype))


@prims("convert_element_type.default")
def prims_convert_element_type(a, dtype):
    """convert_element_type(Tensor a, ScalarType dtype) -> Tensor"""
    return cast(a, dtype)


@aten("_local_scalar_dense.default", "item.default")
def aten__local_scalar_dense(self):
    """_local_scalar_dense(Tensor self) -> Scalar"""
    # A 0-d array rather than a Python number, so the value can flow on under jax.jit.
    return jnp.reshape(self, ())


@aten("_to_copy.default", "to.dtype_layout")
def aten__to_copy(self, *, dtype=None, non_blocking=False, copy=False):
    """_to_copy(Tensor self, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None, bool non_blocking=False, MemoryFormat? memory_format=None) -> Tensor"""
    return self if dtype is None else cast(self, dtype)


@aten("arange.default", "arange.start", "arange.start_step")
def aten_arange(start, end=None, step=1, *, dtype=None):
    """arange.start_step(Scalar start, Scalar end, Scalar step=1, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor"""
    if end is None:
        start, end = 0, start
    dtype = np.dtype(dtype)
    if any(jax.export.is_symbolic_dim(v) for v in (start, end, step)):
        # A symbolic bound (a size under jax.export): the length is symbolic too, so the range
        # is traced, not a constant. JAX takes integer bounds only here; the values are exact
        # integers, cast once (rounding as PyTorch's double-precision values would).
        return jnp.arange(start, end, step).astype(canonical(dtype))
    if dtype == np.int64:  # PyTorch sizes int64 ranges with the bounds truncated to integers
        start, end, step = int(start), int(end), int(step)
        length = max(0, -((start - end) // step))
    else:
        length = max(0, math.ceil((float(end) - float(start)) / float(step)))
    if jnp.issubdtype(dtype, jnp.integer):  # values accumulate in int64, then wrap to the dtype
        values = int(start) + int(step) * np.arange(length, dtype=np.int64)
    else:
        values = float(start) + float(step) * np.arange(length, dtype=np.float64)
    return _constant(values, dtype)


@aten("bernoulli.default", random=True)
def aten_bernoulli(self, *, generator=None, key):
    """bernoulli(Tensor self, *, Generator? generator=None) -> Tensor"""
    u = jax.random.uniform(key, self.shape, opmath_type(float_type(self.dtype)))
    return (u < self.astype(u.dtype)).astype(self.dtype)


@aten("bernoulli.p", random=True)
def aten_bernoulli_p(self, p=0.5, *, generator=None, key):
    """bernoulli.p(Tensor self, float p, *, Generator? generator=None) -> Tensor"""
    return jax.random.bernoulli(key, p, self.shape).astype(self.dtype)


@aten("bernoulli.Tensor", random=True)
def aten_bernoulli_tensor(self, p, *, generator=None, key):
    """bernoulli.Tensor(Tensor self, Tensor p, *, Generator? generator=None) -> Tensor"""
    u = jax.random.uniform(key, self.shape, np.float32)
    return (u < jnp.broadcast_to(p, self.shape).astype(np.float32)).astype(self.dtype)


@aten("cauchy.default", random=True)
def aten_cauchy(self, median=0.0, sigma=1.0, *, generator=None, key):
    """cauchy(Tensor self, float median=0., float sigma=1., *, Generator? generator=None) -> Tensor"""
    compute = opmath_type(self.dtype)
    return (median + sigma * jax.random.cauchy(key, self.shape, compute)).astype(self.dtype)


@aten("copy.default")
def aten_copy(self, src, non_blocking=False):
    """copy(Tensor self, Tensor src, bool non_blocking=False) -> Tensor"""
    return jnp.broadcast_to(src.astype(self.dtype), self.shape)


@aten("dropout.default", "feature_dropout.default", random=True)
def aten_dropout(input, p, train, *, key):
    """dropout(Tensor input, float p, bool train) -> Tensor"""
    if not train or p == 0:
        return input
    return aten_native_dropout(input, p, train, key=key)[0]


@aten("empty.memory_format")
def aten_empty(size, *, dtype=None, memory_format=None):
    """empty.memory_format(SymInt[] size, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None, MemoryFormat? memory_format=None) -> Tensor"""
    return jnp.zeros(tuple(size), _float_dtype(dtype))


@aten("empty_like.default")
def aten_empty_like(self, *, dtype=None, memory_format=None):
    """empty_like(Tensor self, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None, MemoryFormat? memory_format=None) -> Tensor"""
    return jnp.zeros(self.shape, dtype or self.dtype)


@aten("empty_permuted.default")
def aten_empty_permuted(size, physical_layout, *, dtype=None):
    """empty_permuted(SymInt[] size, int[] physical_layout, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor"""
    return jnp.zeros(tuple(size), _float_dtype(dtype))


@aten("empty_strided.default")
def aten_empty_strided(size, stride, *, dtype=None):
    """empty_strided(SymInt[] size, SymInt[] stride, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor"""
    return jnp.zeros(tuple(size), _float_dtype(dtype))


@aten("exponential.default", random=True)
def aten_exponential(self, lambd=1.0, *, generator=None, key):
    """exponential(Tensor self, float lambd=1., *, Generator? generator=None) -> Tensor"""
    compute = opmath_type(self.dtype)
    return (jax.random.exponential(key, self.shape, compute) / lambd).astype(self.dtype)


@aten("eye.default", "eye.m")
def aten_eye(n, m=None, *, dtype=None):
    """eye.m(SymInt n, SymInt m, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor"""
    return jnp.eye(n, n if m is None else m, dtype=_float_dtype(dtype))


@aten("fill.Scalar", "fill.Tensor")
def aten_fill(self, value):
    """fill.Scalar(Tensor self, Scalar value) -> Tensor"""
    return jnp.full(self.shape, fill_value(value, self.dtype), self.dtype)


@aten("full.default")
def aten_full(size, fill_value, *, dtype=None):
    """full(SymInt[] size, Scalar fill_value, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor"""
    return _full(size, fill_value, dtype if dtype is not None else result_type(fill_value))


@aten("full_like.default")
def aten_full_like(self, fill_value, *, dtype=None, memory_format=None):
    """full_like(Tensor self, Scalar fill_value, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None, MemoryFormat? memory_format=None) -> Tensor"""
    return _full(self.shape, fill_value, dtype or self.dtype)


@aten("geometric.default", random=True)
def aten_geometric(self, p, *, generator=None, key):
    """geometric(Tensor self, float p, *, Generator? generator=None) -> Tensor"""
    return jax.random.geometric(key, p, self.shape).astype(self.dtype)


@aten("lift_fresh_copy.default")
def aten_lift_fresh_copy(self):
    """lift_fresh_copy(Tensor self) -> Tensor"""
    return self


@aten("linspace.default")
def aten_linspace(start, end, steps, *, dtype=None):
    """linspace(Scalar start, Scalar end, int steps, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor"""
    return jnp.asarray(_linspace(np, start, end, steps, _float_dtype(dtype)))


@aten("linspace.Tensor_Tensor", "linspace.Tensor_Scalar", "linspace.Scalar_Tensor")
def aten_linspace_tensor(start, end, steps, *, dtype=None):
    """linspace.Tensor_Tensor(Tensor start, Tensor end, int steps, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor"""
    return _linspace(jnp, start, end, steps, _float_dtype(dtype))


def _linspace(xp, start, end, steps: int, dtype):
    """PyTorch's CPU linspace kernel, over NumPy (static ends) or jax.numpy (tensor ends).

    The ends are cast to the output dtype first (4.3 becomes 4 for integers). Integer outputs
    step in float64 and truncate; floating outputs compute every step in their own dtype. The
    first half of the points steps up from start, the second half down from end.
    """
    dtype = np.dtype(dtype)
    compute = _wide_float(xp) if jnp.issubdtype(dtype, jnp.integer) else dtype
    start = xp.asarray(start).astype(dtype).astype(compute)
    end = xp.asarray(end).astype(dtype).astype(compute)
    if steps <= 1:
        return xp.full((steps,), start, dtype)
    step = _quotient(xp, end - start, xp.asarray(steps - 1, compute))
    i = np.arange(steps)
    up = start + step * i.astype(compute)
    down = end - step * (steps - 1 - i).astype(compute)
    return xp.where(i < steps // 2, up, down).astype(dtype)


def _quotient(xp, a, b):
    """a / b, correctly rounded: XLA would multiply by a rounded reciprocal of a constant b."""
    if xp is jnp:
        a, b = jax.lax.optimization_barrier((a, b))
    return a / b


def _wide_float(xp):
    """float64 for static values; float64 where JAX has it for traced ones."""
    return np.dtype(np.float64) if xp is np else np.dtype(canonical(np.float64))


@aten("log_normal.default", random=True)
def aten_log_normal(self, mean=1.0, std=2.0, *, generator=None, key):
    """log_normal(Tensor self, float mean=1., float std=2., *, Generator? generator=None) -> Tensor"""
    compute = opmath_type(self.dtype)
    return jnp.exp(mean + std * jax.random.normal(key, self.shape, compute)).astype(self.dtype)


@aten("logspace.default")
def aten_logspace(start, end, steps, base=10.0, *, dtype=None):
    """logspace(Scalar start, Scalar end, int steps, float base=10., *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor"""
    with np.errstate(over="ignore", invalid="ignore"):
        return jnp.asarray(_logspace(np, start, end, steps, base, _float_dtype(dtype)))


@aten("logspace.Tensor_Tensor", "logspace.Tensor_Scalar", "logspace.Scalar_Tensor")
def aten_logspace_tensor(start, end, steps, base=10.0, *, dtype=None):
    """logspace.Tensor_Tensor(Tensor start, Tensor end, int steps, float base=10., *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor"""
    return _logspace(jnp, start, end, steps, base, _float_dtype(dtype))


def _logspace(xp, start, end, steps: int, base: float, dtype):
    """PyTorch's CPU logspace kernel, over NumPy (static ends) or jax.numpy (tensor ends).

    The ends are cast to the output dtype, the exponents step in float64 (the first half up
    from start, the second down from end) and base ** exponent is computed in float64, then
    cast (truncated for integers, whose base PyTorch first rounds to float32).
    """
    dtype = np.dtype(dtype)
    wide = _wide_float(xp)
    if steps == 1:  # PyTorch fills base ** start, start uncast
        return xp.full((1,), xp.power(xp.asarray(base, wide), xp.asarray(start).astype(wide))).astype(dtype)
    integral = jnp.issubdtype(dtype, jnp.integer)
    if integral:
        base = float(np.float32(base))
    start, end = xp.asarray(start).astype(dtype), xp.asarray(end).astype(dtype)
    span = end.astype(wide) - start.astype(wide) if integral else (end - start).astype(wide)
    step = _quotient(xp, span, xp.asarray(max(steps - 1, 1), wide))
    i = np.arange(steps)
    exponents = xp.where(i < steps // 2, start.astype(wide) + step * i.astype(wide),
                         end.astype(wide) - step * (steps - 1 - i).astype(wide))
    return xp.power(xp.asarray(base, wide), exponents).astype(dtype)


@aten("multinomial.default", random=True)
def aten_multinomial(self, num_samples, replacement=False, *, generator=None, key):
    """multinomial(Tensor self, SymInt num_samples, bool replacement=False, *, Generator? generator=None) -> Tensor"""
    probs = self.astype(np.float32)
    logits = jnp.log(probs)
    shape = probs.shape[:-1]
    if replacement:
        out = jax.random.categorical(key, logits, axis=-1, shape=(num_samples, *shape))
        out = jnp.moveaxis(out, 0, -1)
    else:  # Gumbel top-k: sampling without replacement
        gumbel = jax.random.gumbel(key, probs.shape, np.float32)
        out = jax.lax.top_k(jnp.where(probs > 0, logits + gumbel, -jnp.inf), num_samples)[1]
    return out.astype(canonical(np.int64))


@aten("native_dropout.default", random=True)
def aten_native_dropout(input, p, train, *, key):
    """native_dropout(Tensor input, float p, bool? train) -> (Tensor, Tensor)"""
    if train is not None and not train:
        return input, jnp.ones(input.shape, np.bool_)
    keep = jax.random.bernoulli(key, 1.0 - p, input.shape)
    scale = 0.0 if p == 1 else 1.0 / (1.0 - p)
    compute = opmath_type(input.dtype)
    out = jnp.where(keep, input.astype(compute) * np.asarray(scale, compute), np.asarray(0, compute))
    return out.astype(input.dtype), keep


@aten("new_empty.default")
def aten_new_empty(self, size, *, dtype=None):
    """new_empty(Tensor self, SymInt[] size, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor"""
    return jnp.zeros(tuple(size), dtype or self.dtype)


@aten("new_empty_strided.default")
def aten_new_empty_strided(self, size, stride, *, dtype=None):
    """new_empty_strided(Tensor self, SymInt[] size, SymInt[] stride, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor"""
    return jnp.zeros(tuple(size), dtype or self.dtype)


@aten("new_full.default")
def aten_new_full(self, size, fill_value, *, dtype=None):
    """new_full(Tensor self, SymInt[] size, Scalar fill_value, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor"""
    return _full(size, fill_value, dtype or self.dtype)


@aten("new_ones.default")
def aten_new_ones(self, size, *, dtype=None):
    """new_ones(Tensor self, SymInt[] size, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor"""
    return jnp.ones(tuple(size), dtype or self.dtype)


@aten("new_zeros.default")
def aten_new_zeros(self, size, *, dtype=None):
    """new_zeros(Tensor self, SymInt[] size, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor"""
    return jnp.zeros(tuple(size), dtype or self.dtype)


@aten("normal.Tensor_float", "normal.float_Tensor", "normal.Tensor_Tensor", random=True)
def aten_normal(mean, std=1.0, *, generator=None, key):
    """normal.Tensor_Tensor(Tensor mean, Tensor std, *, Generator? generator=None) -> Tensor"""
    dtype = result_type(*(x for x in (mean, std) if not isinstance(x, (int, float))))
    shape = jnp.broadcast_shapes(jnp.shape(mean), jnp.shape(std))
    compute = opmath_type(dtype)
    z = jax.random.normal(key, shape, compute)
    return (jnp.asarray(mean, compute) + jnp.asarray(std, compute) * z).astype(dtype)


@aten("normal.float_float", random=True)
def aten_normal_float_float(mean, std, size, *, generator=None, dtype=None, key):
    """normal.float_float(float mean, float std, SymInt[] size, *, Generator? generator=None, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor"""
    dtype = _float_dtype(dtype)
    compute = opmath_type(dtype)
    return (mean + std * jax.random.normal(key, tuple(size), compute)).astype(dtype)


@aten("normal_functional.default", random=True)
def aten_normal_functional(self, mean=0.0, std=1.0, *, generator=None, key):
    """normal_functional(Tensor self, float mean=0., float std=1., *, Generator? generator=None) -> Tensor"""
    compute = opmath_type(self.dtype)
    return (mean + std * jax.random.normal(key, self.shape, compute)).astype(self.dtype)


@aten("ones.default")
def aten_ones(size, *, dtype=None):
    """ones(SymInt[] size, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor"""
    return jnp.ones(tuple(size), _float_dtype(dtype))


@aten("ones_like.default")
def aten_ones_like(self, *, dtype=None, memory_format=None):
    """ones_like(Tensor self, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None, MemoryFormat? memory_format=None) -> Tensor"""
    return jnp.ones(self.shape, dtype or self.dtype)


@aten("rand.default", random=True)
def aten_rand(size, *, generator=None, dtype=None, key):
    """rand(SymInt[] size, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor"""
    return _uniform(key, size, _float_dtype(dtype))


@aten("rand_like.default", random=True)
def aten_rand_like(self, *, dtype=None, memory_format=None, key):
    """rand_like(Tensor self, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None, MemoryFormat? memory_format=None) -> Tensor"""
    return _uniform(key, self.shape, dtype or self.dtype)


@aten("randint.default", "randint.low", random=True)
def aten_randint(low, high, size=None, *, generator=None, dtype=None, key):
    """randint.low(SymInt low, SymInt high, SymInt[] size, *, ScalarType? dtype=4, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor"""
    if size is None:
        low, high, size = 0, low, high
    return _randint(key, tuple(size), low, high, dtype or canonical(np.int64))


def _randint(key, shape, low, high, dtype):
    dtype = np.dtype(dtype)
    draw = canonical(np.int64)
    out = jax.random.randint(key, shape, low, high, draw)
    return out.astype(dtype)


@aten("randint_like.default", "randint_like.low_dtype", random=True)
def aten_randint_like(self, low, high=None, *, dtype=None, memory_format=None, key):
    """randint_like.low_dtype(Tensor self, SymInt low, SymInt high, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None, MemoryFormat? memory_format=None) -> Tensor"""
    if high is None:
        low, high = 0, low
    return _randint(key, self.shape, low, high, dtype or self.dtype)


@aten("randn.default", random=True)
def aten_randn(size, *, generator=None, dtype=None, key):
    """randn(SymInt[] size, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor"""
    return _normal(key, size, _float_dtype(dtype))


@aten("randn_like.default", random=True)
def aten_randn_like(self, *, dtype=None, memory_format=None, key):
    """randn_like(Tensor self, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None, MemoryFormat? memory_format=None) -> Tensor"""
    return _normal(key, self.shape, dtype or self.dtype)


@aten("randperm.default", random=True)
def aten_randperm(n, *, generator=None, dtype=None, key):
    """randperm(SymInt n, *, ScalarType? dtype=4, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor"""
    return jax.random.permutation(key, n).astype(dtype or canonical(np.int64))


@aten("resize.default", "resize_.default")
def aten_resize(self, size, memory_format=None):
    """resize(Tensor self, SymInt[] size, *, MemoryFormat? memory_format=None) -> Tensor"""
    # Resizing keeps the flat (contiguous) prefix of the data; elements beyond the old size
    # are uninitialised in PyTorch and zero here.
    size = tuple(size)
    flat = self.reshape(-1)
    n = math.prod(size)
    if n <= flat.size:
        flat = flat[:n]
    else:
        flat = jnp.concatenate([flat, jnp.zeros((n - flat.size,), self.dtype)])
    return flat.reshape(size)


@aten("resize_as.default")
def aten_resize_as(self, the_template):
    """resize_as(Tensor self, Tensor the_template, *, MemoryFormat? memory_format=None) -> Tensor"""
    return aten_resize(self, the_template.shape)


@aten("scalar_tensor.default")
def aten_scalar_tensor(s, *, dtype=None):
    """scalar_tensor(Scalar s, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor"""
    return jnp.asarray(fill_value(s, _float_dtype(dtype)), _float_dtype(dtype))


@aten("to.device")
def aten_to_device(self, device, dtype, non_blocking=False, copy=False, memory_format=None):
    """to.device(Tensor(a) self, Device device, ScalarType dtype, bool non_blocking=False, bool copy=False, MemoryFormat? memory_format=None) -> Tensor(a)"""
    return self.astype(dtype)


@aten("to.dtype")
def aten_to_dtype(self, dtype, non_blocking=False, copy=False, memory_format=None):
    """to.dtype(Tensor(a) self, ScalarType dtype, bool non_blocking=False, bool copy=False, MemoryFormat? memory_format=None) -> Tensor(a)"""
    return self.astype(dtype)


@aten("tril_indices.default")
def aten_tril_indices(row, col, offset=0, *, dtype=None):
    """tril_indices(int row, int col, int offset=0, *, ScalarType? dtype=4, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor"""
    rows, cols = np.tril_indices(row, offset, col)
    return jnp.asarray(np.stack([rows, cols]).reshape(2, -1).astype(dtype or canonical(np.int64)))


@aten("triu_indices.default")
def aten_triu_indices(row, col, offset=0, *, dtype=None):
    """triu_indices(int row, int col, int offset=0, *, ScalarType? dtype=4, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor"""
    rows, cols = np.triu_indices(row, offset, col)
    return jnp.asarray(np.stack([rows, cols]).reshape(2, -1).astype(dtype or canonical(np.int64)))


@aten("type_as.default")
def aten_type_as(self, other):
    """type_as(Tensor self, Tensor other) -> Tensor"""
    return self.astype(other.dtype)


@aten("uniform.default", random=True)
def aten_uniform(self, *bounds, generator=None, key, **kwargs):
    """uniform(Tensor self, float from=0., float to=1., *, Generator? generator=None) -> Tensor"""
    # "from" is a Python keyword, so the bounds arrive positionally or through **kwargs.
    low = bounds[0] if len(bounds) > 0 else kwargs.get("from", 0.0)
    high = bounds[1] if len(bounds) > 1 else kwargs.get("to", 1.0)
    return _uniform(key, self.shape, self.dtype, low, high)


@aten("zero.default")
def aten_zero(self):
    """zero(Tensor self) -> Tensor"""
    return jnp.zeros_like(self)


@aten("zeros.default")
def aten_zeros(size, *, dtype=None):
    """zeros(SymInt[] size, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor"""
    return jnp.zeros(tuple(size), _float_dtype(dtype))


@aten("zeros_like.default")
def aten_zeros_like(self, *, dtype=None, memory_format=None):
    """zeros_like(Tensor self, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None, MemoryFormat? memory_format=None) -> Tensor"""
    return jnp.zeros(self.shape, dtype or self.dtype)
