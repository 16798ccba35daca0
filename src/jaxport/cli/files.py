"""The model files the commands take: `.onnx`, or `torch.export.save`d `.pt2`, by extension."""

from __future__ import annotations

from ..backends.model import JaxModel
from ..convert import from_exported_program, from_onnx
from ..frontends.pt2 import load_exported_program
from ..verification import model_file_kind as file_kind


def load_model(path: str) -> JaxModel:
    """A `JaxModel` from an .onnx file (`from_onnx`) or a `.pt2` archive (`from_exported_program`)."""
    if file_kind(path) == "onnx":
        return from_onnx(path)
    return from_exported_program(load_exported_program(path))
