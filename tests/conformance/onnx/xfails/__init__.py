"""Expected ONNX failures, one module per op family (`EXPECTED_FAILURES` in each), each op's
conformance cases and special-values cases ("special_values:<case>") together; causes shared by
several families are in `reasons`. The families follow `src/jaxport/ops/onnx` (nn holds conv,
pooling, normalization and Dropout; text the string ops; image ImageDecoder, which has no lowering)."""
