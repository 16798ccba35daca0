"""The `jaxport` command line: one module per command.

    jaxport inspect FILE     inspect.py   a model file described without running it
    jaxport verify FILE      verify.py    jaxport against onnxruntime / PyTorch on the same inputs
    jaxport convert FILE     convert.py   standalone JAX source plus weights
    jaxport demo             demo.py      the real all-MiniLM-L6-v2 converted and compared

Exit codes: 0 success (for `verify`: every output matches), 1 `verify` found a mismatch,
2 the model could not be read, converted, written out or run (the reason is printed on stderr).
"""

from __future__ import annotations

import argparse
import sys


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
    # The command's module is imported once it is chosen, so that `jaxport --help` and argument
    # errors answer without importing torch and JAX (seconds).
    if opts.command == "demo":
        from .demo import main as demo

        return demo()
    from ..errors import JaxportError

    try:
        if opts.command == "inspect":
            from .inspect import run
        elif opts.command == "verify":
            from .verify import run
        else:
            from .convert import run
        return run(opts)
    except (JaxportError, OSError) as e:
        print(f"jaxport {opts.command}: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
