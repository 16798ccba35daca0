"""Expected OpInfo failures owned by the indexing family: {"opinfo_id" or "opinfo_id:torch.dtype": reason}."""

_INPUT_MUTATION = "the op fills its input in place; a pure JAX function cannot mutate its inputs"

EXPECTED_FAILURES: dict[str, str] = {
    "cauchy": _INPUT_MUTATION,
    "exponential": _INPUT_MUTATION,
    "geometric": _INPUT_MUTATION,
    "log_normal": _INPUT_MUTATION,
    "normal.in_place": _INPUT_MUTATION,
    "uniform": _INPUT_MUTATION,
    "unravel_index:*:eager": "PyTorch's Python implementation builds a helper with "
    "torch.tensor(device=indices.device) while torch-function modes are paused, so the request "
    "reaches C++, which has no jax device backend (JaxTensors are meta to C++)",
}
