"""Host memory handed back to the kernel: the pages of a file-mapped tensor once jaxport holds a
copy of it.

transformers and safetensors map checkpoint files into memory rather than read them, so a
loaded model's weights are the file's pages, resident once touched. When jaxport must copy a
weight (its buffer not aligned as XLA needs), the mapped pages and the copy would otherwise both
stay resident for as long as the torch model lives. `release` asks the kernel to reclaim those
pages (`MADV_PAGEOUT`, Linux 5.4 on): clean file pages are dropped and read again from the file
on the next access, anything written is kept (swapped or left in place), so no value changes.
Memory that is not a file's mapping is left alone, and elsewhere than Linux this does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import sys

_MADV_PAGEOUT = 21


def _libc():
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    except OSError:
        return None
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    return libc


_LIBC = _libc()


def file_mapped(start: int, end: int) -> bool:
    """Whether addresses [start, end) lie in one mapping of a file (from /proc/self/maps)."""
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                fields = line.split(maxsplit=5)
                low, high = (int(x, 16) for x in fields[0].split("-"))
                if low <= start < high:
                    return end <= high and fields[4] != "0" and len(fields) == 6 and fields[5].startswith("/")
    except (OSError, ValueError, IndexError):
        return False
    return False


def release(start: int, nbytes: int) -> bool:
    """Hand the whole pages of host memory [start, start + nbytes) back to the kernel where they
    map a file; whether it was done."""
    end = start + nbytes
    if _LIBC is None or nbytes <= 0:
        return False
    first = -(-start // mmap.PAGESIZE) * mmap.PAGESIZE  # whole pages only: neighbours keep theirs
    last = end // mmap.PAGESIZE * mmap.PAGESIZE
    if last <= first or not file_mapped(start, end):
        return False
    return _LIBC.madvise(ctypes.c_void_p(first), last - first, _MADV_PAGEOUT) == 0
