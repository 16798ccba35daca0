"""Language models that generate: a Hugging Face causal LM as pure JAX over an explicit KV cache.

    step          `CausalLMStep`: one step of the model over an explicit cache, the module exported
    probe         what one forward of two tokens shows of how the model caches, read before export
    convert       `from_causal_lm`'s conversion: the step exported and converted, once or as two
                  programs (a prefill and a one-token decoder), or a prefill per prompt length
    cache_layout  the cache's arrays, where each step's tokens go in it, and what it has no room for
    settings      the `GenerationConfig` allow-lists, and a call's settings resolved as transformers does
    sampling      transformers' logits processors (penalties, bans, lengths, temperature, top-k/p, min-p,
                  renormalization) in JAX
    beam          beam search as one `while_loop`
    decode        prefill and the decode `while_loop` as one jitted function per structure of settings
    streaming     each step's tokens to a streamer from inside the loop; stopping a stream, at exit too
    export        a step program as a `jax.export` artifact
    causal_lm     `from_causal_lm` and `CausalLM`: prefill, decode and `generate` as jitted functions

The package exports `from_causal_lm` and `CausalLM`, and the token choice on its own: `Sampling`
(the settings), `process_scores` and `process_logits` (the processors, on logits in JAX).
"""

from .causal_lm import CausalLM, from_causal_lm
from .sampling import Sampling, process_logits, process_scores

__all__ = ["CausalLM", "Sampling", "from_causal_lm", "process_logits", "process_scores"]
