"""ONNX random ops: RandomNormal, RandomUniform, Bernoulli, Multinomial (and the *Like forms).

Each draws from the `jax.random` key the interpreter hands it. A node with a `seed`
attribute draws from a key made from that seed instead, so it repeats its values on every
call, as ONNX intends. The streams are JAX's, not NumPy's or onnxruntime's: equal seeds give
equal distributions, not equal numbers.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ..registry import onnx

#: ONNX TensorProto element types the `dtype` attributes name, by JAX name.
_DTYPES = {1: "float32", 2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 6: "int32",
           7: "int64", 9: "bool", 10: "float16", 11: "float64", 12: "uint32", 13: "uint64",
           16: "bfloat16"}


def _onnx_dtype(code: int):
    return np.dtype(getattr(jnp, _DTYPES[int(code)]))


def _key(key, seed):
    return key if seed is None else jax.random.key(int(seed))


@onnx("Bernoulli", since=15, random=True)
def bernoulli(input, *, dtype=None, seed=None, key):
    """Bernoulli(T1 input) -> T2 output; dtype, seed."""
    u = jax.random.uniform(_key(key, seed), input.shape, input.dtype)
    return (u < input).astype(input.dtype if dtype is None else _onnx_dtype(dtype))


@onnx("Multinomial", since=7, random=True)
def multinomial(input, *, dtype=6, sample_size=1, seed=None, key):
    """Multinomial(T1 input) -> T2 output; dtype, sample_size, seed. `input` holds each
    batch row's unnormalized log-probabilities."""
    draws = jax.random.categorical(_key(key, seed), input, axis=-1,
                                   shape=(sample_size, input.shape[0]))
    return draws.T.astype(_onnx_dtype(dtype))


@onnx("RandomNormal", since=1, random=True)
def random_normal(*, shape, dtype=1, mean=0.0, scale=1.0, seed=None, key):
    """RandomNormal() -> T output; shape, dtype, mean, scale, seed."""
    out = _onnx_dtype(dtype)
    return jax.random.normal(_key(key, seed), tuple(shape), out) * scale + mean


@onnx("RandomNormalLike", since=1, random=True)
def random_normal_like(input, *, dtype=None, mean=0.0, scale=1.0, seed=None, key):
    """RandomNormalLike(T1 input) -> T2 output; dtype, mean, scale, seed."""
    out = input.dtype if dtype is None else _onnx_dtype(dtype)
    return jax.random.normal(_key(key, seed), input.shape, out) * scale + mean


@onnx("RandomUniform", since=1, random=True)
def random_uniform(*, shape, dtype=1, high=1.0, low=0.0, seed=None, key):
    """RandomUniform() -> T output; shape, dtype, high, low, seed."""
    return jax.random.uniform(_key(key, seed), tuple(shape), _onnx_dtype(dtype), low, high)


@onnx("RandomUniformLike", since=1, random=True)
def random_uniform_like(input, *, dtype=None, high=1.0, low=0.0, seed=None, key):
    """RandomUniformLike(T1 input) -> T2 output; dtype, high, low, seed."""
    out = input.dtype if dtype is None else _onnx_dtype(dtype)
    return jax.random.uniform(_key(key, seed), input.shape, out, low, high)
