"""ONNX lowerings, one module per family. Importing this package registers them all."""

from . import (  # noqa: F401
    control,
    elementwise,
)
