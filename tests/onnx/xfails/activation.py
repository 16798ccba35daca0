"""Expected ONNX conformance failures of the activation and loss ops."""

EXPECTED_FAILURES: dict[str, str] = {}
