"""Eager dispatch overhead: PyTorch code on `device="jax"` against PyTorch eager and bare JAX.

    python benchmarks/bench_eager.py [--runs 200] [--cores 1|N|all] [--markdown out.md]

Each row times one workload three ways, on the same cores: PyTorch eager on the CPU,
the same torch code on JaxTensors under `jaxport.eager()`, and the equivalent
jax.numpy calls run eagerly (the floor a tensor subclass over JAX can approach:
each op is one JAX dispatch). Per-op figures divide by the ATen ops the workload
issues. Results are blocked until ready.
"""

from __future__ import annotations

import _setup  # first: pins the cores before JAX and torch start

# isort: split

import jax
import jax.numpy as jnp
import torch

import jaxport
from _report import publish
from jaxport.cli.demo import median_seconds as _median_seconds


def median_seconds(fn, runs: int, repeats: int = 5) -> float:
    """The lowest of `repeats` medians of `runs` calls: a microsecond-scale median still moves
    by 2x between rounds on a shared machine (thread wake-ups of JAX's async dispatch)."""
    return min(_median_seconds(fn, runs) for _ in range(repeats))


def _block(out):
    if isinstance(out, jaxport.JaxTensor):
        out.jax().block_until_ready()
    elif isinstance(out, jax.Array):
        out.block_until_ready()
    return out


def workloads():
    """(name, ATen ops per call, torch fn, its inputs, jax fn, its inputs)."""
    torch.manual_seed(0)
    small = torch.randn(8, 8)
    a, b = torch.randn(64, 64), torch.randn(64, 64)
    mlp = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
    x = torch.randn(16, 64)
    w1, b1, w2, b2 = (jnp.asarray(p.detach().numpy()) for p in mlp.parameters())

    def jax_mlp(v):
        return jnp.maximum(v @ w1.T + b1, 0) @ w2.T + b2

    return [
        ("x * 2 + 1 (8x8)", 2, lambda t: t * 2 + 1, (small,), lambda v: v * 2 + 1, (jnp.asarray(small.numpy()),)),
        ("matmul 64x64", 1, torch.matmul, (a, b), jnp.matmul, (jnp.asarray(a.numpy()), jnp.asarray(b.numpy()))),
        ("MLP 64-128-10, batch 16", 5, mlp, (x,), jax_mlp, (jnp.asarray(x.numpy()),)),
    ]


def time_workload(torch_fn, torch_args, jax_fn, jax_args, runs: int) -> tuple[float, float, float]:
    """Median seconds per call: PyTorch eager, the torch code on JaxTensors, bare JAX."""
    with torch.no_grad():
        torch_s = median_seconds(lambda: torch_fn(*torch_args), runs)
        with jaxport.eager():
            model = torch_fn.to("jax") if isinstance(torch_fn, torch.nn.Module) else torch_fn
            on_jax = tuple(t.to("jax") for t in torch_args)
            eager_s = median_seconds(lambda: _block(model(*on_jax)), runs)
    jax_s = median_seconds(lambda: _block(jax_fn(*jax_args)), runs)
    return torch_s, eager_s, jax_s


class _NoWorkTensor(torch.Tensor):
    """A wrapper subclass whose every op returns a fresh wrapper without computing anything."""

    @staticmethod
    def __new__(cls, size):
        return torch.Tensor._make_wrapper_subclass(cls, size, dtype=torch.float32, device="meta")

    __torch_function__ = torch._C._disabled_torch_function_impl

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        return cls(args[0].shape)


def floors(runs: int) -> list[tuple[str, float]]:
    """What one op costs at the least: PyTorch's round trip into a Python tensor subclass,
    and one call of an already compiled JAX function (what jaxport's hot path makes of an op)."""
    no_work = _NoWorkTensor((8, 8))
    x = jnp.ones((8, 8))
    doubled = jax.jit(lambda v: v * 2)
    return [
        ("PyTorch to a Python tensor subclass and back (no work)", median_seconds(lambda: no_work * 2, runs)),
        ("one call of a compiled JAX function (x * 2)", median_seconds(lambda: doubled(x), runs)),
    ]


def main() -> None:
    parser = _setup.parser(__doc__, runs=200)
    opts = parser.parse_args()
    lines = [
        "| workload | ATen ops | PyTorch eager (µs) | jaxport eager (µs) | bare JAX eager (µs) | jaxport µs/op | JAX µs/op |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, n_ops, torch_fn, torch_args, jax_fn, jax_args in workloads():
        torch_s, eager_s, jax_s = time_workload(torch_fn, torch_args, jax_fn, jax_args, opts.runs)
        lines.append(
            f"| {name} | {n_ops} | {torch_s * 1e6:.1f} | {eager_s * 1e6:.1f} | {jax_s * 1e6:.1f} | "
            f"{eager_s * 1e6 / n_ops:.1f} | {jax_s * 1e6 / n_ops:.1f} |"
        )
        print(lines[-1], flush=True)
    lines += ["", "| floor per op | µs |", "|---|---:|"]
    for name, seconds in floors(opts.runs):
        lines.append(f"| {name} | {seconds * 1e6:.1f} |")
        print(lines[-1], flush=True)
    publish("\n".join(lines), opts.markdown, f"the lowest of 5 medians of {opts.runs} runs")


if __name__ == "__main__":
    main()
