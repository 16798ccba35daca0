"""Expected OpInfo failures, one module per op family, each op's entries for every path in one
place; `tests/conformance/opinfo/expected_failures.py` merges them.

The families, by the modules of `src/jaxport/ops/aten` whose ops they hold: `elementwise`
(arithmetic, comparison, bitwise, unary, special, bessel, polynomials; casts), `indexing`
(indexing; creation's factories and random ops), `nn` (activation, conv, pooling,
normalization, sampling, loss, nn, attention), `reduction` (reduction, cumulative, sorting,
softmax, norms; matmul, linalg, fft) and `shape` (shape, joining, padding, diagonal,
view_scatter). Causes shared by several families are in `reasons`.

An entry is as narrow as its reason: a `detail` pattern only that failure matches, the samples
it is about (`where=samples(1)`: "sample 1" of each dtype and path the key covers) or the operand
values it is about (`values=`, for elementwise ops and row reductions). A sample an entry names
must fail wherever it runs; `test_opinfo.test_expected_failure_still_fails` runs each entry's
named samples (sample 0 for an entry that names none) at every level, so a stale entry fails
`make test`.
"""

from tests.conformance.expectations import Expected

#: The paths of the special-values pass (tests/ops/aten/test_special_values.py) and of OpInfo's
#: reference inputs (test_opinfo.py's "reference" and "eager_reference").
SPECIAL = ("special",)
REFERENCE = ("reference", "eager_reference")
#: The gradient paths (reverse and forward mode), which read only their own entries.
GRADIENTS = ("vjp", "jvp")


def samples(*indices: int) -> tuple[str, ...]:
    """The places ("sample 1", ...) an `Expected(where=...)` names: OpInfo samples, by their
    index among the samples of the key's dtype and path (`harness.samples`, or for the reference
    paths `harness.reference_samples`)."""
    return tuple(f"sample {i}" for i in indices)


def on_paths(paths: tuple[str, ...], causes: dict[Expected, tuple[str, ...]]) -> dict[str, Expected]:
    """{"opinfo_id:*:path" or "opinfo_id:torch.dtype:path": entry} for the ops listed under each
    entry, each given as "opinfo_id" (every dtype) or "opinfo_id:torch.dtype" (one), on `paths`."""
    return {
        f"{op}:{path}" if ":" in op else f"{op}:*:{path}": expected
        for expected, ops in causes.items() for op in ops for path in paths
    }
