"""Safetensors checkpoints on disk, read one tensor (or one device's slice of one) at a time.

`Checkpoint(path)` takes a `.safetensors` file or a Hugging Face checkpoint directory: its
`model.safetensors.index.json` and the shards the index names, or a lone `model.safetensors`.
Opening it reads the headers only: each tensor's file, shape and dtype, checked before any data
is read (`spec`). `read(name, index)` then reads one tensor, or the part of it `index` (a tuple
of slices) selects, through safetensors' `get_slice`, as a torch tensor of its own memory.

A checkpoint may come from a stranger. Pickled checkpoints (`pytorch_model.bin`, `.pt`, `.pth`,
`.ckpt`) are refused by name: loading one runs whatever code it holds. The index is JSON, read
with a size limit, and may name only plain files inside the directory; safetensors checks each
file's header (its offsets within the file and contiguous) when it opens it. Anything broken is
one `ModelFileError` naming the file.

Each read opens the file, reads, and closes it: safetensors maps the file, and a mapped page once
read counts in the process's resident memory until the mapping is closed, so reading a whole
shard through one open file would hold the shard twice, once in the page cache's mapping and
once in the tensors read from it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import torch

from .errors import ModelFileError, one_line
from .versions import require

INDEX = "model.safetensors.index.json"
SINGLE = "model.safetensors"
#: The largest index file read (a 405B model's index is about 100 KiB).
MAX_INDEX_BYTES = 64 * 2**20
#: Suffixes of pickled checkpoints: loading one runs the code it holds.
PICKLED = (".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle")

#: safetensors' dtype names -> torch's.
DTYPES = {
    "BOOL": torch.bool, "U8": torch.uint8, "I8": torch.int8, "I16": torch.int16, "U16": torch.uint16,
    "I32": torch.int32, "U32": torch.uint32, "I64": torch.int64, "U64": torch.uint64,
    "F16": torch.float16, "BF16": torch.bfloat16, "F32": torch.float32, "F64": torch.float64,
    "F8_E4M3": torch.float8_e4m3fn, "F8_E5M2": torch.float8_e5m2, "C64": torch.complex64,
}


def is_checkpoint_path(value: object) -> bool:
    """Whether `value` names a file or directory (a `str` or `os.PathLike`), as `load_weights` takes one."""
    return isinstance(value, (str, os.PathLike))


class Checkpoint:
    """A safetensors checkpoint's tensors, by name, where each lies and what it holds."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        files = _files(self.path)
        safetensors = require("safetensors")
        #: {name: (file, shape, torch dtype)}, from the headers.
        self._entries: dict[str, tuple[Path, tuple[int, ...], torch.dtype]] = {}
        for file, expected in files.items():
            try:
                with safetensors.safe_open(file, framework="pt") as opened:
                    names = list(opened.keys())
                    for name in names:
                        part = opened.get_slice(name)
                        kind = part.get_dtype()
                        if kind not in DTYPES:
                            raise ModelFileError(f"{file}: tensor '{name}' is of dtype {kind}, which jaxport does not read")
                        self._entries[name] = (file, tuple(int(n) for n in part.get_shape()), DTYPES[kind])
            except ModelFileError:
                raise
            except Exception as e:  # safetensors' own refusal of a header, or a file it cannot open
                raise ModelFileError(f"{file} is not a readable safetensors file: {one_line(e, 300)}") from None
            absent = sorted(set(expected or ()) - set(names))
            if absent:
                raise ModelFileError(f"{self.path / INDEX} places '{absent[0]}' in {file.name}, which does not hold it "
                                     f"({len(absent)} such tensor(s))")

    def __contains__(self, name: str) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def spec(self, name: str) -> tuple[tuple[int, ...], torch.dtype]:
        """(shape, torch dtype) of tensor `name`, from its file's header."""
        _, shape, dtype = self._entries[name]
        return shape, dtype

    def read(self, name: str, index: tuple[slice, ...] | None = None) -> torch.Tensor:
        """Tensor `name` (the part `index` selects, one slice per dimension, if given), read from
        its file, which is closed again before this returns."""
        file, shape, _ = self._entries[name]
        safetensors = require("safetensors")
        try:
            with safetensors.safe_open(file, framework="pt") as opened:
                part = opened.get_slice(name)
                # a 0-d tensor has no dimension to slice; safetensors reads it whole
                tensor = part[index] if index is not None and shape else part[:]
        except Exception as e:  # the file changed or broke since its header was read
            raise ModelFileError(f"{file}: cannot read tensor '{name}': {one_line(e, 300)}") from None
        return tensor.reshape(shape) if index is None else tensor


def _files(path: Path) -> dict[Path, list[str] | None]:
    """The safetensors files of checkpoint `path`, each with the names the index places in it
    (None: no index)."""
    if path.suffix.lower() in PICKLED or path.is_dir() and not (path / INDEX).exists() and not (path / SINGLE).exists() \
            and any(child.suffix.lower() in PICKLED for child in path.iterdir()):
        raise ModelFileError(f"{path} is a pickled PyTorch checkpoint, and loading one runs the code it holds: jaxport "
                             "reads safetensors only (transformers: model.save_pretrained(dir) writes them)")
    if path.is_file():
        return {path: None}
    if not path.is_dir():
        raise ModelFileError(f"{path}: no such file or directory")
    if (path / INDEX).exists():
        return _indexed(path)
    if (path / SINGLE).exists():
        return {path / SINGLE: None}
    raise ModelFileError(f"{path} holds neither {INDEX} nor {SINGLE}")


def _indexed(directory: Path) -> dict[Path, list[str]]:
    index_path = directory / INDEX
    size = index_path.stat().st_size
    if size > MAX_INDEX_BYTES:
        raise ModelFileError(f"{index_path} is {size} bytes; an index is at most {MAX_INDEX_BYTES}")
    try:
        with open(index_path, "rb") as f:
            index = json.loads(f.read(MAX_INDEX_BYTES + 1))
    except (OSError, ValueError) as e:
        raise ModelFileError(f"{index_path} is not a JSON index: {one_line(e, 200)}") from None
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in weight_map.items()):
        raise ModelFileError(f"{index_path} has no weight_map of tensor names to file names")
    files: dict[Path, list[str]] = {}
    for name, file_name in weight_map.items():
        # a plain name inside the directory: an index cannot point reads elsewhere
        if file_name in ("", ".", "..") or os.path.basename(file_name) != file_name or "\\" in file_name:
            raise ModelFileError(f"{index_path} places '{name}' in '{file_name}', which is not a file name in its directory")
        file = directory / file_name
        if not file.is_file():
            raise ModelFileError(f"{index_path} places '{name}' in {file_name}, which is missing from {directory}")
        files.setdefault(file, []).append(name)
    return files
