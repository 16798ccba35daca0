"""The op libraries: one pure JAX function per op, registered by name in `registry`.

    aten/             ATen (and prims) lowerings by family
    onnx/             ONNX lowerings by family, versioned by opset, and onnxruntime's com.microsoft ops
    python_builtins   the Python operators and `torch.sym_*` that exported graphs call
    _attention, _convolution, _pooling    helpers both libraries share
    _native/          compiled CPU kernels behind some helpers, when `pip install` built them

Importing this package registers every lowering.
"""

from . import _native, aten, onnx, python_builtins  # noqa: F401
