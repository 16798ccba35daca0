"""`.pt2` files (`torch.export.save`) read as untrusted input, without running code from them.

    archive        the zip read member by member: program JSON checked before sympy parses it,
                   raw tensors checked against their configs, pickles refused or restricted
    pytree_types   the container types its input and output trees name, registered from an allowlist
"""

from __future__ import annotations

from .archive import load
from .pytree_types import register_archive_types


def load_exported_program(path: str):
    """The `ExportedProgram` a `torch.export.save`d archive holds, read without running code from
    the file, after registering the pytree types its inputs and outputs name. An unreadable archive
    is one `ModelFileError` line naming the member."""
    register_archive_types(path)
    return load(path)


__all__ = ["load_exported_program"]
