"""ONNX signal processing: DFT, STFT, window functions, MelWeightMatrix.

ONNX holds complex values as a trailing dimension of 2 (real, imaginary); a trailing
dimension of 1 is a real signal. Windows and mel matrices depend only on static operands,
so they are computed in NumPy (float64) and cast.
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np
from jax import lax

from ..registry import onnx
from ._helpers import static_array, static_ints

#: ONNX TensorProto element types these ops can be asked to produce.
_DTYPES = {1: "float32", 2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 6: "int32",
           7: "int64", 10: "float16", 11: "float64", 12: "uint32", 13: "uint64", 16: "bfloat16"}


def _onnx_dtype(code: int):
    return np.dtype(getattr(jnp, _DTYPES[int(code)]))


def _window(size, output_datatype, periodic, coefficients):
    """The cosine-sum window sum_k (-1)^k a_k cos(2 pi k n / N), N = size (periodic) or size-1."""
    n = static_ints(size, "window size")[0]
    denom = n if periodic else n - 1
    t = 2 * math.pi * np.arange(n, dtype=np.float64) / denom
    w = sum((-1) ** k * a * np.cos(k * t) for k, a in enumerate(coefficients))
    return jnp.asarray(np.asarray(w, np.float64).astype(_onnx_dtype(output_datatype)))


@onnx("BlackmanWindow", since=17, static=(0,))
def blackman_window(size, *, output_datatype=1, periodic=1):
    """BlackmanWindow(T1 size) -> T2; output_datatype, periodic."""
    return _window(size, output_datatype, periodic, (0.42, 0.5, 0.08))


def _as_complex(x):
    """A (..., 1|2) ONNX signal as a complex array without the trailing dim."""
    wide = x.dtype == jnp.float64
    ctype, rtype = (jnp.complex128, jnp.float64) if wide else (jnp.complex64, jnp.float32)
    if x.shape[-1] == 1:
        return x[..., 0].astype(ctype)
    return lax.complex(x[..., 0].astype(rtype), x[..., 1].astype(rtype))


def _real_fft(x, n: int, axis: int, onesided):
    """The DFT of a real (..., 1) signal through the real-input FFT, whose symmetric bins come
    out exact (a complex FFT leaves rounding noise in, e.g., the Nyquist imaginary part)."""
    rtype = jnp.float64 if x.dtype == jnp.float64 else jnp.float32
    half = jnp.fft.rfft(x[..., 0].astype(rtype), n=n, axis=axis)
    if onesided:
        return half
    # The upper bins are the conjugates of bins n-k, k = n//2+1 .. n-1.
    upper = jnp.conj(jnp.flip(lax.slice_in_dim(half, 1, (n + 1) // 2, axis=axis), axis=axis))
    return jnp.concatenate([half, upper], axis=axis)


def _as_pairs(z, dtype):
    return jnp.stack([jnp.real(z), jnp.imag(z)], axis=-1).astype(dtype)


def _dft(x, dft_length, axis: int, inverse, onesided):
    axis = axis % x.ndim
    if isinstance(dft_length, int):
        n = dft_length
    elif dft_length is None:
        n = 2 * (x.shape[axis] - 1) if inverse and onesided else x.shape[axis]
    else:
        n = static_ints(dft_length, "DFT dft_length")[0]
    if not inverse and x.shape[-1] == 1:
        return _as_pairs(_real_fft(x, n, axis, onesided), x.dtype)
    signal = _as_complex(x)
    if inverse and onesided:
        return jnp.fft.irfft(signal, n=n, axis=axis)[..., None].astype(x.dtype)
    if inverse:
        return _as_pairs(jnp.fft.ifft(signal, n=n, axis=axis), x.dtype)
    z = jnp.fft.fft(signal, n=n, axis=axis)
    if onesided:
        z = lax.slice_in_dim(z, 0, n // 2 + 1, axis=axis)
    return _as_pairs(z, x.dtype)


@onnx("DFT", since=17, static=(1,))
def dft_17(input, dft_length=None, *, axis=1, inverse=0, onesided=0):
    """DFT(T1 input, T2 dft_length) -> T1; axis, inverse, onesided."""
    return _dft(input, dft_length, axis, inverse, onesided)


@onnx("DFT", since=20, static=(1, 2))
def dft(input, dft_length=None, axis=None, *, inverse=0, onesided=0):
    """DFT(T1 input, T2 dft_length, int64 axis) -> T1; inverse, onesided."""
    axis = -2 if axis is None else static_ints(axis, "DFT axis")[0]
    return _dft(input, dft_length, axis, inverse, onesided)


@onnx("HammingWindow", since=17, static=(0,))
def hamming_window(size, *, output_datatype=1, periodic=1):
    """HammingWindow(T1 size) -> T2; output_datatype, periodic."""
    return _window(size, output_datatype, periodic, (25 / 46, 21 / 46))


@onnx("HannWindow", since=17, static=(0,))
def hann_window(size, *, output_datatype=1, periodic=1):
    """HannWindow(T1 size) -> T2; output_datatype, periodic."""
    return _window(size, output_datatype, periodic, (0.5, 0.5))


@onnx("MelWeightMatrix", since=17, static=(0, 1, 2, 3, 4))
def mel_weight_matrix(num_mel_bins, dft_length, sample_rate, lower_edge_hertz,
                      upper_edge_hertz, *, output_datatype=1):
    """MelWeightMatrix(T1 num_mel_bins, T1 dft_length, T1 sample_rate, T2 lower_edge_hertz,
    T2 upper_edge_hertz) -> T3; output_datatype."""
    bins = static_ints(num_mel_bins, "num_mel_bins")[0]
    length = static_ints(dft_length, "dft_length")[0]
    rate = static_ints(sample_rate, "sample_rate")[0]
    # log1p in the edges' own precision, as ONNX's reference does; the rest in float64.
    lo, hi = (np.log1p(static_array(v, "edge hertz") / 700).astype(np.float64)
              for v in (lower_edge_hertz, upper_edge_hertz))
    lo_mel, hi_mel = 2595 * lo / np.log(10), 2595 * hi / np.log(10)
    points = np.arange(bins + 2) * ((hi_mel - lo_mel) / (bins + 2)) + lo_mel
    hertz = 700 * np.expm1(points / 2595 * np.log(10))
    edges = (((length + 1) * hertz) // rate).astype(np.int64)
    out = np.zeros((length // 2 + 1, bins))
    for i in range(bins):
        left, center, right = edges[i], edges[i + 1], edges[i + 2]
        if center == left:
            out[center, i] = 1
        else:
            j = np.arange(left, center + 1)
            out[j, i] = (j - left) / (center - left)
        if right > center:
            j = np.arange(center, right)
            out[j, i] = (right - j) / (right - center)
    return jnp.asarray(out.astype(_onnx_dtype(output_datatype)))


@onnx("STFT", since=17, static=(1, 3))
def stft(signal, frame_step, window=None, frame_length=None, *, onesided=1):
    """STFT(T1 signal, T2 frame_step, T1 window, T2 frame_length) -> T1; onesided."""
    step = static_ints(frame_step, "STFT frame_step")[0]
    if frame_length is not None:
        length = static_ints(frame_length, "STFT frame_length")[0]
    else:
        length = window.shape[0] if window is not None else signal.shape[-2]
    frames = 1 + (signal.shape[-2] - length) // step
    idx = np.arange(frames)[:, None] * step + np.arange(length)[None, :]
    framed = signal[:, idx]  # (batch, frames, length, 1|2)
    if window is not None:
        framed = framed * window.astype(signal.dtype)[:, None]
    return _dft(framed, length, 2, 0, onesided)
