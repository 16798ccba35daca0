"""PyTorch's type promotion, said in JAX.

PyTorch promotes by category (bool < integer < float < complex) and treats
operands in three ranks: tensors with dimensions, 0-d tensors, and Python
scalars ("wrapped numbers"). A lower rank only decides the result when it
brings a higher category. These helpers reproduce `torch.result_type` so the
lowerings return exactly the dtype PyTorch would (see `torch/_prims_common`).

Python floats take PyTorch's default dtype, float32, and Python ints int64,
which JAX narrows to int32 unless x64 mode is on.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

_BOOL, _INT, _FLOAT, _COMPLEX = 0, 1, 2, 3


def category(dtype) -> int:
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return _BOOL
    if jnp.issubdtype(dtype, jnp.integer):
        return _INT
    if jnp.issubdtype(dtype, jnp.complexfloating):
        return _COMPLEX
    return _FLOAT


def canonical(dtype) -> np.dtype:
    """`dtype` as JAX stores it now (int64 -> int32 and float64 -> float32 without x64)."""
    return np.dtype(jax.dtypes.canonicalize_dtype(dtype))


def scalar_dtype(value) -> np.dtype:
    """The dtype PyTorch gives a Python scalar used as an operand."""
    if isinstance(value, (bool, np.bool_)):
        return np.dtype(np.bool_)
    if isinstance(value, (int, np.integer)) or jax.export.is_symbolic_dim(value):
        return canonical(np.int64)
    if isinstance(value, (float, np.floating)):
        return np.dtype(np.float32)
    if isinstance(value, (complex, np.complexfloating)):
        return np.dtype(np.complex64)
    raise TypeError(f"not a scalar: {value!r}")


def is_scalar(value) -> bool:
    """A Python or NumPy scalar, or a symbolic size (an int once shapes are known)."""
    return isinstance(value, (bool, int, float, complex, np.generic)) or jax.export.is_symbolic_dim(value)


def is_one(value) -> bool:
    """Whether `value` is a scalar equal to 1: a scaling step can be skipped. A traced scalar
    (an eager call's float taken as an argument) is not known to be."""
    return is_scalar(value) and value == 1


def _promote(a, b):
    if a is None:
        return b
    if b is None:
        return a
    # An explicit promotion: allowed even under jax_numpy_dtype_promotion="strict".
    with jax.numpy_dtype_promotion("standard"):
        return np.dtype(jnp.promote_types(a, b))


def _to_complex(dtype) -> np.dtype:
    return np.dtype(np.complex128 if np.dtype(dtype) == np.float64 else np.complex64)


def _combine(higher, lower):
    # c10's combine_categories: a lower rank counts only if it brings a higher category.
    if higher is None:
        return lower
    if lower is None:
        return higher
    if category(higher) == _COMPLEX:
        return higher
    if category(lower) == _COMPLEX:
        return _to_complex(higher) if category(higher) == _FLOAT else lower
    if category(higher) == _FLOAT:
        return higher
    if higher == np.bool_ or category(lower) == _FLOAT:
        return _promote(higher, lower)
    return higher


def result_type(*operands) -> np.dtype:
    """`torch.result_type` over arrays and Python scalars (None operands are ignored)."""
    dimensioned = zero_dim = wrapped = None
    for x in operands:
        if x is None:
            continue
        if is_scalar(x):
            wrapped = _promote(wrapped, scalar_dtype(x))
        elif jnp.ndim(x) == 0:
            zero_dim = _promote(zero_dim, x.dtype)
        else:
            dimensioned = _promote(dimensioned, x.dtype)
    return canonical(_combine(dimensioned, _combine(zero_dim, wrapped)))


def as_array(x, dtype) -> jax.Array:
    """`x` (array or Python scalar) as an array of `dtype`."""
    if isinstance(x, jax.Array):
        return x if x.dtype == dtype else x.astype(dtype)
    if isinstance(x, int) and not isinstance(x, bool) and jnp.issubdtype(dtype, jnp.integer):
        # PyTorch casts the scalar, wrapping (uint8 == -1 compares with 255).
        return jnp.asarray(np.asarray(x).astype(dtype))
    return jnp.asarray(x, dtype=dtype)


def promote(*operands):
    """Operands cast to their common PyTorch result type, scalars made arrays."""
    dtype = result_type(*operands)
    return tuple(as_array(x, dtype) for x in operands)


def float_type(dtype) -> np.dtype:
    """The dtype of an int-to-float op: integers and bool become float32."""
    return np.dtype(dtype) if category(dtype) >= _FLOAT else np.dtype(np.float32)


def real_type(dtype) -> np.dtype:
    """The real dtype of a complex dtype's parts (complex64 -> float32); other dtypes as they are."""
    dtype = np.dtype(dtype)
    return np.dtype(jnp.finfo(dtype).dtype) if category(dtype) == _COMPLEX else dtype


def cast(x, dtype) -> jax.Array:
    """`x` as `dtype`, as PyTorch casts: a complex value made real keeps its real part (JAX will
    refuse that cast, as PyTorch warns of it)."""
    if jnp.iscomplexobj(x) and category(dtype) != _COMPLEX:
        x = jnp.real(x)
    return x.astype(dtype)


def norm_dtypes(x_dtype, dtype=None) -> tuple[np.dtype, np.dtype]:
    """(the dtype a norm computes in, its output dtype) for an input of `x_dtype` and its `dtype=`
    argument. A complex input's norm is real, and torch.export records that real dtype, which the
    frontend passes as `dtype=`: the input is then computed as the complex dtype of that
    precision, never cast to the real one (which would drop its imaginary parts)."""
    if category(x_dtype) == _COMPLEX:
        out = real_type(dtype if dtype is not None else x_dtype)
        return _to_complex(out), out
    out = np.dtype(dtype) if dtype is not None else float_type(x_dtype)
    return opmath_type(out), out


def opmath_type(dtype) -> np.dtype:
    """The dtype PyTorch computes in: float16/bfloat16 widen to float32."""
    dtype = np.dtype(dtype)
    if dtype in (np.dtype(jnp.float16), np.dtype(jnp.bfloat16)):
        return np.dtype(np.float32)
    return dtype


def rounded_as(x, dtype):
    """`x`, computed in `dtype`'s opmath type, rounded to `dtype`'s precision and kept in the
    opmath type: one step of a PyTorch kernel that does its arithmetic in a half type. A
    `reduce_precision`, because XLA may drop a convert pair (its excess-precision rule) and keep
    a float16 chain in float32."""
    if opmath_type(dtype) == np.dtype(dtype):
        return x
    info = jnp.finfo(dtype)
    return jax.lax.reduce_precision(x, exponent_bits=info.nexp, mantissa_bits=info.nmant)


def is_floating(x) -> bool:
    return category(x.dtype) == _FLOAT


def is_integral(x) -> bool:
    return category(x.dtype) in (_BOOL, _INT)


def canonical_dim(dim: int, ndim: int) -> int:
    """A possibly negative dim as a non-negative axis; 0-d tensors accept 0 and -1."""
    return dim % max(ndim, 1)


def fill_value(value, dtype):
    """A fill value (Python scalar or 0-d array) as `dtype`, converted as PyTorch converts it.

    Integers below 32 bits wrap (PyTorch fills uint8 with -1 as 255). Models
    fill int64 tensors with values such as `torch.iinfo(torch.int64).min`
    (attention masks); with JAX's x64 mode off the dtype is int32, so values
    beyond 32-bit dtypes saturate at the dtype's limit rather than wrapping.
    """
    dtype = np.dtype(dtype)
    if not isinstance(value, (bool, int, float, np.generic)):
        return jnp.asarray(value).astype(dtype)  # a tensor or a traced scalar
    if dtype == np.bool_:
        return np.bool_(value != 0)
    if jnp.issubdtype(dtype, jnp.integer):
        info = np.iinfo(dtype)
        if isinstance(value, (float, np.floating)):
            if value != value:  # NaN
                return dtype.type(0)
            value = info.max if value >= info.max else info.min if value <= info.min else int(value)
        if dtype.itemsize < 4:
            return np.asarray(int(value), np.int64).astype(dtype)
        return dtype.type(min(max(int(value), int(info.min)), int(info.max)))
    return np.asarray(value).astype(dtype)


@jax.jit  # one fused kernel op by op too, not eight passes over the operands
def multiply_add(a, b, c):
    """a * b + c of real floats as PyTorch's CPU kernels give it, one fused multiply-add (written
    out in their vectorized loops, contracted by the compiler in the scalar ones), wherever that
    shows in special values.

    A product past the largest float whose sum with c is finite stays finite; a finite product
    added to an infinite c gives c, not NaN; a nonzero product that underflows keeps its sign
    against a zero c (PyTorch's subnormal result is a zero of that sign once flushed). Elsewhere
    the product is rounded before the sum, within an ulp of the fused result: exact emulation
    (split products) would cost several times the multiply-add.
    """
    p = a * b
    finite = jnp.isfinite(a) & jnp.isfinite(b)
    # |a * b| < 2 * max wherever a * b + c is finite (|c| <= max): halved, nothing overflows
    half, two = jnp.asarray(0.5, p.dtype), jnp.asarray(2, p.dtype)
    halved = ((a * half) * b + c * half) * two
    out = jnp.where(finite & jnp.isinf(p), halved, p + c)
    out = jnp.where(finite & jnp.isinf(c), c, out)
    return jnp.where((c == 0) & (a != 0) & (b != 0), p, out)


def is_real_floating(dtype) -> bool:
    return category(dtype) == _FLOAT
