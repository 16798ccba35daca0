"""Language models that generate: a Hugging Face causal LM as pure JAX over an explicit KV cache.

    step        `CausalLMStep`: one step of the model over an explicit cache, the module exported
    sampling    transformers' logits processors (penalties, bans, lengths, temperature, top-k/p, min-p,
                renormalization) in JAX
    beam        beam search as one `while_loop`
    streaming   each step's tokens to a streamer from inside the loop; stopping a stream, at exit too
    causal_lm   `from_causal_lm` and `CausalLM`: prefill, decode and `generate` as jitted functions

The package exports `from_causal_lm` and `CausalLM`, and the token choice on its own: `Sampling`
(the settings), `process_scores` and `process_logits` (the processors, on logits in JAX).
"""

from .causal_lm import CausalLM, from_causal_lm
from .sampling import Sampling, process_logits, process_scores

__all__ = ["CausalLM", "Sampling", "from_causal_lm", "process_logits", "process_scores"]
