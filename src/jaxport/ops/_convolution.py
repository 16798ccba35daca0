"""Convolution as each backend runs it fast, shared by the ATen and ONNX lowerings.

Both op libraries hand `convolve` NC<spatial> data and OI<spatial> weights, already in the
dtype to compute in. Most convolutions go to `lax.conv_general_dilated`. On CPU a depthwise
convolution (one group per input channel, as in MobileNet, EfficientNet and ConvNeXt) does
not: XLA:CPU runs `feature_group_count > 1` on a slow generic path, measured 10-38x PyTorch's
time for 3x3 to 7x7 kernels, so there it is written as shifted multiply-adds: one strided
slice of the padded input per kernel tap, scaled by that tap's per-channel weight and
summed, which XLA fuses into one vectorized loop over the output (0.3-1.3x PyTorch's time).
Where jaxport's compiled kernel is built (`ops/_native`, registered in `CPU_KERNELS`), 5x5
and larger kernels run on it instead: XLA copies the fused sum into every consumer of its
output, so ConvNeXt's 7x7, read by a transpose and a LayerNorm, was computed three times.
Other grouped convolutions with small kernels run on CPU as one plain convolution per group,
concatenated (8 groups: 3.5x -> 1.2x PyTorch's time; 32 groups: 15x -> 2.4x). A 1x1 convolution on CPU is
a matrix product of the weights with each image's channels-by-positions matrix: XLA:CPU's
convolutions (XNNPACK) want channels last, so every plain convolution of an NCHW network
is wrapped in two transposes of its activations, which cost MobileNetV2 as much as its
convolutions; as products, its 1x1 layers keep NCHW (25.5 -> 18.6 ms at batch 1, 185 ->
121 ms at batch 8). A plain convolution with more output channels than output positions
(ResNet's last stages at small batches) is one matrix product of the weights as they lie with
the input's stacked tap windows: XLA:CPU transposes a kernel that arrives as an argument to
HWIO on every call, which there costs more than the windows. A plain 1-D convolution whose
weight is a constant of the program (a frozen model) and float32 is, where the product kernel
is built, the input's tap windows stacked channels last times the weight as rows: the kernel
then runs it (wav2vec2's feature extractor, 512 channels, 3 taps over 1,599 and 799 frames, went
to XLA's convolution at about 41 GF/s on one core). GPUs and TPUs take grouped convolutions natively (cuDNN, the TPU's
convolution units): the choice is made in the program (`lax.platform_dependent`), not by the
host that traces it, so `jax.export` artifacts and generated code meant for a GPU run
`lax.conv_general_dilated` there. (Measured one thread, float32, by
`benchmarks/bench_convolutions.py` per layer and `benchmarks/bench_real_sizes.py` per model.)
"""

from __future__ import annotations

import itertools
import math

import jax
import jax.numpy as jnp
from jax import lax

#: Kernels with more taps than this stay on `lax.conv_general_dilated` even when depthwise:
#: each tap is a term of the fused loop (7x7 is 49; a 3x3x3 volume 27).
MAX_SHIFTED_TAPS = 64
#: Grouped convolutions with more groups than this stay one grouped convolution: each group
#: becomes its own convolution in the program.
MAX_SPLIT_GROUPS = 64
#: Grouped convolutions with kernels of more taps than this stay one grouped convolution:
#: XLA's grouped path is slow on small kernels over large images, not on long kernels over
#: short inputs. wav2vec2's positional convolution (768 channels, 16 groups, 128 taps, 49
#: frames) takes 13.9 ms grouped and 47.7 ms split at batch 1 (22 vs 345 ms at batch 8;
#: PyTorch 4.5 and 36 ms).
MAX_SPLIT_TAPS = 64
#: Compiled CPU kernels by name, each a function that returns its formulation of a convolution
#: (or, "product", of rows times a constant weight, as in `_products`) or None where it does not
#: apply. `jaxport.ops._native` adds them when `pip install` built them; generated code, and
#: programs traced for other machines, run without any.
CPU_KERNELS = {}


def convolve(lhs, rhs, *, strides, padding, lhs_dilation, rhs_dilation, groups, precision=lax.Precision.HIGHEST):
    """`lax.conv_general_dilated` over NC<spatial> data and OI<spatial> weights, with
    `padding` as (low, high) pairs; output in the operands' dtype.

    Where CPUs want another formulation the program carries both, chosen by the platform it is
    compiled for (`lax.platform_dependent`), so a program exported or generated on one machine
    runs each platform's own formulation on another."""
    def general(lhs, rhs):
        return _general(lhs, rhs, strides, padding, lhs_dilation, rhs_dilation, groups, precision)

    on_cpu = _cpu_formulation(lhs, rhs, strides, padding, lhs_dilation, rhs_dilation, groups, precision)
    if on_cpu is None:
        return general(lhs, rhs)
    return lax.platform_dependent(lhs, rhs, cpu=on_cpu, default=general)


def _general(lhs, rhs, strides, padding, lhs_dilation, rhs_dilation, groups, precision):
    names = "".join(chr(ord("a") + i) for i in range(rhs.ndim - 2))
    return lax.conv_general_dilated(
        lhs,
        rhs,
        window_strides=strides,
        padding=padding,
        lhs_dilation=lhs_dilation,
        rhs_dilation=rhs_dilation,
        dimension_numbers=("NC" + names, "OI" + names, "NC" + names),
        feature_group_count=groups,
        precision=precision,
        preferred_element_type=lhs.dtype,
    )


def _cpu_formulation(lhs, rhs, strides, padding, lhs_dilation, rhs_dilation, groups, precision):
    """The function (lhs, rhs) -> output XLA:CPU runs fastest for this convolution, or None
    when that is `_general`'s."""
    transposed = any(d != 1 for d in lhs_dilation or ())  # a stride-dilated input
    sizes = _output_sizes(lhs, rhs, strides, padding, rhs_dilation)
    if groups > 1 and not transposed and _is_shiftable_depthwise(lhs, rhs, groups) and all(s > 0 for s in sizes):
        def shifts(lhs, rhs):
            return _depthwise_by_shifts(lhs, rhs, strides, padding, rhs_dilation)
        kernel = CPU_KERNELS.get("depthwise_conv")
        dilation = tuple(rhs_dilation or (1,) * (rhs.ndim - 2))
        return (kernel and kernel(lhs, rhs, strides, padding, dilation, sizes, shifts)) or shifts
    if 1 < groups <= MAX_SPLIT_GROUPS and math.prod(rhs.shape[2:]) <= MAX_SPLIT_TAPS:
        def split(lhs, rhs):
            parts = zip(jnp.split(lhs, groups, axis=1), jnp.split(rhs, groups, axis=0))
            return jnp.concatenate([_on_cpu(x, w, strides, padding, lhs_dilation, rhs_dilation, 1, precision)
                                    for x, w in parts], axis=1)
        return split
    if not transposed and groups == 1 and (on_kernel := _windows_on_kernel(lhs, rhs, strides, padding, rhs_dilation, precision)):
        return on_kernel
    if not transposed and _is_pointwise(rhs, groups, padding):
        def pointwise(lhs, rhs):
            picked = lhs[(slice(None), slice(None), *(slice(None, None, s) for s in strides))]
            return _pointwise(picked, rhs.reshape(rhs.shape[:2]), precision)
        return pointwise
    if not transposed and groups == 1 and _is_weight_bound(lhs, rhs, strides, padding, rhs_dilation):
        return lambda lhs, rhs: _by_patches(lhs, rhs, strides, padding, rhs_dilation, precision)
    return None


def _on_cpu(lhs, rhs, strides, padding, lhs_dilation, rhs_dilation, groups, precision):
    """The convolution as XLA:CPU runs it fastest (inside a CPU branch: no further choice)."""
    formulation = _cpu_formulation(lhs, rhs, strides, padding, lhs_dilation, rhs_dilation, groups, precision)
    if formulation is None:
        return _general(lhs, rhs, strides, padding, lhs_dilation, rhs_dilation, groups, precision)
    return formulation(lhs, rhs)


def _is_pointwise(rhs, groups, padding) -> bool:
    """A 1x1 convolution without padding: a matrix product over the channels."""
    return groups == 1 and all(k == 1 for k in rhs.shape[2:]) and all(p == (0, 0) for p in map(tuple, padding))


def _pointwise(lhs, weight, precision):
    """out[n, o, ...] = sum_c weight[o, c] lhs[n, c, ...]: weight @ lhs[n], the product XLA:CPU
    runs without moving channels last (for a batch, one product over all images' positions,
    then the image axis moved to the front)."""
    batch, channels, *spatial = lhs.shape
    flat = lhs.reshape(batch, channels, math.prod(spatial))
    out = lax.dot_general(weight, flat, (((1,), (1,)), ((), ())), precision=precision,
                          preferred_element_type=lhs.dtype)  # [out channels, batch, positions]
    return jnp.moveaxis(out, 1, 0).reshape(batch, weight.shape[0], *spatial)


def _output_sizes(lhs, rhs, strides, padding, rhs_dilation) -> list[int]:
    dilation = rhs_dilation or (1,) * (rhs.ndim - 2)
    return [(size + lo + hi - d * (k - 1) - 1) // s + 1
            for size, (lo, hi), k, d, s in zip(lhs.shape[2:], padding, rhs.shape[2:], dilation, strides)]


def _is_weight_bound(lhs, rhs, strides, padding, rhs_dilation) -> bool:
    """A floating convolution with more output channels than output positions (over the
    batch): its weights outweigh its input's tap windows, as in ResNet's last stages."""
    sizes = _output_sizes(lhs, rhs, strides, padding, rhs_dilation)
    return (jnp.issubdtype(lhs.dtype, jnp.floating) and all(size > 0 for size in sizes)
            and rhs.shape[0] >= lhs.shape[0] * math.prod(sizes))


def _pad_spatial(lhs, padding):
    """NC<spatial> data zero-padded by (low, high) per spatial dim."""
    return lax.pad(lhs, jnp.zeros((), lhs.dtype), [(0, 0, 0), (0, 0, 0)] + [(lo, hi, 0) for lo, hi in padding])


def _tap_windows(padded, kernel, strides, dilation, sizes, channels_last=False):
    """For each kernel tap (row-major, as the weights hold them): the strided slice of the
    padded input (NC<spatial>, or N<spatial>C with `channels_last`) that tap multiplies, one per
    output position."""
    batch, channels = (padded.shape[0], padded.shape[-1]) if channels_last else padded.shape[:2]
    for tap in itertools.product(*(range(k) for k in kernel)):
        starts = [t * d for t, d in zip(tap, dilation)]
        limits = [start + (size - 1) * s + 1 for start, size, s in zip(starts, sizes, strides)]
        if channels_last:
            yield tap, lax.slice(padded, (0, *starts, 0), (batch, *limits, channels), (1, *strides, 1))
        else:
            yield tap, lax.slice(padded, (0, 0, *starts), (batch, channels, *limits), (1, 1, *strides))


def _by_patches(lhs, rhs, strides, padding, rhs_dilation, precision):
    """out[n, o, p] = sum over (c, tap) of rhs[o, c, tap] * window[n, c, tap, p]: one matrix
    product of the weights, as they lie ([out, in * taps], no transpose), with the input's
    tap windows stacked (im2col). XLA:CPU's convolutions want HWIO kernels, so a kernel given
    as an argument is transposed on every call, reading the weights twice; where weights
    outweigh the windows that costs more than building the windows: ResNet-18's 512-channel
    3x3 at 7x7, batch 1, 3.1 -> 1.4 ms (1.2 ms with the kernel a constant either way)."""
    dilation = tuple(rhs_dilation or (1,) * (rhs.ndim - 2))
    sizes = _output_sizes(lhs, rhs, strides, padding, dilation)
    windows = [window for _, window in _tap_windows(_pad_spatial(lhs, padding), rhs.shape[2:], strides, dilation, sizes)]
    batch, channels = lhs.shape[:2]
    patches = jnp.stack(windows, axis=2).reshape(batch, channels * len(windows), *sizes)
    return _pointwise(patches, rhs.reshape(rhs.shape[0], -1), precision)


def _windows_on_kernel(lhs, rhs, strides, padding, rhs_dilation, precision):
    """A plain 1-D float32 convolution with a constant weight as the product kernel's rows times
    weight: rows [(n, p), (tap, c)] of the tap windows channels last, the weight [out, (tap, c)]
    reordered once, when the program is traced; None where no kernel is built. Where the product
    kernel declines (`portable()`, a small weight) it is `_general`'s convolution."""
    kernel = CPU_KERNELS.get("product")
    if (kernel is None or rhs.ndim != 3 or isinstance(rhs, jax.core.Tracer) or lhs.dtype != jnp.float32
            or rhs.dtype != jnp.float32):
        return None
    dilation = tuple(rhs_dilation or (1,))
    sizes = _output_sizes(lhs, rhs, strides, padding, dilation)
    if not all(size > 0 for size in sizes):
        return None
    with jax.ensure_compile_time_eval():
        weight = jnp.moveaxis(rhs, 1, -1).reshape(rhs.shape[0], -1)

    def formulation(lhs, rhs):  # rhs traced in this branch; the product reads the constant
        padded = jnp.moveaxis(_pad_spatial(lhs, padding), 1, -1)  # [n, length, c]
        windows = [window for _, window in _tap_windows(padded, rhs.shape[2:], strides, dilation, sizes,
                                                        channels_last=True)]
        rows = jnp.stack(windows, axis=-2).reshape(lhs.shape[0] * sizes[0], weight.shape[1])

        def general(rows, weight):
            return lax.dot_general(rows, weight, (((1,), (1,)), ((), ())), precision=lax.Precision.HIGHEST,
                                   preferred_element_type=jnp.float32)

        on_kernel = kernel(rows, weight, 1, jnp.float32, general)
        if on_kernel is None:
            return _general(lhs, rhs, strides, padding, None, dilation, 1, precision)
        out = on_kernel(rows, weight)  # [(n, p), out]
        return jnp.moveaxis(out.reshape(lhs.shape[0], sizes[0], -1), -1, 1)
    return formulation


def _is_shiftable_depthwise(lhs, rhs, groups) -> bool:
    """Depthwise (every group one input channel), floating, few taps."""
    return (
        groups == lhs.shape[1]
        and rhs.shape[1] == 1
        and jnp.issubdtype(lhs.dtype, jnp.floating)
        and math.prod(rhs.shape[2:]) <= MAX_SHIFTED_TAPS
    )


def _depthwise_by_shifts(lhs, rhs, strides, padding, rhs_dilation):
    """A depthwise convolution as a sum over kernel taps of strided slices times per-channel
    tap weights (for non-empty outputs)."""
    nd = rhs.ndim - 2
    kernel = rhs.shape[2:]
    multiplier = rhs.shape[0] // lhs.shape[1]
    if multiplier > 1:  # output channel c * multiplier + j reads input channel c
        lhs = jnp.repeat(lhs, multiplier, axis=1)
    dilation = tuple(rhs_dilation or (1,) * nd)
    sizes = _output_sizes(lhs, rhs, strides, padding, dilation)
    channels = lhs.shape[1]
    total = None
    for tap, window in _tap_windows(_pad_spatial(lhs, padding), kernel, strides, dilation, sizes):
        term = window * rhs[(slice(None), 0, *tap)].reshape((channels,) + (1,) * nd)
        total = term if total is None else total + term
    return total
