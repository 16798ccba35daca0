"""`jaxport verify`: the command line over `jaxport.verification`.

It reads the options and the `.npz` of inputs (without unpickling, `npz.py`), calls
`verification.verify_file`, and prints the report as text or JSON. The exit code is 0 when every
output matches (and, with `--localize`, no node diverges), 1 otherwise.

With `--localize`, `--node-data PATH` writes each node's error as Model Explorer's node data
(PATH: each node on the reference's inputs; PATH with `.propagated` before its suffix: on
jaxport's own values), and `--explore` opens the model in Model Explorer with them (the
`jaxport[explore]` extra), serving until Ctrl+C.
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
from pathlib import Path
from types import ModuleType

from .. import verification, versions
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
    kind = verification.model_file_kind(opts.file)
    explorer = _graph_options(opts, kind)  # said before the model runs
    inputs = (opts.inputs, read_npz(opts.inputs)) if opts.inputs else None
    report = verification.verify_file(opts.file, inputs, localize=opts.localize, rtol=opts.rtol, atol=opts.atol,
                                      seed=opts.seed, dims=dims)
    print(report.to_json() if opts.json else verification.format_report(report), flush=True)
    paths = _save_node_data(report, opts.node_data) if opts.node_data else None
    if explorer is not None:
        with tempfile.TemporaryDirectory(prefix="jaxport-node-data-") as folder:
            paths = paths or _save_node_data(report, os.path.join(folder, Path(opts.file).stem + ".errors.json"))
            explore(explorer, opts.file, paths)
    return 0 if report.passed else 1


def _graph_options(opts, kind: str) -> ModuleType | None:
    """Check `--node-data` and `--explore`; Model Explorer's module if `--explore` asks for it."""
    flag = "--node-data" if opts.node_data else "--explore" if opts.explore else None
    if flag is None:
        return None
    if not opts.localize:
        raise InputError(f"{flag} needs --localize (the node-by-node run is what measures each node)")
    if kind != "pt2":
        raise InputError(f"{flag} is for .pt2 files: the node data is keyed as Model Explorer's PyTorch adapter "
                         "names an exported program's nodes")
    if not opts.explore:
        return None
    try:
        return versions.require("ai-edge-model-explorer")
    except ImportError as e:
        raise InputError(f"--explore: {e}") from None


def _save_node_data(report: verification.VerificationReport, path: str) -> tuple[Path, Path]:
    """Both node data files: on the reference's inputs at `path`, on jaxport's own values beside it."""
    local = Path(path)
    propagated = local.with_name(f"{local.stem}.propagated{local.suffix or '.json'}")
    paths = (report.save_node_data(local), report.save_node_data(propagated, propagated=True))
    print(f"node data: {paths[0]} (each node on the reference's inputs), {paths[1]} (on jaxport's own values)",
          file=sys.stderr)
    return paths


def explore(explorer: ModuleType, model: str, node_data: tuple[Path, ...]) -> None:
    """Model Explorer's server on `model` with `node_data`, opened in the browser; until Ctrl+C."""
    config = explorer.config()
    config.add_model_from_path(os.path.abspath(model))
    for path in reversed(node_data):  # the graph is coloured by the last: where a divergence starts
        config.add_node_data_from_path(str(path))
    explorer.visualize_from_config(config)
