"""Expected OpInfo failures owned by the indexing family: {"opinfo_id" or "opinfo_id:torch.dtype": reason}."""

EXPECTED_FAILURES: dict[str, str] = {
    "unravel_index:*:eager": "PyTorch's Python implementation builds a helper with "
    "torch.tensor(device=indices.device) while torch-function modes are paused, so the request "
    "reaches C++, which has no jax device backend (JaxTensors are meta to C++)",
}
