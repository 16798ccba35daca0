"""`jaxport verify`: the command line over `jaxport.verification`.

It reads the options and the `.npz` of inputs (without unpickling, `npz.py`), calls
`verification.verify_file`, and prints the report as text or JSON. The exit code is 0 when every
output matches (and, with `--localize`, no node diverges), 1 otherwise.
"""

from __future__ import annotations

import re

from .. import verification
from ..errors import InputError
from .npz import read_npz


def _dims(values: list[str]) -> dict[str, int]:
    dims = {}
    for value in values:
        name, _, size = value.partition("=")
        if not name or not re.fullmatch(r"[0-9]+", size):
            raise InputError(f"--dim expects NAME=SIZE with SIZE a non-negative integer, got {value!r}")
        if name in dims:
            raise InputError(f"--dim gives {name} twice")
        dims[name] = int(size)
    return dims


def run(opts) -> int:
    """`jaxport verify`: 0 when the model matches its reference, 1 when it does not."""
    dims = _dims(opts.dim)
    if opts.inputs and dims:  # said before the .npz is read
        raise InputError(verification.DIMS_WITH_INPUTS)
    verification.model_file_kind(opts.file)
    inputs = (opts.inputs, read_npz(opts.inputs)) if opts.inputs else None
    report = verification.verify_file(opts.file, inputs, localize=opts.localize, rtol=opts.rtol, atol=opts.atol,
                                      seed=opts.seed, dims=dims)
    print(report.to_json() if opts.json else verification.format_report(report))
    return 0 if report.passed else 1
