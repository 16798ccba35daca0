"""The `torch.jax` device module PyTorch looks up for `device="jax"` (PrivateUse1), and the
hooks and device guard its C++ side asks a PrivateUse1 backend for."""

from __future__ import annotations

import jax
import torch


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


# Random ops on the jax device draw from torch's CPU generator, so the device's RNG state is
# that generator's and `torch.manual_seed` already seeds it. The seeding hooks stay no-ops:
# torch.manual_seed calls them, and calling back into it would recurse.


def get_rng_state(device=None):
    return torch.default_generator.get_state()


def set_rng_state(new_state, device=None) -> None:
    torch.default_generator.set_state(new_state)


def initial_seed() -> int:
    return torch.initial_seed()


def manual_seed(seed: int) -> None:
    """A no-op: the jax device shares torch's CPU generator (see above)."""


def manual_seed_all(seed: int) -> None:
    """A no-op: the jax device shares torch's CPU generator (see above)."""


def get_amp_supported_dtype():
    return [torch.float16, torch.bfloat16]


def synchronize(device=None) -> None:
    for array in jax.live_arrays():
        array.block_until_ready()


#: torch's Python side of a PrivateUse1 backend's C++ hooks and device guard, from torch 2.10 on.
#: torch 2.9 has none, and runs the eager frontend, and torch.compile after it, without them (the
#: compatibility slice under torch 2.9, `make test-compat`).
_ACC = getattr(torch._C, "_acc", None)


def register_hooks() -> None:
    """Register the jax device's hooks and device guard with PyTorch's C++ side, where it takes them."""
    if _ACC is not None:
        _ACC.register_python_privateuseone_hook(Hooks())
        _ACC.register_python_privateuseone_device_guard(DeviceGuard())


class Hooks(_ACC.PrivateUse1Hooks if _ACC else object):
    """What PyTorch's C++ side asks of the backend behind PrivateUse1: it is built and available.

    With `torch.jax.is_available()` true, `torch.accelerator` names the jax device the
    accelerator, and code that then asks for its current stream (Dynamo, at every
    `torch.compile` trace) needs these hooks and a device guard registered, or fails with
    "PyTorch is not linked with support for jax devices"."""

    def is_available(self) -> bool:
        return True

    def has_primary_context(self, dev_id) -> bool:
        return True

    def is_built(self) -> bool:
        return True


class DeviceGuard(_ACC.DeviceGuard if _ACC else object):
    """One device, one default stream: nothing to switch."""

    def type_(self):
        return torch._C._autograd.DeviceType.PrivateUse1
