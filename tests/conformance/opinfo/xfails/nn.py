"""Expected OpInfo failures owned by the nn family: {"opinfo_id" or "opinfo_id:torch.dtype": reason}."""

EXPECTED_FAILURES: dict[str, str] = {
    "nn.functional.ctc_loss:*:eager": "no lowering yet for aten._ctc_loss, which PyTorch's eager ctc_loss "
    "calls for the (log_probs, targets) layouts of two of the samples",
    "nn.functional.linear_cross_entropy.chunked": (
        "torch_nn._linear_cross_entropy_batch_chunked is a custom op with no decomposition; no lowering yet"
    ),
    "nn.functional.linear_cross_entropy.chunked_none": (
        "torch_nn._linear_cross_entropy_batch_chunked_no_reduction is a custom op with no "
        "decomposition; no lowering yet"
    ),
}
