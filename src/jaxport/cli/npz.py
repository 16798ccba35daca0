"""`.npz` inputs for `jaxport verify`, read as untrusted input: never unpickled, sizes checked first."""

from __future__ import annotations

import math
import os
import zipfile
import zlib

import numpy as np

from ..errors import InputError, one_line


def read_npz(path: str) -> dict[str, np.ndarray]:
    """The arrays of an `.npz` file (as `numpy.savez` writes), read without unpickling: each array's
    header is checked (no Python objects, a size that matches the bytes stored) before its data is
    read. Anything else is one `InputError` naming the file and the array."""
    if not os.path.isfile(path):
        raise InputError(f"{path}: no such file")
    try:
        archive = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError, ValueError, EOFError) as e:
        reason = "it is empty" if os.path.getsize(path) == 0 else f"{type(e).__name__}: {e}"
        raise InputError(f"{path} is not an .npz file of arrays (as numpy.savez writes): {reason}") from None
    arrays: dict[str, np.ndarray] = {}
    with archive:
        for info in archive.infolist():
            key = info.filename.removesuffix(".npy")
            try:
                with archive.open(info) as f:
                    version = np.lib.format.read_magic(f)
                    if version == (1, 0):
                        shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
                    elif version == (2, 0):
                        shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
                    else:
                        raise ValueError(f"unsupported .npy format version {version}")
                    if dtype.hasobject:
                        raise InputError(f"{path}: array '{key}' holds Python objects (a pickle), which verify "
                                         "does not load; save plain numeric arrays")
                    if any(n < 0 for n in shape):
                        raise InputError(f"{path}: array '{key}' is corrupt: its header gives the negative "
                                         f"shape {list(shape)}")
                    nbytes = math.prod(shape) * dtype.itemsize
                    stored = info.file_size - f.tell()
                    if stored != nbytes:
                        raise InputError(f"{path}: array '{key}' is truncated or corrupt: its header says "
                                         f"{dtype}{list(shape)} ({nbytes:,} bytes) but it stores {stored:,} bytes")
                    data = f.read(nbytes)
            except InputError:
                raise
            except (ValueError, OSError, EOFError, zipfile.BadZipFile, zlib.error, SyntaxError) as e:
                raise InputError(f"{path}: array '{key}' cannot be read "
                                 f"({type(e).__name__}: {one_line(e, 200)})") from None
            arrays[key] = np.frombuffer(data, dtype=dtype).reshape(shape, order="F" if fortran else "C").copy()
    return arrays
