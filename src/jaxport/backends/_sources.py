"""Copy lowerings, and everything they use, out of jaxport's op library as source text.

A lowering's body may call helpers of its own module or of sibling modules
(`_helpers.normalize_axis`, `_promotion.opmath_type`) and read module-level
constants; `OpLibrary` follows those references through each module's globals and
collects every definition once, with the imports it needs. Names stay as written
unless two definitions share one (two families each have a `gelu`), in which case
the later is renamed everywhere it is referenced.
"""

from __future__ import annotations

import ast
import builtins
import functools
import importlib
import inspect
import io
import symtable
import textwrap
import tokenize
from dataclasses import dataclass, field

#: Top-level packages a generated module may import: JAX, NumPy and the standard library
#: modules the op library uses. Anything else a lowering reaches makes it uncopyable.
ALLOWED_IMPORTS = {"functools", "itertools", "jax", "math", "numpy", "operator"}
#: Where copyable definitions live.
LIBRARY_PREFIX = "jaxport.ops."


class NotCopyable(Exception):
    """A lowering reaches something that cannot be copied into a standalone module."""


@dataclass
class Definition:
    """One module-level statement of the op library: a function, class or assignment."""

    module: str
    name: str
    source: str
    line: int
    #: Free names it reads from its module's globals, as written there.
    reads: set[str] = field(default_factory=set)
    #: Names bound in any scope inside it (parameters, locals): never renamed.
    binds: set[str] = field(default_factory=set)


def _symbols(source: str) -> tuple[set[str], set[str]]:
    """(free names read from module scope, names bound in a nested scope) of `source`, one
    module-level statement."""
    top = symtable.symtable(source, "<definition>", "exec")
    reads, binds = set(), set()
    for symbol in top.get_symbols():
        if symbol.is_referenced() and not symbol.is_assigned() and not symbol.is_imported():
            reads.add(symbol.get_name())
    stack = list(top.get_children())
    while stack:
        table = stack.pop()
        stack.extend(table.get_children())
        for symbol in table.get_symbols():
            # Python 3.11's symtable also calls a nested function's locals global when the function
            # shares its name with the module's table ("top"), hence the is_local check.
            if symbol.is_global() and not symbol.is_declared_global() and not symbol.is_local():
                reads.add(symbol.get_name())
            elif symbol.is_parameter() or symbol.is_assigned() or symbol.is_imported():
                binds.add(symbol.get_name())
    return reads, binds


@functools.cache
def _module_statements(module_name: str) -> tuple[dict[str, ast.stmt], dict[str, str], str]:
    """({name: the module-level statement that binds it}, {alias: import line}, source)."""
    module = importlib.import_module(module_name)
    source = inspect.getsource(module)
    tree = ast.parse(source)
    statements, imports = {}, {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            statements[node.name] = node
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                for name in ast.walk(target):
                    if isinstance(name, ast.Name):
                        statements[name.id] = node
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            statements[node.target.id] = node
        elif isinstance(node, ast.Import):
            for alias in node.names:
                bound = alias.asname or alias.name.split(".")[0]
                imports[bound] = f"import {alias.name}" + (f" as {alias.asname}" if alias.asname else "")
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module != "__future__":
            for alias in node.names:
                bound = alias.asname or alias.name
                imports[bound] = f"from {node.module} import {alias.name}" + (
                    f" as {alias.asname}" if alias.asname else "")
    return statements, imports, source


def _statement_source(module_source: str, node: ast.stmt) -> str:
    """The statement's text, without decorators (they register the lowering, nothing else)."""
    lines = module_source.splitlines()  # a decorated def's `lineno` is its `def` line
    return textwrap.dedent("\n".join(lines[node.lineno - 1: node.end_lineno]))


class OpLibrary:
    """The lowerings a model uses and their dependencies, ready to be written out."""

    def __init__(self):
        self.definitions: dict[tuple[str, str], Definition] = {}
        self.imports: dict[str, str] = {}  # alias -> import line
        #: How each (module, name) a definition reads resolves: to a definition or an import.
        self._resolved: dict[tuple[str, str], tuple[str, str] | None] = {}
        #: Users' lowerings the generated module imports rather than copies: (module, name).
        self.imported: set[tuple[str, str]] = set()
        #: Users' lowerings by key: (where the lowering comes from, "copied" or "imported").
        self.user_lowerings: dict[tuple[str, str], tuple[str, str]] = {}

    def add(self, fn, *, user: str | None = None) -> tuple[str, str]:
        """Add lowering `fn` (and what it needs); returns its key (module, name).

        `user` says where a user's lowering comes from (`registry.provenance`). It is copied as
        jaxport's own are when it is a module-level function that reads only what they may
        (JAX, NumPy, the modules of `ALLOWED_IMPORTS`, its own module's definitions); otherwise
        the generated module imports it from its module, which must then be importable where
        the generated code runs."""
        module, name = getattr(fn, "__module__", None) or "?", getattr(fn, "__name__", "?")
        if user is None:
            if not module.startswith(LIBRARY_PREFIX):
                raise NotCopyable(f"{fn.__qualname__} is defined in {module}, outside jaxport's op library")
            self._add_statement(module, name)
            return module, name
        key = (module, name)
        if key in self.user_lowerings:
            return key
        saved = dict(self.definitions), dict(self.imports), dict(self._resolved)
        try:
            self._add_statement(module, name)
            self.user_lowerings[key] = (user, "copied")
            return key
        except (NotCopyable, OSError, TypeError, SyntaxError, ImportError) as e:
            self.definitions, self.imports, self._resolved = saved
            reason = str(e) or type(e).__name__
        if module == "__main__" or "<" in getattr(fn, "__qualname__", "<") or \
                getattr(importlib.import_module(module), name, None) is not fn:
            raise NotCopyable(f"{user}: it can be neither copied ({reason}) nor imported by the generated "
                              "code: define it at the top level of an importable module")
        self.imported.add(key)
        self.user_lowerings[key] = (user, "imported")
        return key

    def _add_statement(self, module: str, name: str) -> None:
        key = (module, name)
        if key in self.definitions:
            return
        statements, _, module_source = _module_statements(module)
        node = statements.get(name)
        if node is None:
            raise NotCopyable(f"{module}.{name} is not a module-level definition")
        source = _statement_source(module_source, node)
        reads, binds = _symbols(source)
        reads.discard(name)
        definition = Definition(module, name, source, node.lineno, reads, binds)
        self.definitions[key] = definition
        for read in sorted(reads):
            self._resolve(module, read)

    def _resolve(self, module: str, name: str) -> None:
        """Make `name`, as read in `module`, available: an import or a copied definition."""
        key = (module, name)
        if key in self._resolved:
            return
        statements, imports, _ = _module_statements(module)
        namespace = vars(importlib.import_module(module))
        if name in statements:
            self._resolved[key] = (module, name)
            self._add_statement(module, name)
            return
        if name in imports and imports[name].split()[1].split(".")[0] in ALLOWED_IMPORTS:
            line = imports[name]
            if self.imports.get(name, line) != line:
                raise NotCopyable(f"'{name}' means both `{self.imports[name]}` and `{line}`")
            self.imports[name] = line
            self._resolved[key] = None
            return
        value = namespace.get(name)
        origin = getattr(value, "__module__", None)
        if origin and origin.startswith(LIBRARY_PREFIX) and hasattr(value, "__name__"):
            # `from ._promotion import opmath_type`: copy it from where it is defined.
            self._resolved[key] = (origin, value.__name__)
            self._add_statement(origin, value.__name__)
            return
        if name not in namespace and hasattr(builtins, name):
            self._resolved[key] = None
            return
        raise NotCopyable(f"{module} reads '{name}', which a standalone module cannot import")

    def emitted_names(self, reserved: set[str]) -> dict[tuple[str, str], str]:
        """A unique, builtin-safe name for every definition and imported lowering, its own
        wherever possible."""
        taken = set(reserved) | set(self.imports)
        names = {}
        keys = sorted(self.definitions, key=lambda k: (k[0], self.definitions[k].line)) + sorted(self.imported)
        for key in keys:
            module, name = key
            candidate = name
            if candidate in taken or hasattr(builtins, candidate):
                family = module.rsplit(".", 2)[-2:]
                candidate = "_".join([name, *family]).replace(".", "_")
            base, counter = candidate, 2
            while candidate in taken:
                candidate, counter = f"{base}_{counter}", counter + 1
            taken.add(candidate)
            names[key] = candidate
        return names

    def import_lines(self, names: dict[tuple[str, str], str]) -> list[str]:
        """The import of each user lowering the generated module imports, as `names` names it."""
        lines = []
        for module, name in sorted(self.imported):
            alias = names[(module, name)]
            lines.append(f"from {module} import {name}" + ("" if alias == name else f" as {alias}"))
        return lines

    def render(self, names: dict[tuple[str, str], str]) -> list[str]:
        """Each definition's source, renamed where `names` says, in an order that defines
        what module-level statements read before they run."""
        ordered: list[tuple[str, str]] = []
        visiting: set[tuple[str, str]] = set()

        def visit(key):
            if key in ordered or key in visiting:
                return
            visiting.add(key)
            definition = self.definitions[key]
            for read in sorted(definition.reads):
                target = self._resolved.get((definition.module, read))
                if target is not None:
                    visit(target)
            visiting.discard(key)
            ordered.append(key)

        for key in sorted(self.definitions, key=lambda k: (k[0], self.definitions[k].line)):
            visit(key)
        blocks = []
        for key in ordered:
            definition = self.definitions[key]
            renames = {}
            for read in definition.reads:
                target = self._resolved.get((definition.module, read))
                if target is not None and names[target] != read:
                    renames[read] = names[target]
            if names[key] != definition.name:
                renames[definition.name] = names[key]
            clash = set(renames) & definition.binds
            if clash:
                raise NotCopyable(f"{definition.module}.{definition.name} binds {sorted(clash)} locally "
                                  "and reads them globally; cannot rename")
            blocks.append(rename(definition.source, renames))
        return blocks


def rename(source: str, renames: dict[str, str]) -> str:
    """`source` with the names in `renames` replaced where they are read or defined (not as
    attributes `x.name` or keyword arguments `f(name=...)`)."""
    if not renames:
        return source
    tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    significant = [t for t in tokens if t.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT,
                                                       tokenize.INDENT, tokenize.DEDENT)]
    edits, depth = [], 0
    for i, token in enumerate(significant):
        if token.type == tokenize.OP and token.string in "([{":
            depth += 1
        elif token.type == tokenize.OP and token.string in ")]}":
            depth -= 1
        if token.type != tokenize.NAME or token.string not in renames:
            continue
        before = significant[i - 1].string if i else ""
        after = significant[i + 1].string if i + 1 < len(significant) else ""
        if before == "." or (depth > 0 and after == "="):
            continue
        edits.append((token.start, token.end, renames[token.string]))
    lines = source.splitlines(keepends=True)
    for (row, start), (_, end), new in sorted(edits, reverse=True):
        line = lines[row - 1]
        lines[row - 1] = line[:start] + new + line[end:]
    renamed = "".join(lines)
    reads, _ = _symbols(renamed)
    stale = reads & (set(renames) - set(renames.values()))
    if stale:  # a use the tokenizer could not see (inside an f-string)
        raise NotCopyable(f"could not rename {sorted(stale)} in:\n{source[:200]}")
    return renamed
