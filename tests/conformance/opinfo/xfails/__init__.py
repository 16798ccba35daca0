"""Expected OpInfo failures, one module per op family, each op's entries for every path in one
place; `tests/conformance/opinfo/expected_failures.py` merges them.

The families, by the modules of `src/jaxport/ops/aten` whose ops they hold: `elementwise`
(elementwise, unary, special; casts), `indexing` (indexing; creation's factories and random
ops), `nn` (activation, conv, pooling, normalization, sampling, loss, nn, attention),
`reduction` (reduction, scans, sorting and selection; linalg, fft) and `shape`. Causes shared
by several families are in `reasons`.
"""

from tests.conformance.expectations import Expected

#: The paths of the special-values pass (tests/ops/aten/test_special_values.py) and of OpInfo's
#: reference inputs (test_opinfo.py's "reference" and "eager_reference").
SPECIAL = ("special",)
REFERENCE = ("reference", "eager_reference")


def on_paths(paths: tuple[str, ...], causes: dict[Expected, tuple[str, ...]]) -> dict[str, Expected]:
    """{"opinfo_id:*:path" or "opinfo_id:torch.dtype:path": entry} for the ops listed under each
    entry, each given as "opinfo_id" (every dtype) or "opinfo_id:torch.dtype" (one), on `paths`."""
    return {
        f"{op}:{path}" if ":" in op else f"{op}:*:{path}": expected
        for expected, ops in causes.items() for op in ops for path in paths
    }
