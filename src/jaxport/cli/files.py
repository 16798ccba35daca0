"""The model files the commands take: `.onnx`, or `torch.export.save`d `.pt2`, by extension."""

from __future__ import annotations

import os

from ..backends.model import JaxModel
from ..convert import from_exported_program, from_onnx
from ..errors import ModelFileError
from ..frontends.pt2 import load_exported_program


def file_kind(path: str) -> str:
    """"onnx" or "pt2", from the file's extension (refusing anything else)."""
    if not os.path.isfile(path):
        raise ModelFileError(f"{path}: no such file")
    ext = os.path.splitext(path)[1].lower()
    if ext == ".onnx":
        return "onnx"
    if ext in (".pt2", ".pt", ".ep"):
        return "pt2"
    raise ModelFileError(f"{path}: expected an .onnx file or a torch.export.save'd .pt2 file")


def load_model(path: str) -> JaxModel:
    """A `JaxModel` from an .onnx file (`from_onnx`) or a `.pt2` archive (`from_exported_program`)."""
    if file_kind(path) == "onnx":
        return from_onnx(path)
    return from_exported_program(load_exported_program(path))
