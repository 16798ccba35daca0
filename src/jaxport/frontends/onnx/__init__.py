"""The ONNX frontend: an `.onnx` file (or bytes, or a `ModelProto`) becomes a `Translation`.

    load        the file read as untrusted input: parsed, checked, external weights loaded
    translate   the checked `ModelProto` as a `Program` and its params
"""

from .load import load
from .translate import np_dtype, to_program, translate

__all__ = ["load", "np_dtype", "to_program", "translate"]
