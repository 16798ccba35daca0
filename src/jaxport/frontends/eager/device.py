"""The `torch.jax` device module PyTorch looks up for `device="jax"` (PrivateUse1)."""

from __future__ import annotations

import jax


def is_available() -> bool:
    return True


def is_initialized() -> bool:
    return True


def _is_in_bad_fork() -> bool:
    return False


def _lazy_init() -> None:
    pass


def device_count() -> int:
    return 1


def current_device() -> int:
    return 0


def set_device(device) -> None:
    pass


def manual_seed_all(seed: int) -> None:
    """Random ops on the jax device draw from torch's CPU generator, so torch.manual_seed covers them."""


def get_amp_supported_dtype():
    import torch

    return [torch.float16, torch.bfloat16]


def synchronize(device=None) -> None:
    for array in jax.live_arrays():
        array.block_until_ready()
