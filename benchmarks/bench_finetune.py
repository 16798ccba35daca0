"""PyTorch training loops as people write them, on JAX: a `torch.optim` step eagerly on the jax
device and under `torch.compile(backend="jaxport")`, against PyTorch CPU eager, on the same cores.

    python benchmarks/bench_finetune.py [--models mlp bert-base] [--runs N] [--cores 1|N|all]
        [--results benchmarks/results/finetune_1core.jsonl] [--markdown out.md]

The loop is the one a fine-tuning script runs: `zero_grad`, forward, loss, `backward`,
`torch.optim.AdamW.step()`, the scheduler's `step()`; the model in training mode (BERT's dropout
on). Models:

- mlp: an MLP 256-1024-1024-10 at batch 128, cross-entropy, AdamW(lr=1e-2) under
  CosineAnnealingLR;
- bert-base: `BertForSequenceClassification` at bert-base-uncased's sizes (12 layers, hidden
  768; built from its config, random weights), batch 8, sequence 128, two labels, AdamW(lr=2e-5,
  weight_decay=0.01) under transformers' linear warm-up schedule.

Sides, each with its own copy of the model from the same weights:

- eager: PyTorch on the CPU;
- jax eager: the same loop with the model and batch `.to("jax")` inside `jaxport.eager()`;
- compiled: `torch.compile(model, backend="jaxport")` and `torch.compile(optimizer.step,
  backend="jaxport")`, PyTorch's recipe for a compiled optimizer.

"ms" is the median wall time of `--runs` steps after warm-up (the sides taking turns, one step
at a time at BERT's size), "cpu ms" the process's CPU time per step; "first step s" includes
each side's compilation. Each model is measured in a process of its own; rows are appended to
`--results`, stamped with commit, date, machine and versions.
"""

from __future__ import annotations

import _setup  # first: pins the cores before JAX and torch start

# isort: split
import argparse
import copy
import json
import os
import sys
import time

import torch

import jaxport
from _report import interleaved, measured_apart, publish, stamp

RESULTS = os.path.join(os.path.dirname(__file__), "results", "finetune_{cores}core.jsonl")


def _mlp():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 1024),
                                torch.nn.ReLU(), torch.nn.Linear(1024, 10))
    generator = torch.Generator().manual_seed(1)
    batch = (torch.randn(128, 256, generator=generator), torch.randint(0, 10, (128,), generator=generator))

    def loss(module, inputs, labels):
        return torch.nn.functional.cross_entropy(module(inputs), labels)

    def optimizer(params):
        opt = torch.optim.AdamW(params, lr=1e-2)
        return opt, torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=1000)

    return model, batch, loss, optimizer


def _bert_base():
    from transformers import (
        BertConfig,
        BertForSequenceClassification,
        get_linear_schedule_with_warmup,
    )

    torch.manual_seed(0)
    config = BertConfig(num_labels=2)  # bert-base-uncased's sizes: 12 layers, hidden 768, 12 heads
    model = BertForSequenceClassification(config)
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(0, config.vocab_size, (8, 128), generator=generator)
    batch = (ids, torch.ones_like(ids), torch.randint(0, 2, (8,), generator=generator))

    def loss(module, input_ids, attention_mask, labels):
        return module(input_ids=input_ids, attention_mask=attention_mask, labels=labels).loss

    def optimizer(params):
        opt = torch.optim.AdamW(params, lr=2e-5, weight_decay=0.01)
        return opt, get_linear_schedule_with_warmup(opt, num_warmup_steps=10, num_training_steps=1000)

    return model, batch, loss, optimizer


MODELS = {"mlp": (_mlp, 30, 10), "bert-base": (_bert_base, 5, 1)}  # builder, default runs, block


def _loop(module, batch, loss_fn, make_optimizer, compile_step: bool = False):
    opt, schedule = make_optimizer(module.parameters())
    step = torch.compile(opt.step, backend="jaxport") if compile_step else opt.step

    def train_step():
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(module, *batch)
        loss.backward()
        step()
        schedule.step()
        return float(loss.detach())  # the loss read back, as a loop that logs it does

    return train_step


def measure(name: str, runs: int, block: int) -> dict:
    build = MODELS[name][0]
    model, batch, loss_fn, make_optimizer = build()
    model.train()
    eager = _loop(copy.deepcopy(model), batch, loss_fn, make_optimizer)
    compiled = _loop(torch.compile(copy.deepcopy(model), backend="jaxport"), batch, loss_fn, make_optimizer,
                     compile_step=True)
    with jaxport.eager():
        on_jax = _loop(copy.deepcopy(model).to("jax"), tuple(t.to("jax") for t in batch), loss_fn, make_optimizer)

    def jax_eager():
        with jaxport.eager():
            return on_jax()

    sides = {"eager": eager, "jax eager": jax_eager, "compiled": compiled}
    first = {}
    for side, fn in sides.items():
        start = time.perf_counter()
        fn()
        first[side] = round(time.perf_counter() - start, 2)
    # The eager calls compile once a signature is seen twice, and trace a float once it is seen
    # with a second value: warm up past both before timing.
    for fn in sides.values():
        for _ in range(3):
            fn()
    times = interleaved(list(sides.values()), runs, block=block)
    return {"model": name, "runs": runs,
            "ms": {side: round(t.wall_s * 1e3, 3) for side, t in zip(sides, times)},
            "cpu_ms": {side: round(t.cpu_s * 1e3, 3) for side, t in zip(sides, times)},
            "first_step_s": first, "parameters": sum(p.numel() for p in model.parameters())}


def table(rows: list[dict]) -> str:
    lines = ["| model | PyTorch eager ms | jax eager ms | jax eager / eager | compiled (jaxport) ms | "
             "compiled / eager | cpu ms: eager / jax eager / compiled | first step s: jax eager / compiled |",
             "|---|---:|---:|---:|---:|---:|---|---|"]
    for row in rows:
        if "error" in row:
            lines.append(f"| {row['model']} | {row['error']} | | | | | | |")
            continue
        ms, cpu, first = row["ms"], row["cpu_ms"], row["first_step_s"]
        lines.append(f"| {row['model']} | {ms['eager']:.1f} | {ms['jax eager']:.1f} | "
                     f"{ms['jax eager'] / ms['eager']:.2f}x | {ms['compiled']:.1f} | "
                     f"{ms['compiled'] / ms['eager']:.2f}x | {cpu['eager']:.1f} / {cpu['jax eager']:.1f} / "
                     f"{cpu['compiled']:.1f} | {first['jax eager']:.1f} / {first['compiled']:.1f} |")
    return "\n".join(lines)


def main() -> None:
    parser = _setup.parser(__doc__, runs=0)
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--results", default=RESULTS.format(cores=_setup.THREADS))
    parser.add_argument("--timeout", type=float, default=3600, help="seconds per model")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    opts = parser.parse_args()
    if opts.worker:
        _, default_runs, block = MODELS[opts.worker]
        row = measure(opts.worker, opts.runs or default_runs, block)
        row["stamp"] = stamp()
        print(json.dumps(row))
        return
    rows = []
    for name in opts.models:
        command = [sys.executable, __file__, "--worker", name, "--runs", str(opts.runs),
                   "--cores", str(_setup.THREADS)]
        row = measured_apart(command, {"model": name}, opts.results, opts.timeout)
        rows.append(row)
        print(table([row]).splitlines()[-1], flush=True)
    publish(table(rows), opts.markdown, "one training step (zero_grad, forward, backward, AdamW, scheduler); "
            "median of the steps timed, the sides taking turns", stamps=[row["stamp"] for row in rows])


if __name__ == "__main__":
    main()
