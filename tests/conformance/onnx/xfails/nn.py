"""Expected failures of the convolution, pooling, normalization and dropout cases."""

_NUMPY_RNG = (
    "the expected output is drawn with NumPy's Mersenne Twister (np.random.seed + uniform); "
    "jaxport's training-mode Dropout draws its mask from jax.random, so the kept elements differ"
)

EXPECTED_FAILURES: dict[str, str] = {
    "test_training_dropout": _NUMPY_RNG,
    "test_training_dropout_default": _NUMPY_RNG,
    "test_training_dropout_default_mask": _NUMPY_RNG,
    "test_training_dropout_mask": _NUMPY_RNG,
    "test_maxunpool_export_with_output_shape": (
        "the case scatters the indices into the shape inferred from kernel/strides/pads and "
        "zero-pads that to output_shape; jaxport, like onnxruntime (microsoft/onnxruntime#2193, "
        "onnx/onnx#2398) and PyTorch's max_unpool, reads them as flat indices into output_shape"
    ),
}
