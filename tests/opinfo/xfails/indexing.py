"""Expected OpInfo failures owned by the indexing family: {"opinfo_id" or "opinfo_id:torch.dtype": reason}."""

_DYNAMIC = "data-dependent output shape: runs eagerly, but jax.jit needs static shapes"
_INPUT_MUTATION = "the op fills its input in place; a pure JAX function cannot mutate its inputs"

EXPECTED_FAILURES: dict[str, str] = {
    "__getitem__": _DYNAMIC + " (indexing with a boolean mask)",
    "argwhere": _DYNAMIC,
    "bincount": _DYNAMIC + " (the length is max(input) + 1)",
    "cauchy": _INPUT_MUTATION,
    "exponential": _INPUT_MUTATION,
    "geometric": _INPUT_MUTATION,
    "item:torch.bool": "the exported graph converts the bool with torch.sym_ite, which has no Python-builtin lowering",
    "log_normal": _INPUT_MUTATION,
    "masked_select": _DYNAMIC,
    "nonzero": _DYNAMIC,
    "normal.in_place": _INPUT_MUTATION,
    "uniform": _INPUT_MUTATION,
    "unique": _DYNAMIC,
    "unique_consecutive": _DYNAMIC,
    "combinations": "torch.export records combinations as masked_select of a triangular mask, whose output shape depends on values: it runs op by op but not under jax.jit",
}
