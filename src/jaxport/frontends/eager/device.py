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


def get_rng_state(device=None):
    """The state random ops on the jax device draw from: torch's CPU generator's (so
    `torch.random.fork_rng` and OpInfo's `freeze_rng_state` cover them)."""
    import torch

    return torch.random.get_rng_state()


def set_rng_state(new_state, device=None) -> None:
    import torch

    torch.random.set_rng_state(new_state)


def get_amp_supported_dtype():
    import torch

    return [torch.float16, torch.bfloat16]


def synchronize(device=None) -> None:
    for array in jax.live_arrays():
        array.block_until_ready()
