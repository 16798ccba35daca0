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
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from tests.catalogue import shrink
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
RTOL = 1e-4  # max |got - ref| <= RTOL * max(1, max |ref|)
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


def first_tensor(out, path: str = ""):
    """(name, value) of the first tensor leaf: logits / last_hidden_state of a ModelOutput (or of
    jaxport's dict of one), or None."""
    import torch

    if isinstance(out, torch.Tensor) or type(out).__module__.startswith("jax"):
        return path, out
    if isinstance(out, Mapping):
        items = list(out.items())
    elif isinstance(out, (tuple, list)):
        items = [(f"{path}[{i}]" if path else str(i), v) for i, v in enumerate(out)]
    else:
        return None
    for key, value in items:
        found = first_tensor(value, str(key))
        if found is not None:
            return found
    return None


def main_output(out, name: str):
    """(name, value) of the output the reference's first tensor came from: the field `name` of a
    ModelOutput or of jaxport's dict of one, else the first tensor leaf."""
    if isinstance(out, Mapping) and name in out:
        found = first_tensor(out[name], name)
        if found is not None:
            return found
    return first_tensor(out)


def as_numpy(x) -> np.ndarray:
    import torch

    if isinstance(x, torch.Tensor):
        return x.detach().cpu().float().numpy() if x.is_floating_point() else x.detach().cpu().numpy()
    return np.asarray(x)


def compare(ref: np.ndarray, got: np.ndarray) -> dict:
    """`got` against the reference by `jaxport.compare` on the values (in float64, dtypes not
    judged): NaN and infinities in the same places, max |got - ref| <= RTOL * max(1, max |finite
    ref|). `max_error` is that max, or inf where NaN or an infinity is misplaced."""
    result = {"shape": list(got.shape)}
    if ref.shape != got.shape:
        return {**result, "status": "mismatch", "error": f"shape {list(got.shape)}, expected {list(ref.shape)}"}
    check = compare_values("output", got, ref, rtol=RTOL, atol=0.0, per_tensor=True)
    result["max_error"] = math.inf if check.problem else check.max_abs
    if not check.passed:
        tol = RTOL * max(1.0, check.scale)
        return {**result, "status": "mismatch", "error": check.problem or f"max error {check.max_abs:.3g} > {tol:.3g}"}
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
    """(model, inputs, reference output, facts): the shrunk model on its seeded inputs."""
    import torch

    cls = model_class(task, model_type)
    config = model_config(cls, shrink.shrink_config(model_type, task))
    torch.manual_seed(0)
    model = cls._from_config(config).float().eval()  # what AutoModel*.from_config calls
    _redraw_zero_matrices(model)
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
    found = first_tensor(reference)
    if found is None:
        raise TypeError(f"{type(reference).__name__} output has no tensor")
    facts = {
        "class": cls.__name__,
        "inputs": {k: list(v.shape) for k, v in inputs.items()},
        "output": found[0],
        "output_shape": list(found[1].shape),
    }
    return model, inputs, as_numpy(found[1]), facts


def _redraw_zero_matrices(model) -> None:
    """Weight matrices a model initializes to zero (some MoE routers) get seeded random values:
    every expert would otherwise score alike, and which of tied scores topk picks is not defined
    (PyTorch's CPU kernel and XLA pick differently), so no two implementations need agree."""
    import torch

    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for parameter in model.parameters():
            if parameter.ndim >= 2 and parameter.numel() and not parameter.any():
                parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.02)


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
        return result["status"] in ("ok", "mismatch")

    state: dict[str, Any] = {}

    def do_build():
        model, inputs, reference, facts = build(task, model_type)
        state.update(model=model, inputs=inputs, reference=reference)
        for stage in ("eager", "generate"):  # copies made before exporting, which may patch the model
            if stage in stages:
                state[stage] = copy.deepcopy(model)
        row.update(facts)
        emit("facts", facts)  # for the sweep, should a later stage never come back
        row["ref_max_abs"] = float(np.abs(reference[np.isfinite(reference)]).max()) if reference.size else 0.0

    def do_export():
        state["ep"] = torch_export.export(state["model"], (), state["inputs"])

    def do_convert():
        jm = jaxport.from_exported_program(state["ep"], name=type(state["model"]).__name__)
        found = main_output(jm(**state["inputs"]), row["output"])
        if found is None:
            return {"status": "error", "error": "the converted model's output has no array"}
        result = _compared(state["reference"], found, row["output"])
        # Warm timings: jaxport's own part (from the exported program), and the whole of
        # `from_torch`, which runs torch.export first.
        start = time.perf_counter()
        jaxport.from_exported_program(state["ep"], name=type(state["model"]).__name__)
        result["jaxport_seconds"] = round(time.perf_counter() - start, 3)
        start = time.perf_counter()
        try:
            jaxport.from_torch(state["model"], kwargs=state["inputs"])
            result["from_torch_seconds"] = round(time.perf_counter() - start, 3)
        except Exception as e:
            result["from_torch_error"] = short_error(e)
        return result

    def do_eager():
        with jaxport.eager(), torch.no_grad():
            module = state["eager"].to("jax")
            out = module(**{k: v.to("jax") for k, v in state["inputs"].items()})
            found = main_output(out, row["output"])
            if found is None:
                return {"status": "error", "error": "the eager output has no tensor"}
            found = (found[0], found[1].cpu())
        return _compared(state["reference"], found, row["output"])

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
    try:
        with torch.no_grad():
            want = model.generate(ids, attention_mask=mask, do_sample=False, max_new_tokens=NEW_TOKENS,
                                  pad_token_id=pad).numpy()
    except Exception as e:
        return {"status": "error", "error": "transformers' generate: " + short_error(e)}
    lm = jaxport.from_causal_lm(model, max_length=SEQ + NEW_TOKENS, max_batch=BATCH)
    got = np.asarray(lm.generate(ids, mask, max_new_tokens=NEW_TOKENS, pad_token_id=pad))
    result = {"shape": list(got.shape), "new_tokens": int(got.shape[1] - SEQ)}
    if got.shape != want.shape:
        return {**result, "status": "mismatch", "error": f"{list(got.shape)} tokens, transformers {list(want.shape)}"}
    wrong = np.argwhere(got != want)
    if len(wrong):
        row, col = wrong[0]
        return {**result, "status": "mismatch", "error": f"row {row}, token {col - SEQ} of the new ones: "
                f"{got[row, col]}, transformers {want[row, col]}"}
    return {**result, "status": "ok"}


def _compared(reference: np.ndarray, found: tuple, name: str) -> dict:
    result = compare(reference, as_numpy(found[1]))
    result["output"] = found[0]
    if found[0] != name:
        result.update(status="mismatch", error=f"the first output is {found[0]!r}, PyTorch's {name!r}")
    return result


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
