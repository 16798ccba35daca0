"""Progress of long work (loading a checkpoint's tensors, converting a large model's weights), as
transformers shows its loading: a `tqdm` bar on an interactive terminal, nothing otherwise.

`JAXPORT_PROGRESS=1` shows it everywhere (a log file, a notebook), `0` nowhere. Short work (fewer
than `MIN_ITEMS` items) never shows one, and neither does a machine without `tqdm` (transformers
and huggingface_hub bring it).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Iterator
from typing import TypeVar

T = TypeVar("T")

#: Fewer items than this show no bar: the work is over before one would tell anything.
MIN_ITEMS = 32


def shown(total: int) -> bool:
    """Whether work of `total` items shows a bar here and now."""
    setting = os.environ.get("JAXPORT_PROGRESS", "")
    if setting == "0" or total < MIN_ITEMS and setting != "1":
        return False
    return setting == "1" or bool(getattr(sys.stderr, "isatty", lambda: False)())


def progress(items: Iterable[T], *, total: int, what: str) -> Iterator[T]:
    """`items`, with a bar on stderr counting them where `shown(total)`."""
    if shown(total):
        try:
            from tqdm.auto import tqdm
        except ImportError:
            pass
        else:
            yield from tqdm(items, total=total, desc=what, unit="tensor", leave=False, file=sys.stderr)
            return
    yield from items
