"""MkDocs hook for the API reference (docs/reference/): the command line's help, and a check that
the top-level page lists the whole top-level API.

- docs/reference/cli.md holds the marker `<!-- jaxport-cli-help -->`; the hook puts in its place
  the help of `jaxport` and of each of its commands, from the parser `jaxport.cli` builds, so the
  page cannot drift from the options the command takes. The parser's module is loaded from its
  file on its own: its top level imports only the standard library (a command's module, and with
  it torch and JAX, is imported once the command is chosen), so the build needs neither.
- docs/reference/index.md must link every name of `jaxport.__all__` (as "[`name`][...]"): a name
  added to the API without its entry there fails the build, as a link to a name that is not
  rendered does.
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
from pathlib import Path

from mkdocs.exceptions import PluginError

SRC = Path(__file__).resolve().parents[2] / "src" / "jaxport"
MARKER = "<!-- jaxport-cli-help -->"
WIDTH = 100


def _cli_parser() -> argparse.ArgumentParser:
    spec = importlib.util.spec_from_file_location("_jaxport_cli_for_docs", SRC / "cli" / "__init__.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module._parser()


def _help(parser: argparse.ArgumentParser) -> str:
    parser.formatter_class = lambda prog: argparse.HelpFormatter(prog, width=WIDTH)
    if hasattr(parser, "color"):  # Python 3.14: no colour codes in the page
        parser.color = False
    return parser.format_help().rstrip()


def cli_help() -> str:
    """The help of `jaxport` and of each command, as Markdown sections."""
    parser = _cli_parser()
    commands = next(a.choices for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    parts = ["## jaxport", "", "```text", _help(parser), "```"]
    for name, command in commands.items():
        parts += ["", f"## jaxport {name}", "", "```text", _help(command), "```"]
    return "\n".join(parts)


def top_level_names() -> list[str]:
    """`jaxport.__all__`, read from src/jaxport/__init__.py without importing it."""
    tree = ast.parse((SRC / "__init__.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__all__" for t in node.targets):
            return list(ast.literal_eval(node.value))
    raise PluginError("src/jaxport/__init__.py has no __all__")


def on_page_markdown(markdown: str, page, **kwargs) -> str:
    if page.file.src_uri == "reference/index.md":
        missing = [name for name in top_level_names() if f"[`{name}`][" not in markdown]
        if missing:
            raise PluginError(f"docs/reference/index.md does not list jaxport.{', jaxport.'.join(missing)} "
                              "(a row of its table each, linking to where the name is rendered)")
    if MARKER in markdown:
        markdown = markdown.replace(MARKER, cli_help())
    return markdown
