"""ATen lowerings, one module per family. Importing this package registers them all."""

from . import (  # noqa: F401
    activation,
    attention,
    creation,
    elementwise,
    indexing,
    linalg,
    nn,
    reduction,
    shape,
    symbolic,
    unary,
)
