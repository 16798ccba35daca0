"""Weights that jaxport must copy (not aligned as XLA:CPU takes a buffer) are copied once, at
conversion, and the pages of a file-mapped source are handed back to the kernel without changing
a value (`jaxport.pages`, `dlpack.to_jax(release=True)`)."""

from __future__ import annotations

import mmap
import os
import sys

import numpy as np
import pytest
import torch

from jaxport import dlpack, pages

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="MADV_PAGEOUT and /proc are Linux's")


def _mapped(tmp_path, values: np.ndarray, offset: int) -> torch.Tensor:
    """`values` as a tensor over a private mapping of a file, `offset` bytes into it (a
    safetensors file's tensors lie at the header's length, rarely 64-aligned)."""
    path = tmp_path / "weights.bin"
    raw = values.tobytes()
    with open(path, "wb") as f:
        f.write(b"\0" * offset + raw + b"\0" * mmap.PAGESIZE)
        f.flush()
        os.fsync(f.fileno())  # as a checkpoint on disk is: the kernel drops clean pages only
    storage = torch.UntypedStorage.from_file(str(path), shared=False, nbytes=path.stat().st_size)
    flat = torch.empty(0, dtype=torch.uint8).set_(storage)
    return flat[offset:offset + len(raw)].view(torch.float32).reshape(values.shape)


def _resident_kib(path) -> int:
    """How much of `path`'s mappings is resident in this process (/proc/self/smaps)."""
    resident, inside = 0, False
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            fields = line.split()
            if "-" in fields[0] and ":" not in fields[0]:  # a mapping's first line
                inside = len(fields) == 6 and fields[5] == str(path)
            elif inside and fields[0] == "Rss:":
                resident += int(fields[1])
    return resident


@linux_only
def test_an_unaligned_file_mapped_weight_is_copied_once_and_its_pages_let_go(tmp_path):
    values = np.random.default_rng(0).standard_normal((1024, 1024)).astype(np.float32)  # 4 MiB
    tensor = _mapped(tmp_path, values, offset=40)
    assert tensor.data_ptr() % dlpack.XLA_CPU_ALIGNMENT != 0
    assert pages.file_mapped(tensor.data_ptr(), tensor.data_ptr() + values.nbytes)
    float(tensor.sum())  # every page resident
    assert _resident_kib(tmp_path / "weights.bin") >= 4096
    array = dlpack.to_jax(tensor, what="weight 'w'", release=True)
    assert _resident_kib(tmp_path / "weights.bin") <= 8  # all but the partial pages at its ends
    assert array.unsafe_buffer_pointer() % dlpack.XLA_CPU_ALIGNMENT == 0
    np.testing.assert_array_equal(np.asarray(array), values)
    np.testing.assert_array_equal(tensor.numpy(), values)  # read again from the file: unchanged


@linux_only
def test_pages_written_since_mapping_keep_their_values(tmp_path):
    values = np.arange(256 * 1024, dtype=np.float32).reshape(256, 1024)
    tensor = _mapped(tmp_path, values, offset=8)
    tensor[3] = -1.5  # a private mapping: the write is this process's own page, not the file's
    expected = values.copy()
    expected[3] = -1.5
    array = dlpack.to_jax(tensor, release=True)
    np.testing.assert_array_equal(np.asarray(array), expected)
    np.testing.assert_array_equal(tensor.numpy(), expected)


def test_memory_that_maps_no_file_is_left_alone():
    tensor = torch.arange(1 << 20, dtype=torch.float32)
    assert not pages.release(tensor.data_ptr(), tensor.numel() * 4)
    assert not pages.release(tensor.data_ptr(), 0)


def test_an_aligned_tensor_is_shared_and_an_unaligned_one_copied_without_sharing():
    base = torch.arange(4096 + 64, dtype=torch.float32)
    aligned = base[(-base.data_ptr() % 64) // 4:][:4096]
    assert dlpack.to_jax(aligned).unsafe_buffer_pointer() == aligned.data_ptr()
    unaligned = aligned[1:4001]
    expected = unaligned.numpy().copy()
    array = dlpack.to_jax(unaligned)
    assert array.unsafe_buffer_pointer() != unaligned.data_ptr()
    unaligned[0] = -7.0  # a copy: later writes to the tensor do not show through
    np.testing.assert_array_equal(np.asarray(array), expected)
