"""ATen lowerings, one module per family. Importing this package registers them all."""

from . import (  # noqa: F401
    activation,
    attention,
    attention_kernels,
    binning,
    conv,
    creation,
    elementwise,
    fft,
    indexing,
    linalg,
    loss,
    nn,
    normalization,
    pooling,
    reduction,
    sampling,
    shape,
    special,
    symbolic,
    unary,
)
