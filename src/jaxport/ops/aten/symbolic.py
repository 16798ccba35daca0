"""ATen lowerings: symbolic sizes and the runtime assertions torch.export inserts.

Under `jax.jit` shapes are static, so a symbolic size is just a Python int.
"""

from __future__ import annotations

import math

from ..registry import aten


@aten("_assert_scalar.default")
def aten__assert_scalar(self, assert_msg):
    """_assert_scalar(Scalar self, str assert_msg) -> ()"""
    return None


@aten("_linalg_check_errors.default")
def aten__linalg_check_errors(info, api_name, *, is_matrix):
    """_linalg_check_errors(Tensor info, str api_name, *, bool is_matrix) -> ()"""
    # PyTorch raises on singular inputs here; JAX returns inf/nan instead, as it does everywhere.
    return None


@aten("_assert_tensor_metadata.default")
def aten__assert_tensor_metadata(a, size=None, stride=None, dtype=None, *, device=None, layout=None):
    """_assert_tensor_metadata(Tensor a, SymInt[]? size=None, SymInt[]? stride=None, ScalarType? dtype=None, *, Device? device=None, Layout? layout=None) -> ()"""
    return None


@aten("sym_constrain_range_for_size.default")
def aten_sym_constrain_range_for_size(size, *, min=None, max=None):
    """sym_constrain_range_for_size(Scalar size, *, int? min=None, int? max=None) -> ()"""
    return None


@aten("sym_is_contiguous.default")
def aten_sym_is_contiguous(self, memory_format=None):
    """sym_is_contiguous(Tensor self, MemoryFormat memory_format=contiguous_format) -> SymBool"""
    return True


@aten("sym_numel.default")
def aten_sym_numel(self):
    """sym_numel(Tensor self) -> SymInt"""
    return math.prod(self.shape)


@aten("sym_size.int")
def aten_sym_size(self, dim):
    """sym_size.int(Tensor self, int dim) -> SymInt"""
    return self.shape[dim]


@aten("sym_storage_offset.default")
def aten_sym_storage_offset(self):
    """sym_storage_offset(Tensor self) -> SymInt"""
    return 0


@aten("sym_stride.int")
def aten_sym_stride(self, dim):
    """sym_stride.int(Tensor self, int dim) -> SymInt"""
    # JAX arrays have no strides; report those of a contiguous tensor of this shape, where
    # PyTorch steps over a size-0 dim as if it had size 1.
    trailing = self.shape[dim % len(self.shape) + 1 :] if self.shape else ()
    return math.prod(max(n, 1) for n in trailing)
