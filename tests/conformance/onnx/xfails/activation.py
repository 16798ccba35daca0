"""Expected ONNX conformance failures of the activation and loss ops."""

EXPECTED_FAILURES: dict[str, str] = {
    "test_attention_4d_causal_fp16_expanded": (
        "float16 Softmax is computed in float32 and rounded once (as onnxruntime does); the expected "
        "values come from float16 arithmetic throughout, 2 of 192 elements differ by 2 float16 ulps "
        "(the unexpanded Attention case passes)"
    ),
}
