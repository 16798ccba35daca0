"""ATen lowerings: elementwise arithmetic (add, sub, mul, div, pow, fmod, remainder, ...) and the
other pointwise ops of two or three operands (atan2, hypot, clamp, lerp, where, logaddexp, xlogy, ...).

Type promotion follows PyTorch (`_promotion.result_type`); float16/bfloat16 math
runs in float32 and rounds once at the end, as PyTorch's CPU kernels do. Python
scalar operands take part in that float32 math unrounded, as in PyTorch.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ..registry import aten, prims
from ._promotion import (
    as_array,
    canonical,
    category,
    float_type,
    is_one,
    is_real_floating,
    multiply_add,
    opmath_type,
    promote,
    result_type,
)


def _scalar_as(value, dtype):
    """A Python scalar in `dtype` as PyTorch casts it: out-of-range integers wrap (-3 in uint8 is 253)."""
    if isinstance(value, jax.Array):  # traced: a float, cast as jnp does
        return value.astype(dtype)
    return jnp.asarray(np.asarray(value).astype(dtype))


def _compute(fn, dtype, *operands):
    """`fn` over the operands cast to `dtype`'s opmath type; the result cast to `dtype`."""
    compute = opmath_type(dtype)
    return fn(*(as_array(x, compute) for x in operands)).astype(dtype)


def _float_binary(fn, self, other):
    """A binary op whose integer operands promote to float32, computed in opmath precision."""
    return _compute(fn, float_type(result_type(self, other)), self, other)


def _is_int(dtype) -> bool:
    return category(dtype) <= 1


def _exact_quotient(a, b):
    """a / b rounded once, as IEEE division. XLA rewrites a division by a broadcast operand into
    a multiplication by its reciprocal (two roundings: 5.125 / 5.125 came out 0.99999994), which
    a rounding division cannot afford; the barrier hides the broadcast from that rewrite."""
    a, b = jnp.broadcast_arrays(a, b)
    a, b = lax.optimization_barrier((a, b))
    return a / b


def _quotient(a, b):
    """a / b for true division. XLA turns a division by a broadcast operand into a multiplication
    by its reciprocal, and the reciprocal of a divisor past 2**(maxexp - 2) is subnormal, flushed
    to zero on XLA:CPU (inf / max came out NaN, max / max 0); such divisors are scaled down by 2**32
    first, exactly, and the quotient scaled back. The reciprocal's extra rounding (within an ulp)
    stays: `_exact_quotient`'s barrier would cost the division its fusion and copy the broadcast.
    A divisor of the result's own shape is not a broadcast here and divides as it is (one that
    an earlier op broadcast, under jax.jit, is not caught)."""
    if not is_real_floating(jnp.result_type(a, b)) or jnp.shape(b) == jnp.broadcast_shapes(jnp.shape(a), jnp.shape(b)):
        return a / b
    return _scaled_quotient(a, b)


@jax.jit  # one fused kernel op by op too
def _scaled_quotient(a, b):
    info = jnp.finfo(jnp.result_type(a, b))
    big = jnp.abs(b) >= 2.0 ** (info.maxexp - 2)
    scale = jnp.where(big, jnp.asarray(2.0**-32, info.dtype), jnp.asarray(1, info.dtype))
    return a / (b * scale) * scale  # the quotient used once: XLA would repeat it in each user


def _subnormal_quotient(a, b):
    """Whether a / b of real floats, which XLA:CPU flushed to zero, is a nonzero subnormal (above
    half the smallest) in PyTorch. Compared as products, with a scaled up by 2**64: where the
    quotient is that small |b| > 1, so nothing underflows or overflows."""
    info = jnp.finfo(a.dtype)
    threshold = jnp.asarray(float(info.smallest_subnormal) * 2.0**63, a.dtype)
    return jnp.abs(a) * jnp.asarray(2.0**64, a.dtype) > threshold * jnp.abs(b)


def _div_trunc(a, b):
    if _is_int(a.dtype):
        return lax.div(*jnp.broadcast_arrays(a, b))
    return jnp.trunc(_exact_quotient(a, b))


def _div_floor(a, b):
    if _is_int(a.dtype):
        return jnp.floor_divide(a, b)
    a, b = lax.optimization_barrier(tuple(jnp.broadcast_arrays(a, b)))
    # PyTorch's div_floor_floating (Python's float floor division)
    mod = jnp.fmod(a, b)
    div = (a - mod) / b
    div = jnp.where((mod != 0) & ((b < 0) != (mod < 0)), div - 1, div)
    floordiv = jnp.floor(div)
    floordiv = jnp.where(div - floordiv > 0.5, floordiv + 1, floordiv)
    floordiv = jnp.where(div == 0, jnp.copysign(jnp.zeros_like(div), a / b), floordiv)
    return jnp.where(b == 0, a / b, floordiv)


def _int_pow(base, exponent):
    """Integer power as PyTorch's powi: negative exponents give 0, except for bases 1 and -1."""
    if base.dtype == jnp.bool_:
        return _int_pow(base.astype(np.uint8), exponent.astype(np.uint8)).astype(jnp.bool_)
    if jnp.issubdtype(base.dtype, jnp.unsignedinteger):
        return jnp.power(base, exponent)
    negative = exponent < 0
    out = jnp.power(base, jnp.where(negative, jnp.zeros_like(exponent), exponent))
    one = jnp.ones_like(out)
    odd = (exponent % 2) != 0
    inverse = jnp.where(base == 1, one, jnp.where(base == -1, jnp.where(odd, -one, one), jnp.zeros_like(out)))
    return jnp.where(negative, inverse, out)


def _xlog(log, self, other):
    def fn(x, y):
        out = jnp.where(x == 0, jnp.zeros_like(x), x * log(y))
        return jnp.where(jnp.isnan(y), y, out)

    return _float_binary(fn, self, other)


def _complex_log_add_exp(a, b):
    """PyTorch's complex log-add-exp: ordered by real part, NaN and infinities handled first."""
    swap = jnp.real(a) > jnp.real(b)
    low, high = jnp.where(swap, b, a), jnp.where(swap, a, b)
    nan = jnp.isnan(jnp.real(low)) | jnp.isnan(jnp.imag(low)) | jnp.isnan(jnp.real(high)) | jnp.isnan(jnp.imag(high))
    same_inf = ~jnp.isfinite(jnp.real(low)) & (jnp.real(low) == jnp.real(high))
    # Each branch sees harmless operands where it is not taken, so that no inf - inf or overflowing
    # exp reaches the derivative (a where's unused branch still multiplies its NaNs by zero).
    zero = jnp.zeros((), low.dtype)
    general = jnp.log1p(jnp.exp(jnp.where(same_inf, zero, low - high))) + high
    low_inf, high_inf = jnp.where(same_inf, low, zero), jnp.where(same_inf, high, zero)
    infinite = jnp.where(jnp.real(low_inf) < 0, low_inf, jnp.log(jnp.exp(low_inf) + jnp.exp(high_inf)))
    out = jnp.where(same_inf, infinite, general)
    return jnp.where(nan, jnp.full_like(out, complex(np.nan, np.nan)), out)


@aten("add.Tensor", "add.Scalar")
def aten_add(self, other, alpha=1):
    """add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor"""
    dtype = result_type(self, other)
    if dtype == np.bool_:
        self, other = promote(self, other)
        return self | other if alpha else self
    if is_one(alpha):
        return _compute(lambda a, b: a + b, dtype, self, other)
    if is_real_floating(dtype):  # PyTorch fuses self + alpha * other into one multiply-add
        return _compute(lambda a, b: multiply_add(_scalar_as(alpha, a.dtype), b, a), dtype, self, other)
    return _compute(lambda a, b: a + _scalar_as(alpha, a.dtype) * b, dtype, self, other)


@aten("addcdiv.default")
def aten_addcdiv(self, tensor1, tensor2, *, value=1):
    """addcdiv(Tensor self, Tensor tensor1, Tensor tensor2, *, Scalar value=1) -> Tensor"""
    dtype = result_type(self, tensor1, tensor2)

    def fn(s, a, b):
        scaled = a if is_one(value) else jnp.asarray(value, s.dtype) * a
        return _add_quotient(s, scaled, b) if is_real_floating(s.dtype) else s + scaled / b

    return _compute(fn, dtype, self, tensor1, tensor2)


@jax.jit  # one fused kernel op by op too
def _add_quotient(s, a, b):
    """s + a / b of real floats as PyTorch's kernel gives it (see `_quotient`)."""
    out = s + _quotient(a, b)
    # a quotient that XLA:CPU flushes to zero but PyTorch keeps as a subnormal keeps its sign
    # against a zero s (PyTorch's result, flushed by the reader, is a zero of that sign). The
    # quotient is used once: XLA would repeat the division in each of its users.
    zero = jnp.copysign(jnp.zeros_like(a), a) * jnp.copysign(jnp.ones_like(b), b)
    return jnp.where((out == 0) & (s == 0) & _subnormal_quotient(a, b), zero, out)


@aten("addcmul.default")
def aten_addcmul(self, tensor1, tensor2, *, value=1):
    """addcmul(Tensor self, Tensor tensor1, Tensor tensor2, *, Scalar value=1) -> Tensor"""
    dtype = result_type(self, tensor1, tensor2)
    if dtype == np.bool_:
        self, tensor1, tensor2 = promote(self, tensor1, tensor2)
        return self | (tensor1 & tensor2) if value else self

    def fn(s, a, b):
        scaled = a if is_one(value) else jnp.asarray(value, s.dtype) * a
        if is_real_floating(s.dtype):  # PyTorch: value * a first, then one multiply-add
            return multiply_add(scaled, b, s)
        return s + scaled * b

    return _compute(fn, dtype, self, tensor1, tensor2)


@prims("fma.default")
def prims_fma(a, b, c):
    """fma(Tensor a, Tensor b, Tensor c) -> Tensor

    Inductor's fused multiply-add, which its decompositions record (a compiled `torch.optim`
    step's `addcmul_`): one multiply-add, as the kernel Inductor writes for it."""
    dtype = result_type(a, b, c)
    if is_real_floating(dtype):
        return _compute(multiply_add, dtype, a, b, c)
    return _compute(lambda x, y, z: x * y + z, dtype, a, b, c)


@aten("atan2.default")
def aten_atan2(self, other):
    """atan2(Tensor self, Tensor other) -> Tensor"""
    return _float_binary(jnp.arctan2, self, other)


@aten("atan2.out")
def aten_atan2_out(self, other, *, out):
    """atan2.out(Tensor self, Tensor other, *, Tensor(a!) out) -> Tensor(a!)"""
    # A pure function cannot write into `out`: it returns what PyTorch would have written there.
    return aten_atan2(self, other).astype(out.dtype)


@aten("clamp.default", "clamp.Tensor", "clip.default", "clip.Tensor")
def aten_clamp(self, min=None, max=None):
    """clamp(Tensor self, Scalar? min=None, Scalar? max=None) -> Tensor"""
    dtype = result_type(self, min, max)
    out = self.astype(dtype)
    if min is not None:
        out = _clamp_below(out, as_array(min, dtype))
    if max is not None:
        out = _clamp_above(out, as_array(max, dtype))
    return out


def _clamp_above(x, high):
    """min(x, high) as PyTorch's clamp computes it: `x` where they tie (clamp(0.0, max=-0.0) is
    0.0; PyTorch's scalar-bound kernels do so in every CPU loop, where IEEE minimum gives -0.0),
    NaN from either."""
    above = x > high
    if jnp.issubdtype(x.dtype, jnp.inexact):
        above = above | jnp.isnan(high)
    return jnp.where(above, high, x)


def _clamp_below(x, low):
    """max(x, low) as PyTorch's clamp computes it: `x` where they tie (clamp(-0.0, min=0.0) is
    -0.0), NaN from either."""
    below = x < low
    if jnp.issubdtype(x.dtype, jnp.inexact):
        below = below | jnp.isnan(low)
    return jnp.where(below, low, x)


@aten("clamp_max.default", "clamp_max.Tensor")
def aten_clamp_max(self, max):
    """clamp_max(Tensor self, Scalar max) -> Tensor"""
    self, max = promote(self, max)
    return _clamp_above(self, max)


@aten("clamp_min.default", "clamp_min.Tensor")
def aten_clamp_min(self, min):
    """clamp_min(Tensor self, Scalar min) -> Tensor"""
    self, min = promote(self, min)
    return _clamp_below(self, min)


@aten("complex.default")
def aten_complex(real, imag):
    """complex(Tensor real, Tensor imag) -> Tensor"""
    real, imag = jnp.broadcast_arrays(real, imag)
    return lax.complex(real, imag)


@aten("copysign.Tensor", "copysign.Scalar")
def aten_copysign(self, other):
    """copysign.Tensor(Tensor self, Tensor other) -> Tensor"""
    return _float_binary(jnp.copysign, self, other)


@aten("div.Tensor", "div.Scalar", "true_divide.Tensor", "true_divide.Scalar")
def aten_div(self, other):
    """div.Tensor(Tensor self, Tensor other) -> Tensor"""
    return _float_binary(_quotient, self, other)


@aten("div.Tensor_mode", "div.Scalar_mode")
def aten_div_mode(self, other, *, rounding_mode=None):
    """div.Tensor_mode(Tensor self, Tensor other, *, str? rounding_mode) -> Tensor"""
    if rounding_mode is None:
        return aten_div(self, other)
    divide = _div_trunc if rounding_mode == "trunc" else _div_floor
    return _compute(divide, result_type(self, other), self, other)


@aten("float_power.Tensor_Tensor", "float_power.Tensor_Scalar", "float_power.Scalar")
def aten_float_power(self, exponent):
    """float_power.Tensor_Tensor(Tensor self, Tensor exponent) -> Tensor"""
    complex_operand = any(isinstance(x, complex) or jnp.iscomplexobj(x) for x in (self, exponent))
    dtype = canonical(np.complex128 if complex_operand else np.float64)
    return jnp.power(as_array(self, dtype), as_array(exponent, dtype))


@aten("floor_divide.default", "floor_divide.Scalar")
def aten_floor_divide(self, other):
    """floor_divide(Tensor self, Tensor other) -> Tensor"""
    return _compute(_div_floor, result_type(self, other), self, other)


@aten("fmod.Tensor", "fmod.Scalar")
def aten_fmod(self, other):
    """fmod.Tensor(Tensor self, Tensor other) -> Tensor"""
    return _compute(jnp.fmod, result_type(self, other), self, other)


@aten("gcd.default")
def aten_gcd(self, other):
    """gcd(Tensor self, Tensor other) -> Tensor"""
    self, other = promote(self, other)
    return jnp.gcd(self, other)


@aten("heaviside.default")
def aten_heaviside(self, values):
    """heaviside(Tensor self, Tensor values) -> Tensor"""
    self, values = promote(self, values)
    zero = jnp.zeros((), self.dtype)
    return jnp.where(self == zero, values, (self > zero).astype(self.dtype))


@aten("hypot.default")
def aten_hypot(self, other):
    """hypot(Tensor self, Tensor other) -> Tensor"""
    return _compute(jnp.hypot, result_type(self, other), self, other)


@aten("lcm.default")
def aten_lcm(self, other):
    """lcm(Tensor self, Tensor other) -> Tensor"""
    self, other = promote(self, other)
    gcd = jnp.gcd(self, other)
    safe = jnp.where(gcd == 0, jnp.ones_like(gcd), gcd)
    return jnp.where(gcd == 0, jnp.zeros_like(gcd), jnp.abs(self // safe * other))


@aten("ldexp.Tensor")
def aten_ldexp(self, other):
    """ldexp.Tensor(Tensor self, Tensor other) -> Tensor"""
    # PyTorch: self * pow(2.0, other)
    return aten_mul(self, aten_pow(2.0, other))


@aten("lerp.Scalar", "lerp.Tensor")
def aten_lerp(self, end, weight):
    """lerp.Scalar(Tensor self, Tensor end, Scalar weight) -> Tensor"""
    dtype = result_type(self, end)

    def fn(s, e, w):
        # PyTorch's kernel, each branch one multiply-add (the zero signs and overflow follow from
        # that): its scalar loop's, end - diff * (1 - w); its vectorized loop writes (w - 1) * diff
        # + end, which differs only in the sign of a zero at w == 1 and end == +-0
        diff = e - s
        small = jnp.abs(w) < 0.5
        if not is_real_floating(diff.dtype):
            return jnp.where(small, s + w * diff, e - diff * (1 - w))
        return jnp.where(small, multiply_add(w, diff, s), multiply_add(-diff, 1 - w, e))

    return _compute(fn, dtype, self, end, weight)


@aten("logaddexp.default")
def aten_logaddexp(self, other):
    """logaddexp(Tensor self, Tensor other) -> Tensor"""
    dtype = result_type(self, other)
    if jnp.issubdtype(dtype, jnp.complexfloating):
        # PyTorch's formula, log1p(exp(min - max)) + max, keeps the larger operand's imaginary part
        # where jnp.logaddexp takes the principal logarithm (the two differ by multiples of 2 pi);
        # on equal real parts PyTorch's max is `self`
        return _compute(lambda x, y: _complex_log_add_exp(y, x), dtype, self, other)
    return _compute(jnp.logaddexp, dtype, self, other)


@aten("logaddexp2.default")
def aten_logaddexp2(self, other):
    """logaddexp2(Tensor self, Tensor other) -> Tensor"""
    return _compute(jnp.logaddexp2, result_type(self, other), self, other)


@aten("mul.Tensor", "mul.Scalar", "multiply.Tensor", "multiply.Scalar")
def aten_mul(self, other):
    """mul.Tensor(Tensor self, Tensor other) -> Tensor"""
    dtype = result_type(self, other)
    if dtype == np.bool_:
        self, other = promote(self, other)
        return self & other
    return _compute(lambda a, b: a * b, dtype, self, other)


@aten("nextafter.default")
def aten_nextafter(self, other):
    """nextafter(Tensor self, Tensor other) -> Tensor"""
    self, other = promote(self, other)
    return _nextafter(*jnp.broadcast_arrays(self, other))  # the tangent of x has the output's shape


@jax.custom_jvp
def _nextafter(x, toward):
    return jnp.nextafter(x, toward)


# PyTorch differentiates nextafter as x itself (gradient 1 in x, 0 in `toward`); JAX has no rule.
_nextafter.defjvp(lambda primals, tangents: (_nextafter(*primals), tangents[0]))


@aten("polar.default")
def aten_polar(abs, angle):
    """polar(Tensor abs, Tensor angle) -> Tensor"""
    return lax.complex(abs * jnp.cos(angle), abs * jnp.sin(angle))


@aten("pow.Tensor_Tensor", "pow.Tensor_Scalar", "pow.Scalar")
def aten_pow(self, exponent):
    """pow.Tensor_Tensor(Tensor self, Tensor exponent) -> Tensor"""
    dtype = result_type(self, exponent)
    if _is_int(dtype):
        return _int_pow(as_array(self, dtype), as_array(exponent, dtype))
    if isinstance(exponent, (int, float)) and float(exponent).is_integer() and abs(exponent) <= 4:
        # small integral exponents multiply, as PyTorch's pow_tensor_scalar kernel does
        return _compute(lambda a: lax.integer_pow(a, int(exponent)), dtype, self)
    return _compute(jnp.power, dtype, self, exponent)


@aten("remainder.Tensor", "remainder.Scalar", "remainder.Scalar_Tensor")
def aten_remainder(self, other):
    """remainder.Tensor(Tensor self, Tensor other) -> Tensor"""

    def fn(a, b):
        mod = jnp.fmod(a, b)
        return jnp.where((mod != 0) & ((b < 0) != (mod < 0)), mod + b, mod)

    return _compute(fn, result_type(self, other), self, other)


@aten("rsub.Tensor", "rsub.Scalar")
def aten_rsub(self, other, alpha=1):
    """rsub.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor"""
    return aten_sub(other, self, alpha)


@aten("sub.Tensor", "sub.Scalar")
def aten_sub(self, other, alpha=1):
    """sub.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor"""
    dtype = result_type(self, other)
    if is_one(alpha):
        return _compute(lambda a, b: a - b, dtype, self, other)
    if is_real_floating(dtype):  # PyTorch adds -alpha * other, one multiply-add
        return _compute(lambda a, b: multiply_add(_scalar_as(-alpha, a.dtype), b, a), dtype, self, other)
    return _compute(lambda a, b: a - _scalar_as(alpha, a.dtype) * b, dtype, self, other)


@aten("where.self", "where.ScalarOther", "where.ScalarSelf", "where.Scalar")
def aten_where(condition, self, other):
    """where.self(Tensor condition, Tensor self, Tensor other) -> Tensor"""
    dtype = result_type(self, other)
    return jnp.where(condition.astype(jnp.bool_), as_array(self, dtype), as_array(other, dtype))


@aten("xlogy.Tensor", "xlogy.Scalar_Other", "xlogy.Scalar_Self")
def aten_xlogy(self, other):
    """xlogy.Tensor(Tensor self, Tensor other) -> Tensor"""
    return _xlog(jnp.log, self, other)
