"""Expected OpInfo failures owned by the shape family: {"opinfo_id" or "opinfo_id:torch.dtype": reason}."""

EXPECTED_FAILURES: dict[str, str] = {
    "tensor_split": (
        "split points given as a tensor input make the output shapes data-dependent: "
        "runs eagerly, cannot run under jax.jit"
    ),
}
