"""`make gpu-check`: jaxport on a GPU, every entry point's parity first, then the forward and decode rows.

    python benchmarks/gpu_check.py [--device cuda|cpu] [--small] [--cores all] [--sections parity forward decode]
        [--runs 20] [--results benchmarks/results/gpu_check_cuda.jsonl]

Sized for one H100 in at most 8 minutes. Every row is appended to `--results` as it is made,
stamped (commit, date, machine, device, versions), so a run cut short keeps what it measured.

parity: models that live on `--device` (the test zoo's small configs), through each entry point,
against PyTorch on the same device, within a tolerance per check (a GPU's PyTorch computes
convolutions in TF32 by default, and so does the converted program):
- module: `from_torch` of the module on the device, its inputs there;
- pt2: `torch.export` on the device, saved, read back by jaxport's `.pt2` reader, converted;
- compile: `torch.compile(backend="jaxport")`, forward outputs and every parameter's gradient;
- causal_lm: `from_causal_lm` of a model on the device, greedy tokens against its `generate`;
- policy: `dtype=jnp.bfloat16` against the module run under `torch.autocast` on the device;
- verify: `jaxport.verify` of the module on the device;
- eager: in a fresh process, `jaxport.eager()` then `torch.accelerator` still names the device's
  accelerator, a backward pass on the device and `pin_memory` still work (pytorch/pytorch#161129).

forward: PyTorch eager against jaxport's jitted call (`jm(...)`), `frozen()` and
`torch.compile(backend="jaxport")`, batch 8 at real sizes (ResNet-50, ConvNeXt-T,
EfficientNet-B0, MobileNetV2, ViT-B/16, BERT-base: `bench_real_sizes`), calls interleaved.

decode: a Llama-3-8B-shaped model in bfloat16 (random weights, prompt 64, 64 new tokens) at
batch 1 and 32: jaxport's `generate` against transformers' `generate`, decode tokens/s.

`--device cpu --small` runs all three on the zoo's tiny configs in about a minute; `make test`
runs it (tests/test_gpu_check.py), so the script cannot rot where no GPU is.
The exit status is 1 when a parity check fails.
"""

from __future__ import annotations

import _setup  # first: pins the cores before JAX and torch start

# isort: split
import argparse
import contextlib
import copy
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
import torch
import torch.utils._pytree as pytree
from tests.support import zoo

import jaxport
from _report import interleaved, stamp
from jaxport.compare import compare, compare_all, first_output
from jaxport.frontends.pt2 import load_exported_program

RESULTS = os.path.join(os.path.dirname(__file__), "results", "gpu_check_{device}.jsonl")
SECTIONS = ("parity", "forward", "decode")
#: Parity models (the test zoo's), all of them on a GPU, a few with --small.
PARITY_MODELS = ("cnn", "resnet", "bert", "vit", "gpt2", "llama", "minilm")
SMALL_PARITY_MODELS = ("cnn", "bert")
#: Forward rows: bench_real_sizes' models, at batch 8 (the zoo's, at batch 2, with --small).
FORWARD_MODELS = ("resnet50", "convnext", "efficientnet_b0", "mobilenet_v2", "vit", "bert")
SMALL_FORWARD_MODELS = ("cnn", "bert")
#: Llama-3-8B's shape; --small: the zoo's tiny Llama.
LLAMA_8B = dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
                num_key_value_heads=8, vocab_size=128256, max_position_embeddings=8192, rope_theta=500000.0)
LLAMA_TINY = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, vocab_size=1000, max_position_embeddings=256)
PROMPT, NEW = 64, 64


def tolerance(device: torch.device, check: str) -> float:
    """Largest error allowed, relative to each output's largest magnitude."""
    if check == "policy":
        return 4e-2  # bfloat16 on both sides, rounded at different places
    return 1e-4 if device.type == "cpu" else 5e-3  # TF32 convolutions on a GPU, on both sides


def _leaves(output) -> list:
    if hasattr(output, "to_tuple"):
        output = output.to_tuple()
    return [x for x in pytree.tree_leaves(output) if isinstance(x, (torch.Tensor, jax.Array, np.ndarray))]


def _worst(actual, expected) -> tuple[float, str]:
    """The largest scaled error over every output, and what else is wrong (shapes, NaN, counts)."""
    checks = compare_all(_leaves(actual), _leaves(expected), per_tensor=True)
    problems = "; ".join(f"{c.name}: {c.problem}" for c in checks if c.problem)
    return max((c.scaled_error for c in checks), default=0.0), problems


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _on(device: torch.device, name: str):
    module, args, kwargs = zoo.MODELS[name]()
    moved = lambda value: pytree.tree_map(lambda t: t.to(device) if isinstance(t, torch.Tensor) else t, value)  # noqa: E731
    return module.to(device), moved(args), moved(kwargs)


# -- parity -------------------------------------------------------------------------------------


def parity_module(device, name):
    module, args, kwargs = _on(device, name)
    with torch.no_grad():
        expected = module(*args, **kwargs)
    return _worst(jaxport.from_torch(module, args, kwargs)(*args, **kwargs), expected)


def parity_pt2(device, name):
    module, args, kwargs = _on(device, name)
    with torch.no_grad():
        expected = module(*args, **kwargs)
    path = os.path.join(tempfile.mkdtemp(), "model.pt2")
    torch.export.save(torch.export.export(module, args, kwargs), path)
    model = jaxport.from_exported_program(load_exported_program(path))
    return _worst(model(*args, **kwargs), expected)


def parity_compile(device, name):
    module, args, kwargs = _on(device, name)
    reference = copy.deepcopy(module)
    torch._dynamo.reset()
    compiled = torch.compile(module, backend="jaxport")
    outputs = [first_output(f(*args, **kwargs)) for f in (compiled, reference)]
    weights = torch.randn(outputs[0].shape, generator=torch.Generator().manual_seed(1)).to(device)
    for output in outputs:
        (output.float() * weights).sum().backward()
    error, problems = _worst(outputs[0].detach(), outputs[1].detach())
    grads = [(p.grad, r.grad) for p, r in zip(module.parameters(), reference.parameters()) if r.grad is not None]
    scale = max(r.abs().max().item() for _, r in grads)
    gradient_error = max((p - r).abs().max().item() for p, r in grads) / scale
    return max(error, gradient_error), problems


def parity_causal_lm(device, small):
    module, (ids,), _ = zoo.llama()
    module = module.to(device)
    ids = ids[:, :8].to(device)
    expected = module.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=16, do_sample=False)
    lm = jaxport.from_causal_lm(module, max_length=32, max_batch=2)
    tokens = np.asarray(lm.generate(ids, max_new_tokens=16))
    same = np.array_equal(tokens, expected.cpu().numpy())
    return (0.0 if same else 1.0), "" if same else "greedy tokens differ from transformers'"


def parity_policy(device, name):
    module, args, kwargs = _on(device, name)
    with torch.no_grad(), torch.autocast(device.type, dtype=torch.bfloat16):
        expected = module(*args, **kwargs)
    model = jaxport.from_torch(module, args, kwargs, dtype=jnp.bfloat16)
    return _worst(model(*args, **kwargs), expected)


def parity_verify(device, name):
    module, args, kwargs = _on(device, name)
    report = jaxport.verify(module, args, kwargs)
    return max((c.scaled_error for c in report.outputs), default=0.0), "" if report.passed else str(report)[:300]


EAGER_BESIDE = """
import sys, torch
device = torch.device(sys.argv[1])
before = torch.accelerator.current_accelerator()
import jaxport
with jaxport.eager():
    on_jax = torch.ones(3, device="jax") * 2
assert on_jax.cpu().tolist() == [2.0, 2.0, 2.0], on_jax
after = torch.accelerator.current_accelerator()
assert (before is None and after.type == "jax") or after == before, (before, after)
layer = torch.nn.Linear(8, 8).to(device)
layer(torch.randn(4, 8, device=device)).sum().backward()  # pytorch/pytorch#161129 on CUDA
assert layer.weight.grad is not None
if device.type == "cuda":
    assert torch.ones(4).pin_memory(device).is_pinned(device)
print("ok", before, after)
"""


def parity_eager(device):
    done = subprocess.run([sys.executable, "-c", EAGER_BESIDE, str(device)], capture_output=True, text=True,
                          timeout=300)
    if done.returncode == 0:
        return 0.0, ""
    return 1.0, done.stderr.strip().splitlines()[-1][:300] if done.stderr.strip() else f"exit {done.returncode}"


def parity_rows(device, small) -> list[tuple[str, str, Callable]]:
    models = SMALL_PARITY_MODELS if small else PARITY_MODELS
    rows = [(check, name, lambda fn=fn, name=name: fn(device, name))
            for check, fn in (("module", parity_module), ("pt2", parity_pt2), ("compile", parity_compile))
            for name in models]
    rows += [("causal_lm", "llama", lambda: parity_causal_lm(device, small)),
             ("policy", "llama", lambda: parity_policy(device, "llama")),
             ("verify", models[0], lambda: parity_verify(device, models[0])),
             ("eager", "-", lambda: parity_eager(device))]
    return rows


# -- speed --------------------------------------------------------------------------------------


def forward_row(device, name, small, runs) -> dict:
    """eager, jaxport `jm(...)`, `frozen()` and torch.compile(backend="jaxport") on one model."""
    if small:
        module, args, kwargs = _on(device, name)
    else:
        from bench_real_sizes import MODELS, calibrate_batch_norms

        torch.manual_seed(0)
        module, kwargs = MODELS[name](8)
        calibrate_batch_norms(module, kwargs)
        module, args = module.eval().to(device), ()
        kwargs = {k: v.to(device) for k, v in kwargs.items()}
    row: dict = {"compile_s": {}}
    fns: dict[str, Callable] = {}

    def timed_first(label, fn):
        start = time.perf_counter()
        fn()
        row["compile_s"][label] = round(time.perf_counter() - start, 2)
        fns[label] = fn

    def eager():
        with torch.no_grad():
            module(*args, **kwargs)
        _synchronize(device)
    timed_first("eager", eager)
    model = jaxport.from_torch(module, args, kwargs)
    jax_args, jax_kwargs = pytree.tree_map(jaxport.interop.to_jax, (args, kwargs))
    timed_first("jaxport", lambda: jax.block_until_ready(model(*jax_args, **jax_kwargs)))
    frozen = model.frozen()
    timed_first("frozen", lambda: jax.block_until_ready(frozen(*jax_args, **jax_kwargs)))
    torch._dynamo.reset()
    compiled = torch.compile(module, backend="jaxport")

    def dynamo():
        with torch.no_grad():
            compiled(*args, **kwargs)
        _synchronize(device)
    timed_first("compile", dynamo)
    with torch.no_grad():
        reference = first_output(module(*args, **kwargs))
    row["jaxport_error"] = compare("jaxport", first_output(model(*jax_args, **jax_kwargs)), reference,
                                   per_tensor=True).scaled_error
    times = interleaved(list(fns.values()), runs, block=5)
    row["ms"] = {label: round(t.wall_s * 1e3, 3) for label, t in zip(fns, times)}
    row["ratio"] = {label: round(row["ms"][label] / row["ms"]["eager"], 3) for label in fns if label != "eager"}
    return row


def decode_rows(device, small, runs) -> list[dict]:
    import transformers

    torch.manual_seed(0)
    dtype = torch.bfloat16
    config = transformers.LlamaConfig(**(LLAMA_TINY if small else LLAMA_8B), torch_dtype=dtype)
    with torch.device(device):
        model = transformers.LlamaForCausalLM(config).to(dtype).eval()
    model.generation_config.eos_token_id = None  # every run makes all NEW tokens
    model.generation_config.pad_token_id = 0
    return [_decode_row(model, batch, runs) for batch in ((1, 2) if small else (1, 32))]


def _decode_row(model, batch: int, runs: int) -> dict:
    device = next(model.parameters()).device
    ids = torch.randint(3, model.config.vocab_size, (batch, PROMPT), generator=torch.Generator().manual_seed(batch))
    ids = ids.to(device)
    start = time.perf_counter()
    lm = jaxport.from_causal_lm(model, max_length=PROMPT + NEW, max_batch=batch)
    convert_s = time.perf_counter() - start
    jax_ids = np.asarray(ids.cpu(), dtype=np.int32)

    def ours(n):
        return np.asarray(lm.generate(jax_ids, max_new_tokens=n))

    def theirs(n):
        with torch.no_grad():
            return model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                  max_new_tokens=n).cpu().numpy()
    row = {"batch": batch, "convert_s": round(convert_s, 2), "tok_s": {}, "ttft_ms": {}}
    for label, fn in (("jaxport", ours), ("transformers", theirs)):
        fn(1), fn(NEW)  # compiled and warm
        first = min(_seconds(fn, 1) for _ in range(runs))
        full = min(_seconds(fn, NEW) for _ in range(runs))
        row["ttft_ms"][label] = round(first * 1e3, 2)
        row["tok_s"][label] = round(batch * (NEW - 1) / (full - first), 1)
    row["speedup"] = round(row["tok_s"]["jaxport"] / row["tok_s"]["transformers"], 2)
    return row


def _seconds(fn, *args) -> float:
    start = time.perf_counter()
    fn(*args)
    return time.perf_counter() - start


# -- the run ------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", help="the torch device the models live on (cuda, cpu)")
    parser.add_argument("--small", action="store_true", help="the zoo's tiny configs only (make test runs this)")
    parser.add_argument("--sections", nargs="+", choices=SECTIONS, default=list(SECTIONS))
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--results", help="append rows here (default benchmarks/results/gpu_check_<device>.jsonl)")
    _setup.add_cores_argument(parser)
    options = parser.parse_args(argv)
    device = torch.device(options.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        sys.exit("--device cuda: this PyTorch sees no GPU (use --device cpu --small to check the script)")
    path = options.results or RESULTS.format(device=device.type)
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    where = {"device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
             "jax_devices": [str(d) for d in jax.devices()], "small": options.small}
    failures = 0

    def record(row: dict) -> None:
        row.update(where, stamp=stamp())
        with open(path, "a") as f:
            f.write(json.dumps(row) + "\n")
        print(json.dumps({k: v for k, v in row.items() if k not in ("stamp", "jax_devices")}), flush=True)

    if "parity" in options.sections:
        for check, name, run in parity_rows(device, options.small):
            start = time.perf_counter()
            try:
                error, problems = run()
            except Exception as e:  # noqa: BLE001 - a check that raises is a failed row, the run goes on
                error, problems = float("nan"), f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"
                traceback.print_exc()
            passed = not problems and error <= tolerance(device, check)
            failures += not passed
            record({"section": "parity", "check": check, "model": name, "error": error, "passed": passed,
                    "problem": problems, "seconds": round(time.perf_counter() - start, 2)})
    runs = 3 if options.small else options.runs
    if "forward" in options.sections:
        for name in SMALL_FORWARD_MODELS if options.small else FORWARD_MODELS:
            record({"section": "forward", "model": name, "batch": 2 if options.small else 8,
                    **forward_row(device, name, options.small, runs)})
    if "decode" in options.sections:
        for row in decode_rows(device, options.small, min(runs, 3)):
            record({"section": "decode", "model": "llama-tiny" if options.small else "llama-3-8b-shape",
                    "dtype": "bfloat16", "prompt": PROMPT, "new": NEW, **row})
    print(f"{failures} parity check(s) failed; rows in {path}")
    return 1 if failures else 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
