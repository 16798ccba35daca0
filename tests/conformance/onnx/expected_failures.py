"""Expected ONNX failures, as data: each entry an `Expected`, its reason and the cause its
failure must have (`tests/conformance/expectations.py`).

Keys are conformance case names (`test_resize_downsample_scales_cubic_antialias`), prefixes
ending in `*` (`test_string_*`), or "special_values:<case>" for the cases of
tests/ops/onnx/test_special_values.py. A listed case fails the suite when it fails with another
cause than its entry states, or when it passes, so stale entries get removed. Each op family
keeps all its ops' entries, conformance and special values alike, in `xfails/<family>.py`
(shared reasons in `xfails/reasons.py`); this module merges them.
"""

from __future__ import annotations

import importlib
import pkgutil

from tests.conformance.expectations import Expected, merge

from . import xfails

#: The modules of `xfails` that hold no family's entries.
_NOT_FAMILIES = {"reasons"}

EXPECTED_FAILURES: dict[str, Expected] = merge(
    (info.name, importlib.import_module(f"{xfails.__name__}.{info.name}").EXPECTED_FAILURES)
    for info in pkgutil.iter_modules(xfails.__path__) if info.name not in _NOT_FAMILIES
)


def expected_failure(case_name: str) -> tuple[str, Expected] | None:
    """(key, entry) expecting `case_name` to fail: its own entry or the longest matching prefix."""
    if case_name in EXPECTED_FAILURES:
        return case_name, EXPECTED_FAILURES[case_name]
    prefixes = [k for k in EXPECTED_FAILURES if k.endswith("*") and case_name.startswith(k[:-1])]
    if not prefixes:
        return None
    key = max(prefixes, key=len)
    return key, EXPECTED_FAILURES[key]
