"""Expected OpInfo failures of the indexing family (indexing; factories and random ops), every
path's: {"opinfo_id", "opinfo_id:torch.dtype" or "opinfo_id:dtype:path": Expected}."""

from tests.conformance.expectations import Expected

EXPECTED_FAILURES: dict[str, Expected] = {
    "unravel_index:*:eager": Expected(
        "PyTorch's Python implementation builds a helper with "
        "torch.tensor(device=indices.device) while torch-function modes are paused, so the request "
        "reaches C++, which has no jax device backend (JaxTensors are meta to C++); every sample",
        fails="error:NotImplementedError",
        detail=r"^eager: NotImplementedError: Could not run 'aten::empty_strided' with arguments from the 'jax' backend",
    ),
}
