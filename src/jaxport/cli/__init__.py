"""The `jaxport` command line: one module per command.

    jaxport inspect FILE     inspect.py   a model file described without running it
    jaxport verify FILE      verify.py    jaxport against onnxruntime / PyTorch on the same inputs
    jaxport convert FILE     convert.py   standalone JAX source plus weights
    jaxport demo             demo.py      the real all-MiniLM-L6-v2 converted and compared

Exit codes: 0 success (for `verify`: every output matches), 1 `verify` found a mismatch (with
`--localize`, also a diverging node), 2 the model could not be read, converted, written out or run
(the reason is printed on stderr).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import sys

_LOWERINGS_HELP = ("a Python module (dotted name, or a .py file) of your own to import first: its "
                   "jaxport.register_lowering calls give ops jaxport lacks their lowerings, and a dict "
                   "LOWERINGS = {op: function} in it replaces any lowering for this command, as "
                   "`with jaxport.lowerings(LOWERINGS)` would (repeatable)")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="jaxport", description="PyTorch and ONNX models as JAX functions.")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("demo", help="convert the real all-MiniLM-L6-v2 and compare it with PyTorch")

    inspect = commands.add_parser("inspect", help="summarize an .onnx or .pt2 model file")
    inspect.add_argument("file", help="an .onnx file or a torch.export.save'd .pt2 file")
    inspect.add_argument("--json", action="store_true", help="print the summary as JSON")
    inspect.add_argument("--lowerings", action="append", default=[], metavar="MODULE", help=_LOWERINGS_HELP)

    verify = commands.add_parser(
        "verify", help="run a model through jaxport and its reference (onnxruntime / PyTorch) and compare"
    )
    verify.add_argument("file", help="an .onnx file or a torch.export.save'd .pt2 file")
    verify.add_argument("--inputs", help=".npz of inputs (by input name, or positional arr_0, arr_1, ...; other "
                        "names are errors); default: random inputs of the declared shapes")
    verify.add_argument("--dim", action="append", default=[], metavar="NAME=SIZE",
                        help="size of a symbolic dim of the random inputs: an ONNX dim name (default 1) or, "
                        "for a .pt2, a torch.export size symbol such as s0")
    verify.add_argument("--rtol", type=float, help="relative tolerance of float values (default: by dtype, "
                        "1e-4 for float32)")
    verify.add_argument("--atol", type=float, help="absolute tolerance of float values (default: by dtype, "
                        "1e-5 for float32)")
    verify.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    verify.add_argument("--localize", action="store_true", help="also run both node by node, each jaxport node "
                        "on the reference's inputs, and report the first node that diverges")
    verify.add_argument("--node-data", metavar="PATH", help="with --localize, for a .pt2: write each node's error "
                        "as Model Explorer's node data, to colour its graph of the model with (PATH: each node on the "
                        "reference's inputs, where a divergence starts; PATH with .propagated before its suffix: on "
                        "jaxport's own values, how it spreads)")
    verify.add_argument("--explore", action="store_true", help="with --localize, for a .pt2: open the model in "
                        "Model Explorer, its nodes coloured by their errors, until Ctrl+C (pip install "
                        "'jaxport[explore]')")
    verify.add_argument("--json", action="store_true", help="print the report as JSON")
    verify.add_argument("--lowerings", action="append", default=[], metavar="MODULE", help=_LOWERINGS_HELP)

    convert = commands.add_parser(
        "convert", help="write a model as standalone JAX source (model.py) plus its weights"
    )
    convert.add_argument("file", help="an .onnx file or a torch.export.save'd .pt2 file")
    convert.add_argument("-o", "--output", required=True, help="the directory to write")
    convert.add_argument("--force", action="store_true", help="write into a non-empty directory")
    convert.add_argument("--lowerings", action="append", default=[], metavar="MODULE", help=_LOWERINGS_HELP)
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
        replacements = _import_lowerings(getattr(opts, "lowerings", []))
        if opts.command == "inspect":
            from .inspect import run
        elif opts.command == "verify":
            from .verify import run
        else:
            from .convert import run
        from ..ops import registry

        with registry.lowerings(replacements):
            return run(opts)
    except (JaxportError, OSError) as e:
        print(f"jaxport {opts.command}: {e}", file=sys.stderr)
        return 2


def _import_lowerings(modules: list[str]) -> dict:
    """Import the user's modules of lowerings (their own code, named on the command line; never
    anything a model file names); returns the replacements their `LOWERINGS` dicts name."""
    from ..errors import InputError

    replacements: dict = {}
    for module in modules:
        try:
            if module.endswith(".py") or os.sep in module:
                if not os.path.isfile(module):
                    raise InputError(f"--lowerings {module}: no such file")
                name = "jaxport_user_lowerings_" + os.path.splitext(os.path.basename(module))[0]
                spec = importlib.util.spec_from_file_location(name, module)
                loaded = importlib.util.module_from_spec(spec)
                sys.modules[name] = loaded  # so emit can import or copy its functions
                spec.loader.exec_module(loaded)
            else:
                loaded = importlib.import_module(module)
        except InputError:
            raise
        except Exception as e:
            raise InputError(f"--lowerings {module}: importing it failed: {type(e).__name__}: {e}") from None
        named = getattr(loaded, "LOWERINGS", {})
        if not isinstance(named, dict):
            raise InputError(f"--lowerings {module}: its LOWERINGS is a {type(named).__name__}, not a dict "
                             "of {op: function}")
        replacements.update(named)
    return replacements


if __name__ == "__main__":
    sys.exit(main())
