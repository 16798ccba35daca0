"""Expected ONNX failures of the image ops: ImageDecoder, which jaxport does not lower."""

from tests.conformance.expectations import Expected

EXPECTED_FAILURES: dict[str, Expected] = {
    "test_image_decoder_*": Expected(
        "ImageDecoder decodes JPEG/PNG/TIFF/WebP bytes: a codec, not array math; no JAX or NumPy "
        "implementation exists, and jaxport's op bodies use only those",
        fails="missing", detail=r"onnx\.ImageDecoder",
    ),
}
