"""Expected failures of the convolution, pooling, normalization and dropout cases."""

from tests.conformance.expectations import Expected

from .reasons import VALUES_DIFFER

_NUMPY_RNG = Expected(
    "the expected output is drawn with NumPy's Mersenne Twister (np.random.seed + uniform); "
    "jaxport's training-mode Dropout draws its mask from jax.random, so the kept elements differ",
    fails="mismatch", detail=VALUES_DIFFER,
)

EXPECTED_FAILURES: dict[str, Expected] = {
    "test_training_dropout": _NUMPY_RNG,
    "test_training_dropout_default": _NUMPY_RNG,
    "test_training_dropout_default_mask": _NUMPY_RNG,
    "test_training_dropout_mask": _NUMPY_RNG,
    "test_maxunpool_export_with_output_shape": Expected(
        "the case scatters the indices into the shape inferred from kernel/strides/pads and "
        "zero-pads that to output_shape; jaxport, like onnxruntime (microsoft/onnxruntime#2193, "
        "onnx/onnx#2398) and PyTorch's max_unpool, reads them as flat indices into output_shape",
        fails="mismatch", detail=VALUES_DIFFER,
    ),
}
