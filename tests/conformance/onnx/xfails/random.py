"""Random ops: ONNX's expected values are particular NumPy draws, which JAX's generator
cannot reproduce. Output shapes and dtypes are right; only the drawn values differ."""

from tests.conformance.expectations import Expected

from .reasons import VALUES_DIFFER

_SEEDED = ("expects the 0/1 values of one seeded NumPy draw (np.random); JAX's PRNG draws "
           "different numbers, so only the shape and dtype can match")


def _seeded(note: str = "") -> Expected:
    """Values differ, shapes and dtypes match."""
    return Expected(_SEEDED + note, fails="mismatch", detail=VALUES_DIFFER)


EXPECTED_FAILURES: dict[str, Expected] = {
    "test_bernoulli": _seeded(),
    "test_bernoulli_double": _seeded(),
    "test_bernoulli_seed": _seeded(" (the seed attribute seeds JAX's generator, not NumPy's)"),
    "test_bernoulli_expanded": _seeded(" (drawn here by RandomUniformLike)"),
    "test_bernoulli_double_expanded": _seeded(" (drawn here by RandomUniformLike)"),
    "test_bernoulli_seed_expanded": _seeded(" (drawn here by RandomUniformLike)"),
}
