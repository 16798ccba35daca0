"""Expected OpInfo failures by op family; `tests/conformance/opinfo/expected_failures.py` merges them."""


def by_cause(causes: dict[str, tuple[str, ...]], paths: tuple[str, ...]) -> dict[str, str]:
    """{"opinfo_id:*:path" or "opinfo_id:torch.dtype:path": reason} for ops listed under their
    cause's reason, each given as "opinfo_id" (every dtype) or "opinfo_id:torch.dtype" (one)."""
    return {
        f"{op}:{path}" if ":" in op else f"{op}:*:{path}": reason
        for reason, ops in causes.items() for op in ops for path in paths
    }
