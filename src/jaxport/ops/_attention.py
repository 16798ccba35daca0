"""Grouped-query attention's head grouping, shared by the ATen and ONNX lowerings.

Query head h reads key/value head h // groups. Rather than repeating keys and values once
per query head (a copy of each per layer and step), both op libraries put the query heads
that share a key/value head side by side and multiply them with it together; the reshapes
are free.
"""

from __future__ import annotations


def group_heads(array, groups: int):
    """(..., heads, s, x) -> (..., heads // groups, groups, s, x): query heads (or a mask's)
    side by side with the key/value head they share. A head axis of 1 broadcasts."""
    heads = array.shape[-3]
    if heads == 1:
        return array[..., None, :, :]
    return array.reshape(*array.shape[:-3], heads // groups, groups, *array.shape[-2:])


def ungroup_heads(array):
    """(..., kv_heads, groups, s, x) -> (..., heads, s, x)."""
    return array.reshape(*array.shape[:-4], -1, *array.shape[-2:])
