"""Expected OpInfo failures owned by the elementwise family: {"opinfo_id" or "opinfo_id:torch.dtype": reason}."""

EXPECTED_FAILURES: dict[str, str] = {
    "hash_tensor": "no lowering yet for aten.hash_tensor (an xor/sum reduction of raw bit patterns); the conversion error lists it",
}
