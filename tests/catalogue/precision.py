"""bfloat16 generation of widely used causal-LM architectures against PyTorch under autocast.

    python -m tests.catalogue.precision [--models llama,gpt2] [--results tests/catalogue/precision.jsonl]

Each architecture is built as the catalogue builds it (shrunk default config, seed 0, float32
weights) and converted with `from_causal_lm(dtype=jnp.bfloat16)`; PyTorch runs the same weights
under `torch.autocast("cpu", dtype=torch.bfloat16)`. Recorded per model: the prefill logits'
largest error relative to their largest magnitude, and whether greedy generation (left-padded
prompts, `harness.NEW_TOKENS` new tokens) gives the same tokens, or where the first differing
token was a tie within one bfloat16 ulp in PyTorch's own logits. One JSON line per model,
stamped with the commit; rerunning skips models already recorded at this commit.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import time

from tests.catalogue import harness
from tests.catalogue.sweep import read_results, versions

RESULTS = os.path.join(os.path.dirname(__file__), "precision.jsonl")
#: 20 widely used decoder architectures (dense, grouped-query, sliding-window, MoE, latent attention)
MODELS = ["llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3_text", "phi", "phi3", "gpt2",
          "falcon", "deepseek_v3", "mixtral", "qwen2_moe", "starcoder2", "olmo2", "cohere", "gpt_neox",
          "granite", "stablelm"]


def check(model_type: str) -> dict:
    import jax.numpy as jnp
    import numpy as np
    import torch

    import jaxport
    from tests.support.precision import first_difference_is_a_tie

    model, _inputs, _reference, _facts = harness.build("causal-lm", model_type)
    ids, mask = harness.generation_prompts(model.config)
    pad = harness._first(harness._find(model.config, "pad_token_id", default=0))
    row: dict = {"model": model_type, "class": type(model).__name__}
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        logits = model(input_ids=ids, attention_mask=mask).logits.float().numpy()
        want = model.generate(ids, attention_mask=mask, do_sample=False, max_new_tokens=harness.NEW_TOKENS,
                              pad_token_id=pad).numpy()
    lm = jaxport.from_causal_lm(model, max_length=harness.SEQ + harness.NEW_TOKENS, max_batch=harness.BATCH,
                                dtype=jnp.bfloat16)
    got_logits, _ = lm.prefill(lm.params, lm.init_cache(harness.BATCH), ids.numpy(), mask.numpy())
    real = mask.numpy().astype(bool)  # padding positions' logits are not compared
    error = np.abs(np.asarray(got_logits, np.float32) - logits)[real].max()
    row["logits_relative_error"] = float(error / max(np.abs(logits[real]).max(), 1e-30))
    row["logits_max_abs"] = float(np.abs(logits[real]).max())
    got = np.asarray(lm.generate(ids, mask, max_new_tokens=harness.NEW_TOKENS, pad_token_id=pad))
    if got.shape == want.shape and np.array_equal(got, want):
        row["tokens"] = "equal"
    else:
        tie, detail = first_difference_is_a_tie(model, mask, got, want, prompt=harness.SEQ, dtype=torch.bfloat16)
        row["tokens"] = "tie" if tie else "differ"
        row["first_difference"] = detail
    return row


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--results", default=RESULTS)
    opts = parser.parse_args(argv)
    info = versions()
    done = {m for (_, m), row in read_results(opts.results).items()
            if row.get("versions", {}).get("jaxport") == info.get("jaxport")}
    for model_type in opts.models.split(","):
        if model_type in done:
            continue
        start = time.time()
        try:
            row = check(model_type)
        except Exception as e:  # recorded, and the sweep goes on
            row = {"model": model_type, "tokens": "error", "error": harness.short_error(e)}
        row.update(task="causal-lm", seconds=round(time.time() - start, 1),
                   date=datetime.date.today().isoformat(), versions=info)
        with open(opts.results, "a") as f:
            f.write(json.dumps(row) + "\n")
        print(f"{model_type:16s} {row['tokens']:7s} {row.get('logits_relative_error', float('nan')):.2e} "
              f"{row.get('first_difference') or row.get('error') or ''}", flush=True)


if __name__ == "__main__":
    main()
