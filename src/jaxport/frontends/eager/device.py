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


# Random ops on the jax device draw their keys from torch's CPU generator, so its seed and
# state are the device's: torch.manual_seed covers them, and code that saves and restores the
# accelerator's RNG state (torch.testing's freeze_rng_state, checkpointing) gets the CPU's.


def manual_seed(seed: int) -> None:
    """Nothing of its own to seed: torch.manual_seed, which calls this, seeds the CPU generator."""


manual_seed_all = manual_seed


def get_rng_state(device=None):
    import torch

    return torch.get_rng_state()


def set_rng_state(new_state, device=None) -> None:
    import torch

    torch.set_rng_state(new_state)


def get_amp_supported_dtype():
    import torch

    return [torch.float16, torch.bfloat16]


def synchronize(device=None) -> None:
    for array in jax.live_arrays():
        array.block_until_ready()
