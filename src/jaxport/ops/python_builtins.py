"""Python builtins that appear in exported graphs (tuple indexing, symbolic-size arithmetic)."""

from __future__ import annotations

import math

import jax.numpy as jnp

from .registry import python


@python("operator.getitem")
def py_getitem(a, b):
    return a[b]


@python("operator.add")
def py_add(a, b):
    return a + b


@python("operator.sub")
def py_sub(a, b):
    return a - b


@python("operator.mul")
def py_mul(a, b):
    return a * b


@python("operator.floordiv")
def py_floordiv(a, b):
    return a // b


@python("operator.truediv")
def py_truediv(a, b):
    return a / b


@python("operator.mod")
def py_mod(a, b):
    return a % b


@python("operator.pow")
def py_pow(a, b):
    return a**b


@python("operator.neg")
def py_neg(a):
    return -a


@python("operator.eq")
def py_eq(a, b):
    return a == b


@python("operator.ne")
def py_ne(a, b):
    return a != b


@python("operator.lt")
def py_lt(a, b):
    return a < b


@python("operator.le")
def py_le(a, b):
    return a <= b


@python("operator.gt")
def py_gt(a, b):
    return a > b


@python("operator.ge")
def py_ge(a, b):
    return a >= b


@python("math.ceil")
def py_ceil(a):
    return math.ceil(a)


@python("math.floor")
def py_floor(a):
    return math.floor(a)


@python("math.sqrt")
def py_sqrt(a):
    return math.sqrt(a)


@python("torch.sym_float")
def py_sym_float(a):
    return float(a)


@python("torch.sym_ite")
def py_sym_ite(b, t, f):
    if isinstance(b, bool):
        return t if b else f
    return jnp.where(b, t, f)  # a traced condition (from .item() under jit)


@python("torch.sym_int")
def py_sym_int(a):
    return int(a)


@python("torch.sym_max")
def py_sym_max(a, b):
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return max(a, b)
    return jnp.maximum(a, b)  # a traced size (from .item() under jit)


@python("torch.sym_min")
def py_sym_min(a, b):
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return min(a, b)
    return jnp.minimum(a, b)  # a traced size (from .item() under jit)


@python("torch.sym_not")
def py_sym_not(a):
    return not a
