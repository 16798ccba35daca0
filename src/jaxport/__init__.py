"""jaxport: PyTorch (and ONNX) models as pure, jittable JAX functions."""

from ._torch_utils import to_jax as to_jax
from ._torch_utils import to_torch as to_torch
from .convert import from_exported_program as from_exported_program
from .convert import from_torch as from_torch
from .errors import ExportError as ExportError
from .errors import InputError as InputError
from .errors import JaxportError as JaxportError
from .errors import LoweringError as LoweringError
from .errors import UnsupportedOpsError as UnsupportedOpsError
from .model import JaxModel as JaxModel

__version__ = "0.1.0"
