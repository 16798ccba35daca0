"""Expected ONNX conformance failures, one module per op family (`EXPECTED_FAILURES` in each)."""
