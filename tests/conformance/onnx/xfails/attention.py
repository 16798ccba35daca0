"""Expected failures of the attention ops (Attention, RotaryEmbedding, FlexAttention,
LinearAttention, CausalConvWithState): none. Their own cases all pass; an `*_expanded` case
that fails does so for other families' ops (MatMul, Softmax, ...), not these lowerings."""

from tests.conformance.expectations import Expected

EXPECTED_FAILURES: dict[str, Expected] = {}
