"""Training-step time: jaxport's jitted optax step against PyTorch eager and torch.compile, on the same cores.

    python benchmarks/bench_train.py [model ...] [--runs 50] [--cores 1|N|all] [--markdown out.md]

A step is forward, loss, backward and an Adam update, on the same model, batch and
hyperparameters in all three. PyTorch eager runs `zero_grad`, the module, the loss,
`backward` and `optimizer.step()`; torch.compile compiles the module (inductor, the
default) and runs the same loop. jaxport runs `train_step(...)`, which jits the whole
step and donates the old state. Times are medians of --runs steps after warm-up, the
three taking turns in blocks of 10 steps; compile times are the first step's.
"""

from __future__ import annotations

import _setup  # first: pins the cores before JAX and torch start

# isort: split
import copy
import time

import jax
import numpy as np
import optax
import torch
from tests.support.zoo import SmallCNN

import jaxport
from _report import interleaved, publish


def _gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(vocab_size=1000, n_positions=64, n_embd=64, n_layer=2, n_head=4, use_cache=False,
                        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    ids = torch.randint(0, 1000, (4, 32), generator=torch.Generator().manual_seed(0))

    def torch_loss(module, batch):
        return module(batch[0], labels=batch[0]).loss

    def jax_loss(out, batch):
        labels = jax.numpy.asarray(batch[0])[:, 1:]
        return optax.softmax_cross_entropy_with_integer_labels(out["logits"][:, :-1], labels).mean()

    return GPT2LMHeadModel(config), (ids,), torch_loss, jax_loss


def _cnn():
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    batch = (torch.randn(16, 3, 32, 32, generator=g), torch.randint(0, 10, (16,), generator=g))

    def torch_loss(module, batch):
        return torch.nn.functional.cross_entropy(module(batch[0]), batch[1])

    def jax_loss(out, batch):
        return optax.softmax_cross_entropy_with_integer_labels(out, jax.numpy.asarray(batch[1])).mean()

    return SmallCNN(), batch, torch_loss, jax_loss


MODELS = {"gpt2": _gpt2, "cnn": _cnn}


def _torch_step(module, loss_fn, batch):
    optimizer = torch.optim.Adam(module.parameters(), lr=1e-3)

    def step():
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(module, batch)
        loss.backward()
        optimizer.step()
        return loss

    return step


def _first_call(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def bench(name: str, runs: int) -> dict:
    module, batch, torch_loss, jax_loss = MODELS[name]()
    eager_module, compiled_module = copy.deepcopy(module).train(), copy.deepcopy(module).train()
    eager = _torch_step(eager_module, torch_loss, batch)
    compiled = _torch_step(torch.compile(compiled_module), torch_loss, batch)

    start = time.perf_counter()
    model = jaxport.from_torch(module, (batch[0],), train=True)
    convert_s = time.perf_counter() - start
    step = jaxport.train.train_step(model, jax_loss, optax.adam(1e-3))
    jax_batch = tuple(np.asarray(t) for t in batch)
    holder = {"state": step.init(0)}

    def jaxport_step():
        holder["state"], metrics = step(holder["state"], jax_batch)
        return jax.block_until_ready(metrics["loss"])

    jax_compile = _first_call(jaxport_step)
    torch_compile = _first_call(compiled)
    jx, eager_t, compiled_t = interleaved([jaxport_step, eager, compiled], runs)
    return {
        "name": name, "convert": convert_s, "jax_compile": jax_compile, "torch_compile": torch_compile,
        "jax": jx.wall_s, "eager": eager_t.wall_s, "compiled": compiled_t.wall_s,
        "cpus": {"jax": jx.cpus, "eager": eager_t.cpus, "compiled": compiled_t.cpus},
    }


def table(rows: list[dict]) -> str:
    lines = [
        "| model | PyTorch eager step | torch.compile step | jaxport step | vs eager | vs torch.compile "
        "| CPUs: eager / compile / jaxport | conversion | first step: jaxport / torch.compile |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['name']} | {r['eager'] * 1e3:.2f} ms | {r['compiled'] * 1e3:.2f} ms | {r['jax'] * 1e3:.2f} ms "
            f"| {r['jax'] / r['eager']:.2f}x | {r['jax'] / r['compiled']:.2f}x "
            f"| {r['cpus']['eager']:.2f} / {r['cpus']['compiled']:.2f} / {r['cpus']['jax']:.2f} | {r['convert']:.2f} s "
            f"| {r['jax_compile']:.1f} s / {r['torch_compile']:.1f} s |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = _setup.parser(__doc__, runs=50)
    parser.add_argument("models", nargs="*", default=list(MODELS))
    args = parser.parse_args()
    rows = [bench(name, args.runs) for name in args.models]
    publish(table(rows), args.markdown,
            timing=f"Adam step, median of {args.runs} steps, the three taking turns in blocks of 10")


if __name__ == "__main__":
    main()
