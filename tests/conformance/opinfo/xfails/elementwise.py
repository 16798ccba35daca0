"""Expected OpInfo failures owned by the elementwise family: {"opinfo_id" or "opinfo_id:torch.dtype": reason}."""

EXPECTED_FAILURES: dict[str, str] = {
}
