"""`jaxport convert`: a model file written out as standalone JAX source (model.py) plus its weights."""

from __future__ import annotations

from ..backends.codegen import emit
from .files import load_model


def run(opts) -> int:
    """Write the model into `opts.output`; report what was written."""
    emitted = emit(load_model(opts.file), opts.output, force=opts.force)
    for path in (emitted.module, emitted.weights, emitted.constants):
        if path is not None:
            print(f"wrote {path} ({path.stat().st_size:,} bytes)")
    print(f"{emitted.ops} ops in {emitted.lines} lines of source, generated in "
          f"{emitted.source_seconds:.2f} s" + ("" if emitted.formatted else
                                              " (not formatted: ruff is not installed)"))
    return 0
