"""The releases jaxport supports: each dependency's floor, checked where jaxport first needs it.

Each floor is the oldest release CI runs (`make test-compat`, which also runs the newest release
the package index serves; docs/guide/supported-releases.md), and `pyproject.toml` declares the same
(a test holds the two equal). A release below its floor is refused with one line naming both
versions and the install that fixes it, instead of failing later inside the dependency: torch,
JAX and NumPy when this module is imported (`import jaxport` imports it first), the optional ones
when jaxport first needs them (`require`).
"""

from __future__ import annotations

import importlib
import re
from types import ModuleType

#: {distribution: oldest release CI runs}. torch: the oldest release the package index serves for
#: Python 3.11 (as a CUDA build, which runs without a GPU); JAX: 0.6.2 fails (no `jax.export` as
#: jaxport uses it), 0.7 is untried; the rest as docs/guide/supported-releases.md says.
FLOORS = {
    "torch": "2.9",
    "jax": "0.8",
    "numpy": "2.0",
    "transformers": "5.14",
    "safetensors": "0.8",
    "onnx": "1.16",
    "onnxruntime": "1.19",
    "optax": "0.2",
    # Model Explorer (`jaxport verify --explore`): the release its node data and PyTorch adapter
    # were checked with in a browser (tests/test_model_explorer.py)
    "ai-edge-model-explorer": "0.1.34",
}
#: The extra (`pip install jaxport[...]`) that brings each optional dependency.
EXTRAS = {"transformers": "hf", "safetensors": "train", "onnx": "onnx", "onnxruntime": "onnx", "optax": "train",
          "ai-edge-model-explorer": "explore"}
#: The module of each dependency whose import name is not its distribution's.
MODULES = {"ai-edge-model-explorer": "model_explorer"}


def release(version: str) -> tuple[int, ...]:
    """The numeric release of a version string: "2.13.0+cpu" -> (2, 13, 0), "5.24.0.dev0" -> (5, 24, 0)."""
    head = re.match(r"\d+(\.\d+)*", version)
    return tuple(int(part) for part in head.group(0).split(".")) if head else ()


def check(name: str, version: str) -> None:
    """Refuse `version` of `name` below its floor, naming both and the install that fixes it."""
    floor = FLOORS[name]
    if release(version) < release(floor):
        package = f"jaxport[{EXTRAS[name]}]" if name in EXTRAS else "jaxport"
        raise ImportError(f"{package} needs {name}>={floor}; this environment has {name} {version} "
                          f"(pip install -U '{name}>={floor}')")


def require(name: str) -> ModuleType:
    """Import `name` (an optional dependency) and check its release; an ImportError that names the
    extra to install if it is missing."""
    try:
        module = importlib.import_module(MODULES.get(name, name))
    except ImportError as err:
        extra = EXTRAS.get(name)
        raise ImportError(f"this needs {name}, which is not installed"
                          + (f" (pip install 'jaxport[{extra}]')" if extra else "")) from err
    check(name, module.__version__)
    return module


def _check_core() -> None:
    import jax
    import numpy
    import torch

    for module in (torch, jax, numpy):
        check(module.__name__, module.__version__)


_check_core()
