"""Compiled CPU kernels behind some lowerings, each with its portable formulation as fallback.

    attention.cc    float32 attention without a mask, streamed block by block (`attention`)
    depthwise.cc    depthwise 2-D convolution of NCHW float32 data (`depthwise_conv`)
    matmul.cc       float32 products of activations with a constant weight (`product`), and of
                    groups of rows each with its own (`grouped_product`: mixtures of experts)
    parallel.h      splitting a kernel's work over XLA's intra-op thread pool
    tile.h          the 6 x 16 register tile of the product and attention loops

`pip install` builds the kernels into one shared library next to this file when a C++17
compiler is at hand (`setup.py`; no Python headers needed: the library holds XLA FFI handlers,
loaded with `ctypes`). Without it, or with `JAXPORT_NATIVE=0` in the environment, every
lowering runs its `lax` formulation, as generated code always does.

Programs that call a kernel hold an XLA custom call that only this library serves, so
anything meant to run elsewhere is traced inside `portable()`: `jaxport.export` does so, and
so must a user's own `jax.export` of a converted model.
"""

from __future__ import annotations

import contextlib
import contextvars
import ctypes
import functools
import math
import os
import sysconfig
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

import jax
import numpy as np

from .. import _attention, _convolution, _products

#: The shared library `setup.py` builds from this package's sources.
LIBRARY = Path(__file__).with_name("_kernels" + (sysconfig.get_config_var("EXT_SUFFIX") or ".so"))
DEPTHWISE_TARGET = "jaxport_depthwise_conv2d_f32"
MATMUL_TARGET = "jaxport_matmul_f32"
GROUPED_MATMUL_TARGET = "jaxport_grouped_matmul_f32"
ATTENTION_TARGET = "jaxport_attention_f32"

#: Where the depthwise kernel pays. XLA fuses the portable formulation's taps with what
#: comes before and after (padding, BatchNorm, activation) into one loop, which the kernel
#: cannot join, so small kernels stay portable. Alone, one core, the kernel (plus a separate
#: scale-shift-clip) against the fused loop: 3x3 at 112 px 0.35-0.54 vs 0.59-0.66 ms, at
#: 56 px 0.44 vs 0.26, at 14 px 0.26 vs 0.13; 5x5 at 28 px 0.45-0.63 vs 0.58-0.91, at 7 px
#: 0.39 vs 0.28; 7x7 at 56 px 0.87 vs 1.22, at 14 px 0.45 vs 0.63. In whole networks
#: (interleaved, frozen, one core) the 3x3 layers it would win alone gave nothing:
#: MobileNetV2 0.66x vs 0.62x eager at batch 1, 0.46x vs 0.49x at batch 8; EfficientNet-B0
#: with its 5x5 layers on the kernel 0.90x vs 0.88x, 0.72x vs 0.72x. Where the output feeds
#: a transpose and a LayerNorm (ConvNeXt's 7x7) XLA computes the fused taps once per
#: consumer, and the kernel wins: ConvNeXt-T 0.85x vs 1.33x eager.
KERNEL_TAPS = 49  # at least this many taps: the kernel
MID_KERNEL_TAPS, MID_KERNEL_PLANE = 25, 14 * 14  # at least this many taps over planes this large

_portable = contextvars.ContextVar("jaxport_portable", default=False)


@contextlib.contextmanager
def portable() -> Iterator[None]:
    """Trace without compiled kernels: the program needs only JAX to run."""
    token = _portable.set(True)
    try:
        yield
    finally:
        _portable.reset(token)


@functools.cache
def loaded() -> bool:
    """Whether the kernels are built, allowed, and registered with XLA:CPU."""
    if os.environ.get("JAXPORT_NATIVE", "1") == "0" or not LIBRARY.exists():
        return False
    try:
        library = ctypes.CDLL(str(LIBRARY))
        handlers = {DEPTHWISE_TARGET: library.JaxportDepthwiseConv2dF32, MATMUL_TARGET: library.JaxportMatmulF32,
                    GROUPED_MATMUL_TARGET: library.JaxportGroupedMatmulF32, ATTENTION_TARGET: library.JaxportAttentionF32}
    except (OSError, AttributeError):  # built for another platform, or from older sources
        return False
    return _registered(handlers)


def _registered(handlers: dict) -> bool:
    """Register the kernels' handlers (by target name) with XLA:CPU; False (and one warning)
    where XLA refuses them."""
    try:
        for target, handler in handlers.items():
            jax.ffi.register_ffi_target(target, jax.ffi.pycapsule(handler), platform="cpu")
    except jax.errors.JaxRuntimeError as e:
        # built against another jaxlib's FFI headers, whose API version this XLA refuses
        warnings.warn(f"jaxport's compiled CPU kernels do not load in this jaxlib {jax.__version__} ({e}); "
                      "their lowerings run the portable formulation. Reinstall jaxport to rebuild them.",
                      RuntimeWarning, stacklevel=2)
        return False
    return True


def depthwise_conv(lhs, rhs, strides, padding, dilation, sizes, portable_formulation):
    """The kernel's formulation of a depthwise convolution (NC<spatial> data, OI<spatial>
    weights with I = 1, `padding` as (low, high) pairs, `sizes` the output's spatial sizes),
    or None where the kernel does not apply or does not pay. Derivatives (forward and
    reverse) come from `portable_formulation`, the same convolution in `lax` ops: a
    convolution is linear in each operand, so its tangent is that formulation applied to
    the tangents."""
    if (_portable.get() or lhs.dtype != np.float32 or rhs.dtype != np.float32 or lhs.ndim not in (3, 4)
            or any(lo < 0 for lo, _ in padding) or not loaded()):
        return None
    taps, plane = math.prod(rhs.shape[2:]), math.prod(lhs.shape[2:])
    if not (taps >= KERNEL_TAPS or (taps >= MID_KERNEL_TAPS and plane >= MID_KERNEL_PLANE)):
        return None
    one_d = lhs.ndim == 3
    if one_d:  # a 1-D convolution is a 2-D one over rows of height 1
        strides, dilation, padding = (1, *strides), (1, *dilation), [(0, 0), *padding]
    geometry = dict(stride_h=strides[0], stride_w=strides[1], pad_top=padding[0][0], pad_left=padding[1][0],
                    dilation_h=dilation[0], dilation_w=dilation[1])
    attributes = {name: np.int64(value) for name, value in geometry.items()}  # the handler's int64 attributes
    out_shape = (lhs.shape[0], rhs.shape[0], *(1,) * one_d, *sizes)
    call = jax.ffi.ffi_call(DEPTHWISE_TARGET, jax.ShapeDtypeStruct(out_shape, lhs.dtype), vmap_method="sequential")

    @jax.custom_jvp
    def convolution(lhs, rhs):
        if one_d:
            return call(lhs[:, :, None], rhs[:, :, None], **attributes)[:, :, 0]
        return call(lhs, rhs, **attributes)

    def tangent(primals, tangents):
        (lhs, rhs), (d_lhs, d_rhs) = primals, tangents
        terms = []
        if not isinstance(d_lhs, jax.custom_derivatives.SymbolicZero):
            terms.append(portable_formulation(d_lhs, rhs))
        if not isinstance(d_rhs, jax.custom_derivatives.SymbolicZero):
            terms.append(portable_formulation(lhs, d_rhs))
        out = convolution(lhs, rhs)
        return out, sum(terms[1:], terms[0]) if terms else jax.numpy.zeros_like(out)

    convolution.defjvp(tangent, symbolic_zeros=True)
    return convolution


#: Where the product kernel pays: weights whose sides are at least this long; smaller ones are
#: over before the custom call's overhead is repaid. Against XLA's products, one core, GF/s:
#: 32 x 512 x 512 61 vs 40, 128 x 768 x 768 75 vs 70, 128 x 768 x 50257 (a language model's
#: head) 74 vs 64, and over tall ones, in panels of 256 rows, 1500 x 512 x 512 73 vs 72,
#: 4096 x 512 x 512 77 vs 65, 2048 x 1024 x 1024 69 vs 55 (1024 x 768 x 768 81 vs 84).
MIN_PRODUCT_SIDE = 64
SLIVER = 16  # output columns per sliver of a packed weight (matmul.cc's kNr)


#: Whether `product` takes the kernel where it applies: None (the default) as measured on this
#: CPU (`_product_kernel_pays`); `product_kernel(True | False)` decides instead.
_product_kernel_choice: contextvars.ContextVar[bool | None] = contextvars.ContextVar(
    "jaxport_product_kernel", default=None)


@contextlib.contextmanager
def product_kernel(use: bool) -> Iterator[None]:
    """Trace products with a constant weight on the kernel (True) or on XLA's product (False),
    whichever this CPU measured faster notwithstanding."""
    token = _product_kernel_choice.set(use)
    try:
        yield
    finally:
        _product_kernel_choice.reset(token)


def _takes_constant_weight(rows, weight, weight_ndim: int, compute_dtype) -> bool:
    """Whether the product kernels apply: traced float32 rows [m, k] times a float32 weight of
    `weight_ndim` dims that is a constant of the program being traced (concrete), its matrices'
    sides `MIN_PRODUCT_SIDE` or more, outside `portable()`, the kernels loaded."""
    return (not _portable.get() and isinstance(rows, jax.core.Tracer) and not isinstance(weight, jax.core.Tracer)
            and rows.dtype == np.float32 and weight.dtype == np.float32 and compute_dtype == np.float32
            and rows.ndim == 2 and weight.ndim == weight_ndim and min(weight.shape[-2:]) >= MIN_PRODUCT_SIDE
            and loaded())


def _product_kernel_wanted() -> bool:
    choice = _product_kernel_choice.get()
    return _product_kernel_pays() if choice is None else choice


@functools.cache
def _product_kernel_pays() -> bool:
    """Whether the kernel beats XLA's own product on this CPU, measured once per process: rows
    128 x 768 times a constant 3072 x 768 weight (BERT-base's MLP), the best of 5 calls each.
    The kernel's register tile is two 256-bit vectors wide; where XLA's products use wider ones
    (AVX-512: 3.23 ms against the kernel's 5.23 on an AMD EPYC, one core) it loses, and every
    product stays XLA's."""
    if not loaded():
        return False
    with jax.ensure_compile_time_eval():
        rng = np.random.default_rng(0)
        rows = jax.numpy.asarray(rng.standard_normal((128, 768), np.float32))
        weight = jax.numpy.asarray(rng.standard_normal((3072, 768), np.float32))
        packed = _slivers(weight)
        call = jax.ffi.ffi_call(MATMUL_TARGET, jax.ShapeDtypeStruct((128, 3072), np.float32))
        kernel = jax.jit(lambda r: call(r, packed))
        xla = jax.jit(lambda r: jax.lax.dot_general(r, weight, (((1,), (1,)), ((), ()))))
        return _best_of(kernel, rows) < _best_of(xla, rows)


def _best_of(fn, *args, calls: int = 5) -> float:
    jax.block_until_ready(fn(*args))
    best = math.inf
    for _ in range(calls):
        start = time.perf_counter()
        jax.block_until_ready(fn(*args))
        best = min(best, time.perf_counter() - start)
    return best


def product(rows, weight, contracting, compute_dtype, portable_formulation):
    """The kernel's formulation of rows [m, k] times a constant weight contracted over its
    dimension `contracting` ([n, k] with 1, [k, n] with 0), or None where it does not apply:
    the weight must be a constant of the program being traced (a concrete array while `rows`
    is traced), both float32 matrices, the weight's sides `MIN_PRODUCT_SIDE` or more. The weight
    is packed for the kernel here, once per trace, as the program's constant. Taken only where
    this CPU measured the kernel faster than XLA's product (`_product_kernel_pays`) or
    `product_kernel(True)` asks for it. Derivatives come from `portable_formulation` (the
    product is linear in `rows`; the constant has none)."""
    if not _takes_constant_weight(rows, weight, 2, compute_dtype) or not _product_kernel_wanted():
        return None
    with jax.ensure_compile_time_eval():
        packed = _slivers(weight if contracting == 1 else weight.T)
    call = jax.ffi.ffi_call(MATMUL_TARGET, jax.ShapeDtypeStruct((rows.shape[0], weight.shape[1 - contracting]),
                                                                rows.dtype), vmap_method="sequential")

    @jax.custom_jvp
    def kernel(rows):
        return call(rows, packed)

    @kernel.defjvp
    def tangent(primals, tangents):
        return kernel(primals[0]), portable_formulation(tangents[0], weight)

    return lambda rows, weight: kernel(rows)


def grouped_product(rows, weights, sizes, compute_dtype, portable_formulation):
    """The kernel's formulation of a mixture of experts' product, or None where it does not
    apply: consecutive groups of rows [s, k], group g `sizes[g]` rows long, each times its
    constant weight `weights[g]` [k, n]; rows past the last group are zeros. Conditions and
    derivatives as for `product` (`portable_formulation(rows, weights, sizes)`); each group's
    weight is packed once per trace."""
    if not _takes_constant_weight(rows, weights, 3, compute_dtype):
        return None
    with jax.ensure_compile_time_eval():
        packed = jax.vmap(_slivers)(jax.numpy.swapaxes(weights, 1, 2))
    call = jax.ffi.ffi_call(GROUPED_MATMUL_TARGET, jax.ShapeDtypeStruct((rows.shape[0], weights.shape[2]), rows.dtype),
                            vmap_method="sequential")

    @jax.custom_jvp
    def kernel(rows, sizes):
        return call(rows, packed, sizes.astype(np.int32))

    @kernel.defjvp
    def tangent(primals, tangents):
        return kernel(*primals), portable_formulation(tangents[0], weights, primals[1])

    return lambda rows, weights, sizes: kernel(rows, sizes)


def _slivers(weight):
    """weight [n, k] as the kernel reads it: [ceil(n / 16), k, 16], zeros past n."""
    n, k = weight.shape
    count = -(-n // SLIVER)
    padded = jax.numpy.pad(weight, ((0, count * SLIVER - n), (0, 0)))
    return padded.reshape(count, SLIVER, k).transpose(0, 2, 1)


#: Where the attention kernel pays: at least this many query rows. One core, 12 heads of 64
#: (XLA's whole-array formulation, the kernel, PyTorch's CPU flash kernel): 128 tokens 1.46,
#: 1.69 and 1.33 ms; 197 tokens 3.96, 3.95 and 3.38 ms; Whisper-base's 8 heads over 1,500
#: frames 229, 93 and 92 ms.
MIN_ATTENTION_QUERIES = 256


def attention(query, key, value, scale, portable_formulation):
    """The kernel's formulation of unmasked attention, (output, logsumexp) of query [..., heads,
    L, D] over key and value [..., kv_heads, S, D] (heads a multiple of kv_heads), or None where
    it does not apply: float32 operands, the same leading dims and head size, at least
    `MIN_ATTENTION_QUERIES` query rows. Derivatives come from `portable_formulation` (its
    `jax.jvp`), which under differentiation computes the scores a second time."""
    if (_portable.get() or any(a.dtype != np.float32 for a in (query, key, value)) or query.ndim < 3
            or key.shape != value.shape or key.shape[:-3] != query.shape[:-3] or key.shape[-1] != query.shape[-1]
            or key.shape[-3] == 0 or query.shape[-3] % key.shape[-3] or query.shape[-2] < MIN_ATTENTION_QUERIES
            or query.size == 0 or key.size == 0 or not loaded()):
        return None
    lead = query.shape[:-1]
    batch = math.prod(query.shape[:-3])
    shapes = (jax.ShapeDtypeStruct((batch, *query.shape[-3:]), query.dtype),
              jax.ShapeDtypeStruct((batch, *query.shape[-3:-1]), query.dtype))
    call = jax.ffi.ffi_call(ATTENTION_TARGET, shapes, vmap_method="sequential")

    @jax.custom_jvp
    def kernel(query, key, value):
        out, logsumexp = call(*(a.reshape(batch, *a.shape[-3:]) for a in (query, key, value)), scale=np.float32(scale))
        return out.reshape(query.shape), logsumexp.reshape(lead)

    @kernel.defjvp
    def tangent(primals, tangents):
        return kernel(*primals), jax.jvp(portable_formulation, primals, tangents)[1]

    return kernel


_attention.CPU_KERNELS["attention"] = attention
_convolution.CPU_KERNELS["depthwise_conv"] = depthwise_conv
_products.CPU_KERNELS["product"] = product
_products.CPU_KERNELS["grouped_product"] = grouped_product
_convolution.CPU_KERNELS["product"] = product  # frozen 1-D convolutions as windows times the weight
