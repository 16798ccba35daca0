"""Expected ONNX failures of the reductions, ArgMax/ArgMin, TopK and CumSum: special values only
(every conformance case of them passes)."""

from tests.conformance.expectations import Expected

from .reasons import NAN_POSITION, ZERO_TIES

EXPECTED_FAILURES: dict[str, Expected] = {
    **{f"special_values:{case}": ZERO_TIES for case in ("ReduceMax", "ReduceMin")},
    **{f"special_values:{case}_nan": NAN_POSITION for case in (
        "ReduceMax", "ReduceMin", "ArgMax_last0", "ArgMax_last1", "ArgMin_last0", "ArgMin_last1", "TopK",
        "TopK_smallest")},
    "special_values:ReduceLogSumExp": Expected(
        "onnxruntime gives -inf for log(exp(-inf) + exp(-inf) + exp(-3.4e38)), whose value is -3.4e38 "
        "(jaxport shifts by the finite maximum)",
        fails="mismatch", detail=r"onnxruntime (np\.float32\()?-inf\)?$",
    ),
}
