"""`jaxport convert`: a model file written out as standalone JAX source (model.py) plus its weights.

The output directory is written as `jaxport.emit` writes it: every file staged first, then put in
place as a whole with its manifest (`jaxport.files`), so a killed or failed convert (a full disk)
leaves an earlier output as it was, and the error is one line naming the file.
"""

from __future__ import annotations

from ..backends.codegen import emit
from .files import load_model


def run(opts) -> int:
    """Write the model into `opts.output`; report what was written."""
    emitted = emit(load_model(opts.file), opts.output, force=opts.force)
    for path in (emitted.module, emitted.weights, emitted.constants, emitted.manifest):
        if path is not None:
            print(f"wrote {path} ({path.stat().st_size:,} bytes)")
    print(f"{emitted.ops} ops in {emitted.lines} lines of source, generated in "
          f"{emitted.source_seconds:.2f} s" + ("" if emitted.formatted else
                                              " (not formatted: ruff is not installed)"))
    return 0
