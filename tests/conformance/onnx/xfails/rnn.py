"""Expected failures of the recurrent layers (GRU, LSTM, RNN): none. Every case passes."""

from tests.conformance.expectations import Expected

EXPECTED_FAILURES: dict[str, Expected] = {}
