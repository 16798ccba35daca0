"""Expected failures of the ai.onnx.ml ops and TfIdfVectorizer: only LabelEncoder cases whose
input is a string tensor. Every numeric case of these ops passes."""

from tests.conformance.expectations import Expected

_STRING_INPUT = Expected(
    "LabelEncoder over a string input X: JAX arrays hold numbers only, so jaxport refuses "
    "string values at load time (numeric keys/values, keys_tensor and default_tensor work)",
    fails="error:UnsupportedDtypeError", detail="graph input 'X' holds string tensors",
)

EXPECTED_FAILURES: dict[str, Expected] = {
    "test_ai_onnx_ml_label_encoder_string_int": _STRING_INPUT,
    "test_ai_onnx_ml_label_encoder_string_int_no_default": _STRING_INPUT,
    "test_ai_onnx_ml_label_encoder_tensor_mapping": _STRING_INPUT,
    "test_ai_onnx_ml_label_encoder_tensor_value_only_mapping": _STRING_INPUT,
}
