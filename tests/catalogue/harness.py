"""One (task, model type) of transformers' catalogue through jaxport, stage by stage.

    build    the model from its shrunk default config (seed 0, eval, float32) and PyTorch's
             forward on seeded inputs: the reference
    export   jaxport.frontends.torch_export.export(model, (), inputs)
    convert  jaxport.from_exported_program on that program, run on the same inputs, compared;
             then the conversion time: a second, warm jaxport.from_torch(model, kwargs=inputs)
    eager    the same model (a copy made before exporting) and inputs moved to device="jax"
             under jaxport.eager(), run, compared
    generate causal LMs only: jaxport.from_causal_lm on another copy, greedy generation of
             NEW_TOKENS tokens after a left-padded batch of prompts, token for token against
             transformers' own `generate`

`check` runs them and returns one result row; the sweep (`tests/catalogue/sweep.py`) calls it in a
subprocess per model and `tests/catalogue/test_catalogue.py` calls it directly.
"""

from __future__ import annotations

import copy
import inspect
import math
import time
import traceback
from collections.abc import Callable, Collection, Mapping
from typing import Any

import numpy as np

from tests.catalogue import shrink
from tests.support import zoo
from tests.support.numeric import compare_values

# task -> the auto mapping in transformers.models.auto.modeling_auto that lists its model types
# task -> the Auto class that builds its models (`from_config`, as a user would)
AUTO_CLASSES = {
    "causal-lm": "AutoModelForCausalLM",
    "sequence-classification": "AutoModelForSequenceClassification",
    "image-classification": "AutoModelForImageClassification",
    "seq2seq-lm": "AutoModelForSeq2SeqLM",
    "speech-seq2seq": "AutoModelForSpeechSeq2Seq",
    "audio-classification": "AutoModelForAudioClassification",
}
TASKS = {
    "causal-lm": "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES",
    "sequence-classification": "MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES",
    "image-classification": "MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES",
    "seq2seq-lm": "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES",
    "speech-seq2seq": "MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES",
    "audio-classification": "MODEL_FOR_AUDIO_CLASSIFICATION_MAPPING_NAMES",
}
STAGES = ("build", "export", "convert", "eager", "generate")
GENERATING_TASKS = ("causal-lm",)


def task_stages(task: str) -> tuple[str, ...]:
    """The stages a task's models run: generate only for the tasks that generate."""
    return tuple(s for s in STAGES if s != "generate" or task in GENERATING_TASKS)
AUDIO_TASKS = ("audio-classification", "speech-seq2seq")
BATCH = 2
SEQ = 8  # tokens per row; the second row's last PAD of them are padding
PAD = 2
DECODER_SEQ = 6
NEW_TOKENS = 8  # generated after the SEQ-token prompts
AUDIO_SAMPLES = 4000  # raw waveforms: 0.25 s at 16 kHz, a dozen wav2vec2 frames
AUDIO_FRAMES = 64  # spectrogram frames where the config does not fix them
#: Each compared tensor: max |got - ref| <= RTOL[dtype] * max(FLOOR, max |finite ref|); integer and
#: boolean tensors exactly.
RTOL = {"float64": 1e-4, "float32": 1e-4, "bfloat16": 2e-2, "float16": 1e-2}
#: A main output whose largest value is below this compares nothing (a model whose activations
#: have vanished): the row fails, as "degenerate".
FLOOR = 1e-3
ERROR_CHARS = 300


def mapping(task: str) -> dict:
    from transformers.models.auto import modeling_auto

    return getattr(modeling_auto, TASKS[task])


def model_types(task: str) -> list[str]:
    return sorted(mapping(task))


def model_class(task: str, model_type: str):
    import transformers

    name = mapping(task)[model_type]
    if isinstance(name, (tuple, list)):
        name = name[0]
    return getattr(transformers, name)


def short_error(e: BaseException) -> str:
    """Exception type and the first line of its message, truncated."""
    lines = [line.strip() for line in str(e).strip().splitlines() if line.strip()]
    while len(lines) > 1 and lines[0].endswith(":"):  # "Validation error for ...:" says little alone
        lines[:2] = [f"{lines[0]} {lines[1]}"]
    text = f"{type(e).__name__}: {lines[0]}" if lines else type(e).__name__
    return text[:ERROR_CHARS]


# -- inputs --------------------------------------------------------------------------------------


def _tree(config) -> list:
    """The config and its sub-configs, breadth first."""
    from transformers import PretrainedConfig

    out, queue = [], [config]
    while queue:
        c = queue.pop(0)
        out.append(c)
        queue += [v for v in vars(c).values() if isinstance(v, PretrainedConfig)]
    return out


def _find(config, *names, default=None):
    for c in _tree(config):
        for name in names:
            value = getattr(c, name, None)
            if value is not None:
                return value
    return default


def _first(value):
    return value[0] if isinstance(value, (list, tuple)) else value


def _forward_params(model) -> set[str]:
    return set(inspect.signature(model.forward).parameters)


def _token_ids(config, generator, shape) -> Any:
    """Random ids from the vocabulary, avoiding every special token id the config names."""
    import torch

    vocab = _find(config, "vocab_size", default=shrink.VOCAB)
    special = shrink._token_ids(config.to_dict(), set())
    allowed = torch.tensor([i for i in range(vocab) if i not in special])
    return allowed[torch.randint(len(allowed), shape, generator=generator)]


def text_inputs(config, model, generator) -> dict:
    import torch

    ids = _token_ids(config, generator, (BATCH, SEQ))
    mask = torch.ones_like(ids)
    mask[1, SEQ - PAD:] = 0
    eos = _first(_find(config, "eos_token_id"))
    pad = _first(_find(config, "pad_token_id"))
    if eos is not None:  # each row ends with end-of-sequence (BART's classifier pools there)
        ids[0, SEQ - 1] = eos
        ids[1, SEQ - PAD - 1] = eos
    if pad is not None:
        ids[1, SEQ - PAD:] = pad
    inputs = {model.main_input_name: ids}
    if "attention_mask" in _forward_params(model):
        inputs["attention_mask"] = mask
    return inputs


def decoder_inputs(config, generator) -> dict:
    ids = _token_ids(config, generator, (BATCH, DECODER_SEQ))
    start = _first(_find(config, "decoder_start_token_id", "bos_token_id", "pad_token_id"))
    if start is not None:
        ids[:, 0] = start
    return {"decoder_input_ids": ids}


def image_inputs(config, model, generator) -> dict:
    import torch

    size = _find(config, "image_size", default=shrink.IMAGE)
    h, w = (size, size) if isinstance(size, int) else tuple(size)[-2:]
    channels = _find(config, "num_channels", default=3)
    return {model.main_input_name: torch.randn(BATCH, channels, h, w, generator=generator)}


def _codebook_rows(config, inputs: dict, generator) -> dict:
    """MusicGen's decoder: one row of ids per codebook of each sequence, [BATCH × codebooks, SEQ]."""
    codebooks = _find(config, "num_codebooks")
    return {**inputs, "input_ids": _token_ids(config, generator, (BATCH * codebooks, SEQ))}


def _text_and_codes(config, inputs: dict, generator) -> dict:
    """Kyutai's speech-to-text: each step a text token and one audio code per codebook,
    [BATCH, SEQ, 1 + codebooks]."""
    import torch

    codes = torch.randint(_find(config, "codebook_vocab_size"), (BATCH, SEQ, _find(config, "num_codebooks")),
                          generator=generator)
    return {**inputs, "input_ids": torch.cat([inputs["input_ids"][..., None], codes], dim=-1)}


def _channel_codes(config, inputs: dict, generator) -> dict:
    """Dia's decoder: one audio code per channel each step, [BATCH, DECODER_SEQ, channels]."""
    import torch

    decoder = config.decoder_config
    codes = torch.randint(decoder.vocab_size, (BATCH, DECODER_SEQ, decoder.num_channels), generator=generator)
    codes[:, 0] = decoder.bos_token_id
    return {**inputs, "decoder_input_ids": codes}


def _patches(config, inputs: dict, generator) -> dict:
    """SigLIP 2 (NaFlex): images as rows of patches, [BATCH, patches, channels × patch²], with each
    image's patch grid (`spatial_shapes`) and a mask of the patches that hold image (the second
    image is a column of patches narrower, the rest padding)."""
    import torch

    pixels = inputs["pixel_values"]
    patch = _find(config, "patch_size")
    grid = pixels.shape[-1] // patch
    rows = pixels.unfold(2, patch, patch).unfold(3, patch, patch)  # [B, C, grid, grid, p, p]
    rows = rows.permute(0, 2, 3, 4, 5, 1).reshape(BATCH, grid * grid, -1)
    shapes = torch.tensor([[grid, grid], [grid, grid - 1]])
    mask = torch.zeros(BATCH, grid * grid, dtype=torch.long)
    for i, (h, w) in enumerate(shapes.tolist()):
        mask[i, : h * w] = 1
    return {"pixel_values": rows, "pixel_attention_mask": mask, "spatial_shapes": shapes}


#: Models whose inputs the generic ones above do not cover: {model_type: (the layout, reason,
#: make)}; `make(config, inputs, generator)` turns the generic inputs into the model's, tried first.
LAYOUTS: dict[str, tuple[str, str, Callable]] = {
    "musicgen": ("input_ids [batch × codebooks, tokens]", "a decoder over parallel codebooks: each row "
                 "of ids is one codebook of one sequence", _codebook_rows),
    "musicgen_melody": ("input_ids [batch × codebooks, tokens]", "as MusicGen", _codebook_rows),
    "kyutai_speech_to_text": ("input_ids [batch, tokens, 1 + codebooks]", "each step carries a text token "
                              "and one audio code per codebook", _text_and_codes),
    "dia": ("decoder_input_ids [batch, tokens, channels]", "its decoder reads one audio code per channel "
            "each step", _channel_codes),
    "siglip2": ("pixel_values [batch, patches, channels × patch²], pixel_attention_mask, spatial_shapes",
                "it takes images cut into patches, with each image's grid (NaFlex)", _patches),
}


def audio_candidates(config, generator, names: list[str]) -> list[dict]:
    """Audio inputs in the layouts a model might take, for the reference forward to choose from:
    raw waveforms (batch, samples) and spectrograms (batch, features, frames) or (batch, frames,
    features) with the feature and frame counts the config implies, under each of `names`."""
    import torch

    features = [v for v in (_find(config, k) for k in (
        "num_mel_bins", "feature_projection_input_dim", "input_feat_per_channel", "input_feat_size",
        "feature_size", "input_dim", "n_mels")) if isinstance(v, int)]
    channels = _find(config, "input_channels", default=1)
    if isinstance(channels, int) and channels > 1 and _find(config, "input_feat_per_channel"):
        features.insert(0, channels * _find(config, "input_feat_per_channel"))
    frames = []
    positions = _find(config, "max_source_positions")
    if isinstance(positions, int):
        frames += [2 * positions, positions]
    length = _find(config, "max_length")
    if isinstance(length, int):
        frames.append(length)
    frames.append(AUDIO_FRAMES)
    spectrograms = [s for f in dict.fromkeys(features) for t in dict.fromkeys(frames)
                    for s in ((BATCH, f, t), (BATCH, t, f))]
    out = []
    for name in names:
        raw = [(BATCH, AUDIO_SAMPLES)]
        shapes = spectrograms + raw if name == "input_features" else raw + spectrograms
        out += [{name: torch.randn(*shape, generator=generator)} for shape in shapes]
    return out


# -- outputs -------------------------------------------------------------------------------------


def tensors(out, windowed: set[str] | None = None) -> dict[str, Any]:
    """Every tensor of a model's output by its path (`logits`, `past_key_values.layers.0.keys`):
    ModelOutput fields and dicts by key, tuples and lists by index, a transformers cache (any
    class of transformers' named *Cache*, and cache_utils' layers) by its attributes that hold
    tensors. jaxport hands a converted model's cache back as nested dicts and lists of the same
    names (`{"layers": [{"keys": ..., "values": ...}]}`), and the eager frontend the cache object
    itself, so the three sides name their tensors alike. The keys and values of sliding-window
    layers go into `windowed` when given (see `compare`)."""
    import torch

    found: dict[str, Any] = {}
    seen: set[int] = set()
    sliding: list[str] = []

    def walk(value, path: str) -> None:
        if isinstance(value, torch.Tensor) or type(value).__module__.startswith("jax"):
            found[path] = value
            return
        if id(value) in seen:
            return
        seen.add(id(value))
        prefix = f"{path}." if path else ""
        if isinstance(value, Mapping):
            items = value.items()
        elif isinstance(value, (tuple, list)):
            items = enumerate(value)
        elif _is_cache(value):
            items = vars(value).items()
            if getattr(value, "is_sliding", False) is True:  # a layer; a cache's is_sliding is a list
                sliding.append(prefix)
        else:
            return
        for key, item in items:
            walk(item, f"{prefix}{key}")

    walk(out, "")
    if windowed is not None:
        windowed.update(path for path in found for layer in sliding
                        if path.startswith(layer) and path[len(layer):] in ("keys", "values"))
    return found


def as_numpy(x) -> np.ndarray:
    import torch

    if isinstance(x, torch.Tensor):
        x = x.detach().cpu()
        return x.float().numpy() if x.dtype in (torch.bfloat16, torch.float16) else x.numpy()
    return np.asarray(x)


def _dtype(x) -> str:
    return str(x.dtype).removeprefix("torch.")


def _is_cache(value) -> bool:
    """A transformers cache (a class of transformers' named *Cache*) or one of cache_utils' layers."""
    module = type(value).__module__
    return module == "transformers.cache_utils" or (module.startswith("transformers.") and "Cache" in type(value).__name__)


def magnitude(x) -> float:
    """The largest |value| of an array among its finite values (0 if it has none)."""
    array = as_numpy(x)
    finite = array[np.isfinite(array)] if array.dtype.kind in "fc" else array
    return float(np.abs(finite).max()) if finite.size else 0.0


def compare_one(name: str, ref, got) -> dict:
    """One tensor against its reference: the same shape, NaN and infinities in the same places,
    max |got - ref| <= RTOL[dtype] * max(FLOOR, max |finite ref|) (integers and booleans: equal).
    `error` is that max over the scale, to set against RTOL."""
    ref_np, got_np = as_numpy(ref), as_numpy(got)
    if ref_np.shape != got_np.shape:
        return {"status": "mismatch", "error": f"{name}: shape {list(got_np.shape)}, expected {list(ref_np.shape)}"}
    scale = magnitude(ref_np)
    rtol = RTOL.get(_dtype(ref), 0.0)
    check = compare_values(name, got_np, ref_np, rtol=0.0, atol=rtol * max(scale, FLOOR))
    error = math.inf if check.problem else check.max_abs / max(scale, FLOOR)
    if not check.passed:
        what = check.problem or (f"max error {check.max_abs:.3g} > {rtol:g} × {max(scale, FLOOR):.3g}" if rtol
                                 else f"values differ by up to {check.max_abs:.3g} (must be equal)")
        return {"status": "mismatch", "error": f"{name}: {what}", "max_error": error}
    return {"status": "ok", "max_error": error}


def compare(reference: dict[str, Any], got: dict[str, Any], main: str, windowed: Collection[str] = ()) -> dict:
    """Every output tensor against the reference's of the same path (see `tensors`), each to its
    own tolerance (`compare_one`). The result names the first that fails, in the reference's
    order; `max_error` is the largest scaled error over all of them, `compared` their count.
    A main output below FLOOR in magnitude makes the result "degenerate": it tests nothing.

    `windowed` names the keys and values of sliding-window layers: PyTorch's dynamic layer keeps
    the window's last tokens, while a converted program (transformers' exporter traces such a
    layer as a full one, its mask applying the window) keeps every token, so those are compared
    on their last slots, as many as PyTorch's; `windowed` in the result counts them."""
    result: dict[str, Any] = {"shape": list(np.shape(as_numpy(got[main]))) if main in got else None,
                              "compared": len(reference), "max_error": 0.0}
    missing = [name for name in reference if name not in got]
    extra = [name for name in got if name not in reference]
    if missing or extra:
        what = (f"no {', '.join(missing[:3])}" if missing else "") + ("; " if missing and extra else "") + (
            f"{', '.join(extra[:3])} more than the reference" if extra else "")
        return {**result, "status": "mismatch", "error": f"outputs differ: {what}"}
    failure = None
    for name, ref in reference.items():
        ours = got[name]
        if name in windowed:
            kept, ours = np.shape(as_numpy(ref))[-2], as_numpy(ours)
            if ours.ndim >= 2 and ours.shape[-2] > kept:
                ours = ours[..., ours.shape[-2] - kept:, :]
                result["windowed"] = result.get("windowed", 0) + 1
        one = compare_one(name, ref, ours)
        result["max_error"] = max(result["max_error"], one.get("max_error", math.inf))
        failure = failure or (one if one["status"] != "ok" else None)
    if failure:
        return {**result, "status": "mismatch", "error": failure["error"]}
    if as_numpy(reference[main]).dtype.kind == "f" and (scale := magnitude(reference[main])) < FLOOR:
        return {**result, "status": "degenerate",
                "error": f"{main}: the reference's largest value is {scale:.2g}, below {FLOOR:g}: it tests nothing"}
    return {**result, "status": "ok"}


# -- the stages ----------------------------------------------------------------------------------


def model_config(cls, config):
    """The part of a composite config that the task's model class takes (Qwen3_5ForCausalLM: the
    text config, MusicgenForCausalLM: the decoder's), as AutoModel*.from_config picks it."""
    wanted = getattr(cls, "config_class", None)
    if isinstance(wanted, type) and not isinstance(config, wanted):
        return next((c for c in _tree(config) if isinstance(c, wanted)), config)
    return config


def build(task: str, model_type: str):
    """(model, inputs, reference, facts): the shrunk model on its seeded inputs; the reference
    is every tensor of its output by path (`tensors`)."""
    import torch

    cls = model_class(task, model_type)
    config = model_config(cls, shrink.shrink_config(model_type, task))
    torch.manual_seed(0)
    model = cls._from_config(config).float().eval()  # what AutoModel*.from_config calls
    _realistic_weights(model)
    _redraw_zero_weights(model)
    generator = torch.Generator().manual_seed(0)
    main = model.main_input_name
    params = _forward_params(model)
    if main == "input_ids":
        candidates = [text_inputs(config, model, generator)]
        if any(n in params for n in ("input_features", "input_values")):
            # an audio LM: text alone, else text with audio features
            candidates += [{**candidates[0], **audio} for audio in audio_candidates(
                config, generator, [n for n in ("input_features", "input_values") if n in params])]
    elif task == "image-classification":
        candidates = [image_inputs(config, model, generator)]
    elif task in AUDIO_TASKS:
        candidates = audio_candidates(config, generator, [main])
    else:
        candidates = [text_inputs(config, model, generator)]
    if task in ("seq2seq-lm", "speech-seq2seq") and getattr(config, "is_encoder_decoder", False) and (
            "decoder_input_ids" in params):
        extra = decoder_inputs(config, generator)
        candidates = [{**c, **extra} for c in candidates]
    if model_type in LAYOUTS:
        candidates = [LAYOUTS[model_type][2](config, c, generator) for c in candidates] + candidates
    first_error = None
    for inputs in candidates:
        try:
            with torch.no_grad():
                reference = model(**inputs)
            break
        except Exception as e:  # the model rejects this layout: try the next one
            first_error = first_error or e
    else:
        raise first_error
    if zoo.calibrate_batch_norms(model, inputs):
        with torch.no_grad():
            reference = model(**inputs)
    windowed: set[str] = set()
    found = {name: value.detach().clone() for name, value in tensors(reference, windowed).items()}
    if not found:
        raise TypeError(f"{type(reference).__name__} output has no tensor")
    main = next(iter(found))
    facts = {
        "class": cls.__name__,
        "inputs": {k: list(v.shape) for k, v in inputs.items()},
        "output": main,
        "output_shape": list(found[main].shape),
        "outputs": len(found),
        **({"windowed": sorted(windowed)} if windowed else {}),
    }
    return model, inputs, found, facts


def _realistic_weights(model) -> None:
    """Weights that keep activations at a trained model's magnitudes, so that comparing outputs
    tests something: every linear and convolution layer drawn with variance 1 / fan-in (seeded),
    every BatchNorm, GroupNorm, LayerNorm and InstanceNorm at scale 1 and shift 0. Hugging Face's
    N(0, 0.02) initialization, BatchNorm scales included, shrinks a CNN's output to 1e-9 at these
    widths."""
    import torch
    from torch import nn

    norms = (nn.modules.batchnorm._NormBase, nn.GroupNorm, nn.LayerNorm)
    layers = (nn.Linear, nn.modules.conv._ConvNd)
    generator = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for module in model.modules():
            weight = getattr(module, "weight", None)
            if not isinstance(weight, torch.Tensor) or not weight.numel():
                continue
            if isinstance(module, norms):
                weight.fill_(1.0)
                if getattr(module, "bias", None) is not None:
                    module.bias.zero_()
            elif isinstance(module, layers) and weight.is_floating_point():
                fan_in = weight[0].numel() if isinstance(module, nn.Linear) or not getattr(
                    module, "transposed", False) else weight.shape[1] * weight[0, 0].numel()
                weight.copy_(torch.randn(weight.shape, generator=generator) / math.sqrt(fan_in))


def _redraw_zero_weights(model) -> None:
    """Weight matrices a model initializes to zero (some MoE routers) and an embedding's padding
    row (zero as Hugging Face initializes it) get seeded random values: every expert would
    otherwise score alike, at every token or at the padding positions (JetMoE's classifier,
    right-padded), and which of tied scores topk picks is not defined (PyTorch's CPU kernel and
    XLA pick differently), so no two implementations need agree."""
    import torch

    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for parameter in model.parameters():
            if parameter.ndim >= 2 and parameter.numel() and not parameter.any():
                parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.02)
        for module in model.modules():
            row = getattr(module, "padding_idx", None)
            if isinstance(module, torch.nn.Embedding) and row is not None and not module.weight[row].any():
                module.weight[row] = torch.randn(module.weight.shape[1], generator=generator) * 0.02


def check(task: str, model_type: str, stages=STAGES,
          emit: Callable[[str, dict], None] | None = None) -> dict:
    """Run the stages; returns {"task", "model", <facts>, "stages": {stage: result}}. `emit(stage,
    result)` is called as each stage starts (result {"status": "running"}) and ends."""
    import torch

    import jaxport
    from jaxport.frontends import torch_export

    emit = emit or (lambda stage, result: None)
    stages = ("build",) + tuple(s for s in task_stages(task) if s in stages and s != "build")
    row: dict[str, Any] = {"task": task, "model": model_type, "stages": {}}
    try:
        row["class"] = model_class(task, model_type).__name__
    except AttributeError as e:  # a class this transformers does not export: the build says so
        row["class"] = str(e)[:ERROR_CHARS]
    results = row["stages"]

    def run(stage: str, fn: Callable[[], dict | None]) -> bool:
        emit(stage, {"status": "running"})
        start = time.perf_counter()
        try:
            result = fn() or {"status": "ok"}
        except Exception as e:
            result = {"status": "error", "error": short_error(e)}
            if stage == "build":
                result["where"] = _where(e)
                result["default_config"] = _default_config_builds(task, model_type)
        result["seconds"] = round(time.perf_counter() - start, 2)
        results[stage] = result
        emit(stage, result)
        return result["status"] in ("ok", "mismatch", "degenerate")

    state: dict[str, Any] = {}

    def do_build():
        model, inputs, reference, facts = build(task, model_type)
        state.update(model=model, inputs=inputs, reference=reference)
        for stage in ("eager", "generate"):  # copies made before exporting, which may patch the model
            if stage in stages:
                state[stage] = copy.deepcopy(model)
        row.update(facts)
        emit("facts", facts)  # for the sweep, should a later stage never come back
        row["ref_max_abs"] = magnitude(reference[row["output"]])

    def do_export():
        state["ep"] = torch_export.export(state["model"], (), state["inputs"])

    def do_convert():
        jm = jaxport.from_exported_program(state["ep"], name=type(state["model"]).__name__)
        result = compare(state["reference"], tensors(jm(**state["inputs"])), row["output"], row.get("windowed", ()))
        # Warm timings: jaxport's own part (from the exported program), and the whole of
        # `from_torch`, which runs torch.export first.
        start = time.perf_counter()
        jaxport.from_exported_program(state["ep"], name=type(state["model"]).__name__)
        result["jaxport_seconds"] = round(time.perf_counter() - start, 3)
        start = time.perf_counter()
        try:
            jaxport.from_torch(state["model"], kwargs=state["inputs"])
        except Exception as e:  # the exported program converts, jaxport's own capture of it must too
            return {**result, "status": "error", "error": "from_torch: " + short_error(e)}
        result["from_torch_seconds"] = round(time.perf_counter() - start, 3)
        return result

    def do_eager():
        with jaxport.eager(), torch.no_grad():
            module = state["eager"].to("jax")
            out = module(**{k: v.to("jax") for k, v in state["inputs"].items()})
            return compare(state["reference"], tensors(out), row["output"], row.get("windowed", ()))

    def do_generate():
        return generate(state["generate"])

    ok = {"build": run("build", do_build)}
    for stage, fn, needs in (("export", do_export, "build"), ("convert", do_convert, "export"),
                             ("eager", do_eager, "build"), ("generate", do_generate, "build")):
        if stage not in stages:
            continue
        if not ok.get(needs):
            results[stage] = {"status": "skipped"}
            emit(stage, results[stage])
            ok[stage] = False
            continue
        ok[stage] = run(stage, fn)
    return row


def generation_prompts(config) -> tuple[Any, Any]:
    """(input_ids, attention_mask) [BATCH, SEQ] of seeded prompts, the second row left-padded by
    PAD tokens, as transformers pads for generation."""
    import torch

    ids = _token_ids(config, torch.Generator().manual_seed(2), (BATCH, SEQ))
    mask = torch.ones_like(ids)
    mask[1, :PAD] = 0
    ids[1, :PAD] = _first(_find(config, "pad_token_id", default=0))
    return ids, mask


def generate(model) -> dict:
    """Greedy generation through jaxport.from_causal_lm against transformers' `generate` on the
    same left-padded prompts: the tokens must be equal."""
    import torch

    import jaxport

    ids, mask = generation_prompts(model.config)
    pad = _first(_find(model.config, "pad_token_id", default=0))
    # converted first: a model jaxport refuses is refused by name whatever transformers makes of
    # these prompts (MusicGen's generate wants its rows of codebooks)
    try:
        lm = jaxport.from_causal_lm(model, max_length=SEQ + NEW_TOKENS, max_batch=BATCH)
    except jaxport.MaxBatchError as e:
        return _generate_row_by_row(model, ids, mask, pad, reason=str(e))
    try:
        with torch.no_grad():
            want = model.generate(ids, attention_mask=mask, do_sample=False, max_new_tokens=NEW_TOKENS,
                                  pad_token_id=pad).numpy()
    except Exception as e:
        return {"status": "error", "error": "transformers' generate: " + short_error(e)}
    got = np.asarray(lm.generate(ids, mask, max_new_tokens=NEW_TOKENS, pad_token_id=pad))
    return _compare_tokens(got, want)


def _generate_row_by_row(model, ids, mask, pad, reason: str) -> dict:
    """A model jaxport generates one row at a time (RWKV, whose batched decoding in transformers
    mixes the rows): each prompt alone, unpadded, against transformers' `generate` of it alone."""
    import torch

    import jaxport

    lm = jaxport.from_causal_lm(model, max_length=SEQ + NEW_TOKENS, max_batch=1)
    for row in range(ids.shape[0]):
        prompt = ids[row:row + 1, int(mask[row].argmax()):]
        ones = torch.ones_like(prompt)
        with torch.no_grad():
            want = model.generate(prompt, attention_mask=ones, do_sample=False, max_new_tokens=NEW_TOKENS,
                                  pad_token_id=pad).numpy()
        got = np.asarray(lm.generate(prompt, ones, max_new_tokens=NEW_TOKENS, pad_token_id=pad))
        result = {**_compare_tokens(got, want, prompt_length=prompt.shape[1]), "rows": "one at a time", "reason": reason}
        if result["status"] != "ok":
            return {**result, "error": f"prompt {row} alone: {result['error']}"}
    return result


def _compare_tokens(got, want, prompt_length: int = SEQ) -> dict:
    result = {"shape": list(got.shape), "new_tokens": int(got.shape[1] - prompt_length)}
    if got.shape != want.shape:
        return {**result, "status": "mismatch", "error": f"{list(got.shape)} tokens, transformers {list(want.shape)}"}
    wrong = np.argwhere(got != want)
    if len(wrong):
        row, col = wrong[0]
        return {**result, "status": "mismatch", "error": f"row {row}, token {col - prompt_length} of the new ones: "
                f"{got[row, col]}, transformers {want[row, col]}"}
    return {**result, "status": "ok"}


def _default_config_builds(task: str, model_type: str) -> str:
    """Whether the unshrunk default config constructs the model (on the meta device, no weights):
    tells a shrinking problem from a model whose default config is itself broken."""
    import torch
    from transformers import AutoConfig

    try:
        cls = model_class(task, model_type)
        config = model_config(cls, AutoConfig.for_model(model_type))
        with torch.device("meta"):
            cls._from_config(config)
    except Exception as e:
        return "fails: " + short_error(e)
    return "builds"


def _where(e: BaseException) -> str:
    """The innermost frame in transformers, for build errors (what rule or input it tripped)."""
    frames = [f for f in traceback.extract_tb(e.__traceback__) if "/transformers/" in f.filename]
    if not frames:
        return ""
    f = frames[-1]
    return f"{f.filename.split('/transformers/')[-1]}:{f.lineno} in {f.name}"
