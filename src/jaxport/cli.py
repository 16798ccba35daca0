"""The `jaxport` command line."""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="jaxport", description="PyTorch and ONNX models as JAX functions.")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("demo", help="convert the real all-MiniLM-L6-v2 and compare it with PyTorch")
    opts = parser.parse_args(argv)
    if opts.command == "demo":
        from .demo import main as demo

        return demo()
    return 2


if __name__ == "__main__":
    sys.exit(main())
