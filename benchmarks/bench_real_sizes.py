"""Models at the sizes people run: jaxport against PyTorch eager, torch.compile and onnxruntime.

    python benchmarks/bench_real_sizes.py [--cores 1|N|all] [--models bert resnet50 ...] [--batches 1 8]
        [--runs 20] [--results benchmarks/results/real_sizes_1core.jsonl] [--rerun] [--markdown out.md]

Hugging Face models built from configs at realistic widths (random weights, eval mode,
float32), each taking at least 10 ms per call in PyTorch eager on this CPU. Backends, all
pinned to the same `--cores` (`_setup`), in one process per (model, batch), their calls
interleaved:

- eager: the module under `torch.no_grad()`;
- compile: `torch.compile(module)` (default mode);
- onnxruntime: `torch.onnx.export(dynamo=True)` then onnxruntime's CPU provider;
- torchax: `torchax.extract_jax(module)` under `jax.jit` (parameters as arguments), the
  other library that runs PyTorch modules on JAX; its PyPI releases (0.0.11 to 0.0.13) fail
  to import under torch 2.13, so it is measured from its GitHub source (`make bench-torchax`
  installs it, pinned to a commit; left out, with "-" in its column, when not installed);
- jaxport: `jaxport.from_torch` then the jitted function (parameters as arguments);
- jaxport frozen: `JaxModel.frozen()`, parameters folded into the program as constants, so
  XLA does parameter-only work (kernel layouts, weight normalization) once, when it compiles.

Each (model, batch) appends one JSON line to `--results` (by default one file per core count)
as it finishes, stamped with commit, date, machine, versions and thread settings, so the run
can be stopped and resumed (`--rerun` measures again); the table is made from the results file,
under a line naming every commit and setting its rows come from. "jaxport error" is the
largest difference from PyTorch eager's main output, relative to that output's largest
magnitude; "CPUs" is each backend's CPU time per call over its wall time (at most the cores
given: more would mean a backend escaped the pinning).
"""

from __future__ import annotations

import _setup  # first: pins the cores before JAX and torch start

# isort: split
import argparse
import copy
import json
import os
import re
import sys
import tempfile
import time

import numpy as np
import torch
import transformers
from tests.support.zoo import calibrate_batch_norms

from _report import interleaved, measured_apart, publish, stamp
from jaxport.compare import compare, first_output

RESULTS = os.path.join(os.path.dirname(__file__), "results", "real_sizes_{cores}core.jsonl")
BACKENDS = ("eager", "compile", "onnxruntime", "torchax", "jaxport", "jaxport_frozen")


def _text(model, batch, length=128, vocab=30000):
    ids = torch.randint(3, vocab, (batch, length), generator=torch.Generator().manual_seed(batch))
    return model, {"input_ids": ids}


def _image(model, batch, size=224):
    return model, {"pixel_values": torch.randn(batch, 3, size, size, generator=torch.Generator().manual_seed(batch))}


def bert(batch):
    config = transformers.BertConfig(num_hidden_layers=4)  # BERT-base width: 768, 12 heads, MLP 3072
    return _text(transformers.BertModel(config, add_pooling_layer=False), batch)


def gpt2(batch):
    config = transformers.GPT2Config(n_layer=6, use_cache=False)  # GPT-2 small width: 768, 12 heads
    return _text(transformers.GPT2Model(config), batch, vocab=50000)


def llama(batch):
    config = transformers.LlamaConfig(hidden_size=1024, intermediate_size=2816, num_hidden_layers=6,
                                      num_attention_heads=16, num_key_value_heads=4, vocab_size=32000,
                                      use_cache=False)
    return _text(transformers.LlamaModel(config), batch)


def mixtral(batch):
    config = transformers.MixtralConfig(hidden_size=1024, intermediate_size=1792, num_hidden_layers=4,
                                        num_attention_heads=16, num_key_value_heads=4, num_local_experts=8,
                                        num_experts_per_tok=2, vocab_size=32000, use_cache=False)
    return _text(transformers.MixtralModel(config), batch)


def t5(batch):
    config = transformers.T5Config(d_model=512, d_ff=2048, num_layers=6, num_heads=8, use_cache=False)  # t5-small
    model, inputs = _text(transformers.T5Model(config), batch, vocab=32000)
    inputs["decoder_input_ids"] = inputs["input_ids"][:, :32]
    return model, inputs


def vit(batch):
    config = transformers.ViTConfig(num_hidden_layers=6)  # ViT-B/16 width at 224 px, half the layers
    return _image(transformers.ViTModel(config, add_pooling_layer=False), batch)


def swin(batch):
    return _image(transformers.SwinModel(transformers.SwinConfig()), batch)  # Swin-T, 224 px


def convnext(batch):
    return _image(transformers.ConvNextModel(transformers.ConvNextConfig()), batch)  # ConvNeXt-T, 224 px


def resnet18(batch):
    config = transformers.ResNetConfig(layer_type="basic", depths=[2, 2, 2, 2], hidden_sizes=[64, 128, 256, 512])
    return _image(transformers.ResNetModel(config), batch)


def resnet50(batch):
    return _image(transformers.ResNetModel(transformers.ResNetConfig()), batch)


def mobilenet_v2(batch):
    return _image(transformers.MobileNetV2Model(transformers.MobileNetV2Config()), batch)


def efficientnet_b0(batch):
    config = transformers.EfficientNetConfig(image_size=224, width_coefficient=1.0, depth_coefficient=1.0,
                                             hidden_dim=1280)  # B0 (the default config is B7)
    model = transformers.EfficientNetModel(config)
    # Hugging Face's init draws BatchNorm scales from N(0, 0.02), so activations shrink ~50x per
    # block into float32's subnormal range (1e-30 at the output), where nothing is realistic;
    # torchvision's init (He-normal convolutions, unit scales) keeps every layer's activations
    # of order 0.1-10, as in a trained model
    for module in model.modules():
        if isinstance(module, torch.nn.Conv2d):
            torch.nn.init.kaiming_normal_(module.weight, mode="fan_out")
        elif isinstance(module, torch.nn.BatchNorm2d):
            torch.nn.init.ones_(module.weight)
            torch.nn.init.zeros_(module.bias)
    return _image(model, batch)


def whisper_encoder(batch):
    config = transformers.WhisperConfig(d_model=512, encoder_layers=6, encoder_attention_heads=8,
                                        decoder_attention_heads=8, encoder_ffn_dim=2048)  # whisper-base's encoder
    features = torch.randn(batch, 80, 3000, generator=torch.Generator().manual_seed(batch))
    return transformers.WhisperModel(config).get_encoder(), {"input_features": features}


def wav2vec2(batch):
    config = transformers.Wav2Vec2Config(num_hidden_layers=6)  # base width, half the layers
    audio = torch.randn(batch, 16000, generator=torch.Generator().manual_seed(batch))  # one second
    return transformers.Wav2Vec2Model(config), {"input_values": audio}


def clip(batch):
    model = transformers.CLIPModel(transformers.CLIPConfig())  # ViT-B/32 and its text tower
    _, image = _image(model, batch)
    _, text = _text(model, batch, length=77, vocab=49000)
    return model, {**text, **image}


MODELS = {f.__name__: f for f in (bert, gpt2, llama, mixtral, t5, vit, swin, clip, whisper_encoder, wav2vec2, convnext,
                                   resnet18, resnet50, mobilenet_v2, efficientnet_b0)}


def measure(name: str, batch: int, runs: int, backends, device: str = "cpu") -> dict:
    import jax

    import jaxport

    torch.manual_seed(0)
    module, inputs = MODELS[name](batch)
    calibrate_batch_norms(module, MODELS[name](max(batch, 8))[1])
    module = module.eval()
    row: dict = {"model": name, "batch": batch, "params_m": sum(p.numel() for p in module.parameters()) / 1e6}
    fns, setup = {}, {}
    with torch.no_grad():
        reference = first_output(module(**inputs)).numpy()
        row["output_max"] = float(np.abs(reference).max())
        # on a GPU, PyTorch's backends run there (and are waited for); jaxport converts the
        # CPU module and runs on JAX's default device
        torch_module = module if device == "cpu" else copy.deepcopy(module).to(device)
        torch_inputs = {k: v.to(device) for k, v in inputs.items()}
        sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)

        def eager():
            torch_module(**torch_inputs)
            sync()
        fns["eager"] = eager
        if "compile" in backends:
            _add_backend("compile", _compile, (torch_module, torch_inputs, sync), row, fns, setup)
        if "onnxruntime" in backends:
            _add_backend("onnxruntime", _onnxruntime, (module, inputs), row, fns, setup)
    if "torchax" in backends:
        _add_torchax(module, inputs, reference, row, fns, setup)
    jaxport_backends = [b for b in ("jaxport", "jaxport_frozen") if b in backends]
    if jaxport_backends:
        start = time.perf_counter()
        converted = jaxport.from_torch(module, (), inputs)
        row["jaxport_convert_s"] = time.perf_counter() - start
        jinputs = {k: jaxport.interop.to_jax(v) for k, v in inputs.items()}
    for backend in jaxport_backends:
        start = time.perf_counter()
        call = converted if backend == "jaxport" else converted.frozen()
        out = jax.block_until_ready(call(**jinputs))
        setup[backend] = time.perf_counter() - start + (row["jaxport_convert_s"] if backend == "jaxport" else 0)
        row[f"{backend}_error"] = compare(backend, first_output(out), reference).scaled_error
        fns[backend] = lambda call=call: jax.block_until_ready(call(**jinputs))
    with torch.no_grad():
        times = interleaved(list(fns.values()), runs, block=5)
    row["ms"] = {backend: t.wall_s * 1e3 for backend, t in zip(fns, times)}
    row["cpus"] = {backend: round(t.cpus, 3) for backend, t in zip(fns, times)}
    row["setup_s"] = setup
    return row


def _add_backend(name, build, args, row, fns, setup) -> None:
    """`fns[name]` from `build(*args)` and its setup time; a failure is the row's note on that
    backend, so the row still measures the others."""
    start = time.perf_counter()
    try:
        fns[name] = build(*args)
    except Exception as e:
        message = re.sub(r"\x1b\[[0-9;]*m", "", str(e)).splitlines()[0][:160]  # the exporter colours its text
        row[name] = f"failed: {type(e).__name__}: {message}"
        return
    setup[name] = time.perf_counter() - start


def _compile(torch_module, torch_inputs, sync):
    compiled = torch.compile(torch_module)
    compiled(**torch_inputs)

    def call():
        compiled(**torch_inputs)
        sync()
    return call


def _onnxruntime(module, inputs):
    import onnxruntime

    path = os.path.join(tempfile.mkdtemp(), "model.onnx")
    torch.onnx.export(module, (), kwargs=inputs, dynamo=True, verbose=False).save(path)
    session = onnxruntime.InferenceSession(path, _setup.ort_options(), providers=["CPUExecutionProvider"])
    feeds = {i.name: inputs[i.name].numpy() for i in session.get_inputs()}
    session.run(None, feeds)
    return lambda: session.run(None, feeds)


def _add_torchax(module, inputs, reference, row, fns, setup) -> None:
    """torchax's own path from a module to a jitted JAX function, if it is installed."""
    import jax

    try:
        import torchax
    except ImportError:
        row["torchax"] = "not installed"
        return
    start = time.perf_counter()
    try:
        states, func = torchax.extract_jax(module)
        # return_dict=False: a tuple of arrays, which jit can return (a ModelOutput is not a pytree here)
        jitted = jax.jit(lambda states, kwargs: func(states, (), {**kwargs, "return_dict": False}))
        tinputs = {k: jax.numpy.asarray(v.numpy()) for k, v in inputs.items()}
        out = jax.block_until_ready(jitted(states, tinputs))
    except Exception as e:  # a row still measures the others
        row["torchax"] = f"failed: {type(e).__name__}: {str(e).splitlines()[0][:160]}"
        return
    setup["torchax"] = time.perf_counter() - start
    row["torchax_error"] = compare("torchax", first_output(out), reference).scaled_error
    fns["torchax"] = lambda: jax.block_until_ready(jitted(states, tinputs))


def read(path: str) -> dict:
    rows = {}
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                row = json.loads(line)
                rows[(row["model"], row["batch"])] = row
    return rows


def _error(row: dict, key: str) -> str:
    return f"{row[key]:.0e}" if key in row else "-"


def table(rows: dict, models, batches) -> str:
    lines = ["| model | params (M) | batch | PyTorch eager (ms) | torch.compile | onnxruntime | torchax | jaxport "
             "| jaxport error | jaxport frozen | frozen error | CPUs: eager, compile, onnxruntime, torchax, jaxport, "
             "frozen |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for name in models:
        for batch in batches:
            row = rows.get((name, batch))
            if row is None:
                continue
            if "error" in row:
                lines.append(f"| {name} | | {batch} | failed: {row['error']} | | | | | | | | |")
                continue
            ms = row["ms"]
            ratio = {b: f"{ms[b] / ms['eager']:.2f}x" if b in ms else
                     "failed" if str(row.get(b, "")).startswith("failed") else "-" for b in BACKENDS}
            cpus = ", ".join(f"{row['cpus'][b]:.2f}" if b in row.get("cpus", {}) else "-" for b in BACKENDS)
            lines.append(f"| {name} | {row['params_m']:.0f} | {batch} | {ms['eager']:.1f} | {ratio['compile']} | "
                         f"{ratio['onnxruntime']} | {ratio['torchax']} | **{ratio['jaxport']}** | {_error(row, 'jaxport_error')} | "
                         f"**{ratio['jaxport_frozen']}** | {_error(row, 'jaxport_frozen_error')} | {cpus} |")
    return "\n".join(lines)


def main() -> None:
    parser = _setup.parser(__doc__, runs=20)
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--backends", nargs="+", default=list(BACKENDS), choices=BACKENDS)
    parser.add_argument("--results", default=RESULTS.format(cores=_setup.THREADS))
    parser.add_argument("--rerun", action="store_true", help="measure again what the results file holds")
    parser.add_argument("--report", action="store_true",
                        help="measure nothing: the table of what the results file holds for --models and --batches")
    parser.add_argument("--timeout", type=float, default=1200, help="seconds per (model, batch)")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"],
                        help="where PyTorch's backends run (jaxport runs on JAX's default device)")
    parser.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
    opts = parser.parse_args()
    if opts.worker:
        row = measure(opts.worker[0], int(opts.worker[1]), opts.runs, opts.backends, opts.device)
        row["device"] = opts.device if opts.device == "cpu" else torch.cuda.get_device_name()
        row["stamp"] = stamp()
        print(json.dumps(row))
        return
    done = read(opts.results)
    for name in [] if opts.report else opts.models:
        for batch in opts.batches:
            if (name, batch) in done and not opts.rerun:
                continue
            command = [sys.executable, __file__, "--worker", name, str(batch), "--runs", str(opts.runs),
                       "--device", opts.device, "--cores", str(_setup.THREADS), "--backends", *opts.backends]
            row = measured_apart(command, {"model": name, "batch": batch}, opts.results, opts.timeout)
            done[(name, batch)] = row
            print(table({(name, batch): row}, [name], [batch]).splitlines()[-1], flush=True)
    rows = read(opts.results)
    shown = [rows[(m, b)] for m in opts.models for b in opts.batches if (m, b) in rows]
    publish(table(rows, opts.models, opts.batches), opts.markdown,
            f"median of {opts.runs} interleaved calls; onnxruntime and torch.compile otherwise at their defaults",
            stamps=[row["stamp"] for row in shown if "stamp" in row])


if __name__ == "__main__":
    main()
