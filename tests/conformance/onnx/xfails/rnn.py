"""Expected failures of the recurrent layers (GRU, LSTM, RNN): none. Every case passes."""

EXPECTED_FAILURES: dict[str, str] = {}
