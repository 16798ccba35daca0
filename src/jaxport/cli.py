"""The `jaxport` command line.

Exit codes: 0 success (for `verify`: every output matches), 1 `verify` found a mismatch,
2 the model could not be read, converted, written out or run (the reason is printed on stderr).
"""

from __future__ import annotations

import argparse
import json
import re
import sys


def _dims(values: list[str]) -> dict[str, int]:
    from .errors import InputError

    dims = {}
    for value in values:
        name, _, size = value.partition("=")
        if not name or not re.fullmatch(r"[0-9]+", size):
            raise InputError(f"--dim expects NAME=SIZE with SIZE a non-negative integer, got {value!r}")
        if name in dims:
            raise InputError(f"--dim gives {name} twice")
        dims[name] = int(size)
    return dims


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="jaxport", description="PyTorch and ONNX models as JAX functions.")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("demo", help="convert the real all-MiniLM-L6-v2 and compare it with PyTorch")

    inspect = commands.add_parser("inspect", help="summarize an .onnx or .pt2 model file")
    inspect.add_argument("file", help="an .onnx file or a torch.export.save'd .pt2 file")
    inspect.add_argument("--json", action="store_true", help="print the summary as JSON")

    verify = commands.add_parser(
        "verify", help="run a model through jaxport and its reference (onnxruntime / PyTorch) and compare"
    )
    verify.add_argument("file", help="an .onnx file or a torch.export.save'd .pt2 file")
    verify.add_argument("--inputs", help=".npz of inputs (by input name, or positional arr_0, arr_1, ...; other "
                        "names are errors); default: random inputs of the declared shapes")
    verify.add_argument("--dim", action="append", default=[], metavar="NAME=SIZE",
                        help="size of a symbolic dim of the random inputs: an ONNX dim name (default 1) or, "
                        "for a .pt2, a torch.export size symbol such as s0")
    verify.add_argument("--rtol", type=float, default=1e-4)
    verify.add_argument("--atol", type=float, default=1e-5)
    verify.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    verify.add_argument("--json", action="store_true", help="print the report as JSON")

    convert = commands.add_parser(
        "convert", help="write a model as standalone JAX source (model.py) plus its weights"
    )
    convert.add_argument("file", help="an .onnx file or a torch.export.save'd .pt2 file")
    convert.add_argument("-o", "--output", required=True, help="the directory to write")
    convert.add_argument("--force", action="store_true", help="write into a non-empty directory")
    return parser


def main(argv: list[str] | None = None) -> int:
    opts = _parser().parse_args(argv)
    if opts.command == "demo":
        from .demo import main as demo

        return demo()
    from .errors import JaxportError

    try:
        return _run(opts)
    except (JaxportError, OSError) as e:
        print(f"jaxport {opts.command}: {e}", file=sys.stderr)
        return 2


def _run(opts) -> int:
    import dataclasses

    from . import tools

    if opts.command == "inspect":
        info = tools.summarize(opts.file)
        print(json.dumps(info, indent=2) if opts.json else tools.format_summary(info))
        return 0
    if opts.command == "verify":
        result = tools.verify(opts.file, inputs_npz=opts.inputs, rtol=opts.rtol, atol=opts.atol,
                              seed=opts.seed, dims=_dims(opts.dim))
        if opts.json:
            report = dataclasses.asdict(result)
            report["passed"] = result.passed
            print(json.dumps(report, indent=2, default=str))
        else:
            print(tools.format_verification(result))
        return 0 if result.passed else 1
    if opts.command == "convert":
        from .backends.codegen import emit

        emitted = emit(tools.load_model(opts.file), opts.output, force=opts.force)
        for path in (emitted.module, emitted.weights, emitted.constants):
            if path is not None:
                print(f"wrote {path} ({path.stat().st_size:,} bytes)")
        print(f"{emitted.ops} ops in {emitted.lines} lines of source, generated in "
              f"{emitted.source_seconds:.2f} s" + ("" if emitted.formatted else
                                                  " (not formatted: ruff is not installed)"))
        return 0
    return 2


if __name__ == "__main__":
    sys.exit(main())
