"""ATen lowerings, one module per family. Importing this package registers them all."""

from . import (  # noqa: F401
    activation,
    attention,
    conv,
    creation,
    elementwise,
    indexing,
    linalg,
    nn,
    normalization,
    pooling,
    reduction,
    shape,
    symbolic,
    unary,
)
