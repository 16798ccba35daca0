"""Pooling window geometry shared by the ATen and ONNX lowerings."""

from __future__ import annotations


def taps_within_reach(size: int, low_pad: int, kernel: int, dilation: int = 1) -> int:
    """How many of a pooling window's `kernel` taps can land on the input. Every window
    starts at -low_pad or later, so taps from the one that reaches past the first
    size + low_pad positions on see only padding, the reduction's identity: cutting them
    changes no result. EfficientNet's head, AvgPool2d(1280, ceil_mode=True) over 7x7,
    otherwise has reduce_window visit 1280x1280 taps per output (1.8 s a call)."""
    if size + low_pad <= 0:
        return kernel
    return min(kernel, -(-(size + low_pad - 1) // dilation) + 1)
