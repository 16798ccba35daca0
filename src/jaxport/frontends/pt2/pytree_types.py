"""The Python types a `.pt2` archive's input and output trees name, made loadable before `torch.export.load`.

torch.export records a program's input and output structure as pytree specs that name each
container by a string: `transformers.modeling_outputs.SequenceClassifierOutput`, or
`transformers.cache_utils:DynamicCache` for a cache registered by transformers' exporter. Loading
needs every such name registered with torch's pytree, which happens only once the defining library
is imported (a `ModelOutput` registers itself when its class is created) or, for caches, once that
library registers them. `register_archive_types(path)` reads the names from the archive's JSON
(nothing is unpickled) and registers them, but only for the packages in `PACKAGES`, only when
installed, and only classes that are pytree nodes once their module is imported or that the
package's own registrar accepts; a name from a file never imports anything else. What cannot be
resolved is one `ModelFileError` line.
"""

from __future__ import annotations

import collections
import importlib
import importlib.metadata
import importlib.util
import json
import re
import zipfile
from collections.abc import Callable, Iterator

import torch.utils._pytree as pytree

from ...errors import ModelFileError, one_line

_IDENTIFIERS = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*\Z")


def _register_transformers(cls: type) -> None:
    """A transformers cache (the exporter's own rule: a `Cache` subclass or a `*Cache` class),
    registered the way transformers' exporter registers it when exporting."""
    from transformers.exporters import exporter_dynamo  # transformers: optional (`jaxport[hf]`)

    if exporter_dynamo.is_cache_class(cls):
        exporter_dynamo.register_pytree_node(cls)


# Packages whose types an archive may name, and how to register one of their classes that importing
# its module does not register by itself.
PACKAGES: dict[str, Callable[[type], None]] = {"transformers": _register_transformers}

# What a context written by transformers' exporter may name besides classes of `PACKAGES`: the
# containers its flattener writes as "seq" or "map" (it calls them with the items when unflattening).
_CONTAINERS = {"builtins:tuple": tuple, "builtins:list": list, "builtins:dict": dict, "builtins:set": set,
               "builtins:frozenset": frozenset, "collections:OrderedDict": collections.OrderedDict}


def _spec_types(spec: dict) -> Iterator[tuple[str, object]]:
    """(type name, context) of every node of a treespec's JSON schema."""
    stack = [spec]
    while stack:
        node = stack.pop()
        if not isinstance(node, dict):
            continue
        if isinstance(node.get("type"), str):
            yield node["type"], node.get("context")
        stack.extend(node.get("children_spec") or [])


def _archive_specs(path: str) -> list[tuple[str, dict]]:
    """("inputs" or "outputs", treespec schema) for each spec the archive's programs record."""
    def unreadable(what: str, e: Exception) -> ModelFileError:
        return ModelFileError(f"{path} is not a readable torch.export archive: {what} "
                              f"({type(e).__name__}: {one_line(e, 200)})")

    try:
        archive = zipfile.ZipFile(path)
    except Exception as e:  # noqa: BLE001 - a zip error of any kind means "unreadable"
        raise unreadable("not a zip archive", e) from None
    documents = []
    with archive:
        for name in archive.namelist():
            if name.endswith(".json") and (name.rsplit("/", 2)[-2:-1] == ["models"]
                                           or name.rsplit("/", 1)[-1] == "serialized_exported_program.json"):
                try:
                    documents.append(archive.read(name))
                except Exception as e:  # noqa: BLE001 - a CRC, zlib or truncation error
                    member = name.split("/", 1)[1] if "/" in name else name
                    raise unreadable(f"{member} cannot be read", e) from None
    specs = []
    for document in documents:
        try:
            entries = json.loads(document)["graph_module"]["module_call_graph"]
        except (ValueError, TypeError, KeyError):
            continue  # not a program; torch.export.load says what is wrong with it
        for entry in entries if isinstance(entries, list) else []:
            signature = entry.get("signature") if isinstance(entry, dict) else None
            for key, where in (("in_spec", "inputs"), ("out_spec", "outputs")):
                try:
                    _, schema = json.loads(signature[key])
                except (ValueError, TypeError, KeyError):
                    continue
                specs.append((where, schema))
    return specs


def _resolve(name: str, path: str, where: str) -> type:
    """The class `name` ("module.Class" or "module:Qual.Name") stands for, importing its module
    only if it lies in an installed package of `PACKAGES`."""
    module, sep, qualname = name.partition(":")
    if not sep:
        module, _, qualname = name.rpartition(".")
    package = module.split(".")[0]
    valid = (_IDENTIFIERS.match(module) and _IDENTIFIERS.match(qualname)
             and not any(part.startswith("_") for part in module.split("."))
             and not any(part.startswith("__") for part in qualname.split(".")))
    if not valid or package not in PACKAGES:
        raise ModelFileError(
            f"{path}: its {where} use the type {name!r}, which jaxport does not import from a file (it reads "
            f"types from {', '.join(sorted(PACKAGES))}); register that type with torch.utils._pytree, "
            "torch.export.load the file yourself and call jaxport.from_exported_program")
    if importlib.util.find_spec(package) is None:
        raise ModelFileError(f"{path}: its {where} use {name}; install {package} to read it (pip install {package})")
    try:
        found: object = importlib.import_module(module)
        for part in qualname.split("."):
            found = getattr(found, part)
    except Exception as e:  # noqa: BLE001 - a missing module or class, or one that fails to import
        try:
            version = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            version = ""
        raise ModelFileError(f"{path}: its {where} use {name}, which the installed {package} {version} cannot "
                             f"provide ({type(e).__name__}: {e}); install the version that saved it") from None
    owner = getattr(found, "__module__", "") or ""
    if not isinstance(found, type) or not (owner == package or owner.startswith(package + ".")):
        raise ModelFileError(f"{path}: its {where} use {name}, which is not a class of {package}")
    return found


def _check_context(context: object, name: str, path: str, where: str) -> None:
    """Refuse what transformers' exporter would call or instantiate when rebuilding a `name` from
    `context` unless it is a class of `PACKAGES` or a plain container (its JSON names classes as "p")."""
    try:
        value = json.loads(context) if isinstance(context, str) else None
    except ValueError:
        return
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, dict):
            stack.extend(item.values())
            if "_t" in item and "p" in item:
                target = item["p"]
                cls = _CONTAINERS.get(target) if isinstance(target, str) else None
                if cls is None:
                    cls = _resolve(str(target), path, f"{where} ({name})")
                kinds = {"seq": (tuple, list, set, frozenset), "map": (dict,)}.get(item["_t"])
                if kinds and not issubclass(cls, kinds):
                    raise ModelFileError(f"{path}: its {where} rebuild {name} with {target}, which is not a container")


def register_archive_types(path: str) -> None:
    """Register the pytree types the archive at `path` names (see the module docstring)."""
    for where, schema in _archive_specs(path):
        for name, context in _spec_types(schema):
            if name in pytree.SERIALIZED_TYPE_TO_PYTHON_TYPE and name.split(".")[0].split(":")[0] not in PACKAGES:
                continue  # torch's own containers (tuple, dict, OrderedDict, namedtuples, ...)
            cls = pytree.SERIALIZED_TYPE_TO_PYTHON_TYPE.get(name) or _resolve(name, path, where)
            if name not in pytree.SERIALIZED_TYPE_TO_PYTHON_TYPE and cls not in pytree.SUPPORTED_NODES:
                PACKAGES[cls.__module__.split(".")[0]](cls)
            if name not in pytree.SERIALIZED_TYPE_TO_PYTHON_TYPE:
                raise ModelFileError(f"{path}: its {where} use {name}, which is not a type {cls.__module__.split('.')[0]} "
                                     "registers as a pytree node (jaxport reads its model outputs and caches)")
            _check_context(context, name, path, where)
