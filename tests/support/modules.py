"""Modules that wrap a function, for tests that export or convert one op or expression."""

from __future__ import annotations

import torch


class Call(torch.nn.Module):
    """A module whose forward is `fn(*args)`."""

    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *args):
        return self.fn(*args)
