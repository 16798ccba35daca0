"""Expected OpInfo failures of the shape family, every path's: {"opinfo_id", "opinfo_id:torch.dtype"
or "opinfo_id:dtype:path": Expected}."""

from tests.conformance.expectations import Expected

_STRIDED_SCATTER_GRADIENT = Expected(
    "PyTorch's own derivatives of as_strided_scatter are wrong where src overwrites self: writing "
    "a scalar into element 0 of [a, b, c], its gradient in self is [g0, 0, 0] where the function's "
    "is [0, g1, g2], which jaxport gives (OpInfo marks PyTorch's own gradient test of the op an "
    "expected failure)",
    fails="mismatch", detail=r"^vjp: gradient 0: ", blame="pytorch",
)

EXPECTED_FAILURES: dict[str, Expected] = {
    "as_strided_scatter:*:vjp": _STRIDED_SCATTER_GRADIENT,
    "to_sparse:*:vjp": Expected(
        "sparse tensors: jaxport converts dense (strided) tensors only; every sample",
        fails="missing", detail=r"^missing aten\.to_dense\.default, aten\.to_sparse\.(default|sparse_dim)$",
    ),
}
