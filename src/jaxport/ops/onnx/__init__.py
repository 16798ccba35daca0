"""ONNX lowerings, one module per family. Importing this package registers them all."""

from . import (  # noqa: F401
    activation,
    attention,
    control,
    conv,
    detection,
    elementwise,
    indexing,
    linalg,
    loss,
    microsoft,
    normalization,
    pooling,
    quantization,
    random,
    reduction,
    rnn,
    sampling,
    sequence,
    shape,
    signal,
)
