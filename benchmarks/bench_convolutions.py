"""Grouped and depthwise convolutions: how each formulation runs on this CPU, on the same cores.

    python benchmarks/bench_convolutions.py [--runs 30] [--cores 1|N|all] [--markdown out.md]

The layer shapes of the CNNs people run (MobileNetV2, EfficientNet-B0, ConvNeXt, ResNeXt,
ResNet), float32, each through PyTorch's `conv2d`, XLA's own grouped convolution
(`lax.conv_general_dilated` with `feature_group_count`), and the formulation jaxport picks
(`jaxport.ops._convolution.convolve`: shifted multiply-adds for depthwise convolutions, or
its compiled kernel where that pays, one convolution per group for other grouped ones, on
CPU). For depthwise layers the shifted multiply-adds (the portable formulation) and the
compiled kernel (`jaxport.ops._native`, when built) are also timed on their own. Times are medians of interleaved
calls; the ratio is to PyTorch's time (lower is faster); "max error" is jaxport's largest
difference from PyTorch relative to the output's magnitude.
"""

from __future__ import annotations

import _setup  # first: pins the cores before JAX and torch start

# isort: split

import jax
import jax.numpy as jnp
import numpy as np
import torch
from jax import lax

from _report import interleaved, publish
from jaxport.compare import compare
from jaxport.ops import _native
from jaxport.ops._convolution import convolve

#: name: (batch, channels in, size, kernel, stride, groups, channels out)
CASES = {
    "MobileNetV2 depthwise 3x3, 112 px": (1, 32, 112, 3, 1, 32, 32),
    "MobileNetV2 depthwise 3x3 stride 2": (1, 144, 112, 3, 2, 144, 144),
    "MobileNetV2 depthwise 3x3, 56 px": (1, 144, 56, 3, 1, 144, 144),
    "depthwise 3x3, 14 px, batch 8": (8, 384, 14, 3, 1, 384, 384),
    "EfficientNet depthwise 5x5, batch 8": (8, 240, 28, 5, 1, 240, 240),
    "EfficientNet depthwise 5x5, 7 px": (1, 1152, 7, 5, 1, 1152, 1152),
    "ConvNeXt depthwise 7x7, 56 px": (1, 96, 56, 7, 1, 96, 96),
    "ConvNeXt depthwise 7x7, 14 px, batch 8": (8, 384, 14, 7, 1, 384, 384),
    "ConvNeXt depthwise 7x7, 7 px, batch 8": (8, 768, 7, 7, 1, 768, 768),
    "grouped 3x3, 8 groups": (1, 256, 28, 3, 1, 8, 256),
    "ResNeXt grouped 3x3, 32 groups, batch 8": (8, 256, 28, 3, 1, 32, 256),
    "regular 3x3, 56 px": (1, 64, 56, 3, 1, 1, 64),
}


def measure(case: tuple, runs: int) -> dict:
    batch, channels, size, kernel, stride, groups, out_channels = case
    rng = np.random.default_rng(0)
    x = rng.standard_normal((batch, channels, size, size), np.float32)
    w = rng.standard_normal((out_channels, channels // groups, kernel, kernel), np.float32)
    pad = kernel // 2
    tx, tw = torch.from_numpy(x), torch.from_numpy(w)
    jx, jw = jnp.asarray(x), jnp.asarray(w)
    geometry = dict(strides=(stride, stride), padding=[(pad, pad)] * 2, lhs_dilation=None, rhs_dilation=None)
    grouped = jax.jit(lambda a, b: lax.conv_general_dilated(
        a, b, geometry["strides"], geometry["padding"], dimension_numbers=("NCHW", "OIHW", "NCHW"),
        feature_group_count=groups, precision=lax.Precision.HIGHEST))

    def compiled():  # each formulation compiled ahead, so that all are called the same way
        return jax.jit(lambda a, b: convolve(a, b, groups=groups, **geometry)).lower(jx, jw)

    lowered = compiled()
    uses_kernel = _native.DEPTHWISE_TARGET in lowered.as_text()
    chosen = lowered.compile()
    depthwise = groups == channels == out_channels
    portable = kernel = None
    if depthwise:
        with _native.portable():  # traced now, so the kernel stays out
            portable = compiled().compile()
    if depthwise and _native.loaded():
        thresholds = _native.KERNEL_TAPS
        _native.KERNEL_TAPS = 1  # the kernel on every depthwise layer, not only where it pays
        try:
            kernel = compiled().compile()
        finally:
            _native.KERNEL_TAPS = thresholds
    fns = [lambda: torch.nn.functional.conv2d(tx, tw, stride=stride, padding=pad, groups=groups),
           lambda: jax.block_until_ready(grouped(jx, jw)),
           lambda: jax.block_until_ready(chosen(jx, jw))]
    if portable is not None:
        fns.append(lambda: jax.block_until_ready(portable(jx, jw)))
    if kernel is not None:
        fns.append(lambda: jax.block_until_ready(kernel(jx, jw)))
    with torch.no_grad():
        reference = torch.nn.functional.conv2d(tx, tw, stride=stride, padding=pad, groups=groups).numpy()
        check = compare("y", chosen(jx, jw), reference)
        error = check.max_abs / max(1.0, check.scale)
        if kernel is not None:
            kernel_check = compare("y", kernel(jx, jw), reference)
            error = max(error, kernel_check.max_abs / max(1.0, kernel_check.scale))
        times = interleaved(fns, runs)
    torch_t = times[0].wall_s
    return {"torch_ms": torch_t * 1e3, "xla_ratio": times[1].wall_s / torch_t,
            "jaxport_ratio": times[2].wall_s / torch_t, "picked": "kernel" if uses_kernel else "lax",
            "shifts_ratio": times[3].wall_s / torch_t if len(times) > 3 else None,
            "kernel_ratio": times[4].wall_s / torch_t if len(times) > 4 else None,
            "error": error, "cpus": max(t.cpus for t in times)}


def main() -> None:
    parser = _setup.parser(__doc__, runs=30)
    opts = parser.parse_args()
    lines = ["| layer (NCHW, float32) | PyTorch (ms) | XLA grouped conv / PyTorch | shifted multiply-adds / PyTorch "
             "| compiled kernel / PyTorch | jaxport (its pick) / PyTorch | max error | most CPUs any used |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]

    def ratio(value):
        return "-" if value is None else f"{value:.2f}x"
    for name, case in CASES.items():
        row = measure(case, opts.runs)
        lines.append(f"| {name} | {row['torch_ms']:.2f} | {ratio(row['xla_ratio'])} | {ratio(row['shifts_ratio'])} | "
                     f"{ratio(row['kernel_ratio'])} | {ratio(row['jaxport_ratio'])} ({row['picked']}) | "
                     f"{row['error']:.1e} | {row['cpus']:.2f} |")
    publish("\n".join(lines), opts.markdown, f"median of {opts.runs} interleaved calls")


if __name__ == "__main__":
    main()
