"""What attention lowerings share: grouped-query attention's head grouping, and the choice of
jaxport's compiled CPU kernel for attention without a mask.

Query head h reads key/value head h // groups. Rather than repeating keys and values once
per query head (a copy of each per layer and step), both op libraries put the query heads
that share a key/value head side by side and multiply them with it together; the reshapes
are free.
"""

from __future__ import annotations

from jax import lax

#: Compiled CPU kernels by name, each a function that returns its formulation of attention or
#: None where it does not apply. `jaxport.ops._native` adds them when `pip install` built them.
CPU_KERNELS = {}


def unmasked_attention(query, key, value, scale: float, formulation):
    """(output, logsumexp) of attention without a mask, causal band or dropout: `formulation`,
    a function of (query, key, value) giving both, or, on CPU where it applies, jaxport's
    streaming kernel (`ops/_native/attention.cc`), which never holds a whole score array. As
    for products, the choice is made in the program (`lax.platform_dependent`), so the same
    program compiled for a GPU runs `formulation` there."""
    kernel = CPU_KERNELS.get("attention")
    on_cpu = kernel and kernel(query, key, value, scale, formulation)
    if on_cpu is None:
        return formulation(query, key, value)
    return lax.platform_dependent(query, key, value, cpu=on_cpu, default=formulation)


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
