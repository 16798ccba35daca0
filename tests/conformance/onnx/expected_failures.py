"""Expected ONNX conformance failures, as data: each entry says why.

Keys are case names (`test_resize_downsample_scales_cubic_antialias`) or prefixes ending
in `*` (`test_string_*`). A listed case that passes fails the suite, so stale entries get
removed. Each op family keeps its entries in `xfails/<family>.py`; this module merges them.
"""

from __future__ import annotations

import importlib
import pkgutil

from . import xfails

EXPECTED_FAILURES: dict[str, str] = {}
for _info in pkgutil.iter_modules(xfails.__path__):
    _family = importlib.import_module(f"{xfails.__name__}.{_info.name}")
    _overlap = EXPECTED_FAILURES.keys() & _family.EXPECTED_FAILURES.keys()
    assert not _overlap, f"expected failures listed twice: {_overlap}"
    EXPECTED_FAILURES.update(_family.EXPECTED_FAILURES)


def expected_failure(case_name: str) -> str | None:
    """Why `case_name` is expected to fail, from its own entry or the longest matching prefix."""
    if case_name in EXPECTED_FAILURES:
        return EXPECTED_FAILURES[case_name]
    prefixes = [k for k in EXPECTED_FAILURES if k.endswith("*") and case_name.startswith(k[:-1])]
    return EXPECTED_FAILURES[max(prefixes, key=len)] if prefixes else None
