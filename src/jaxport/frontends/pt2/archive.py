"""`.pt2` archives read without running code from them.

`torch.export.load` unpickles the archive's sample inputs, pickled weights and constants and
custom objects without restriction, `exec`s the program's recorded guards and parses its symbolic
sizes with `sympy.sympify` (which `eval`s), and loads AOTInductor libraries: a crafted file runs
code. `load(path)` reads what jaxport needs itself, from the zip:

  models/model.json                   the program (JSON): every symbolic-size expression is checked
                                      to be plain arithmetic on symbols, with numbers of bounded
                                      size, before sympy parses it, and its guards are dropped
                                      (jaxport checks inputs itself)
  archive_format, byteorder           checked ('pt2', this machine's byte order)
  data/weights/, data/constants/      raw tensor bytes described by *_config.json, each checked
                                      against its size, strides and offset before it is viewed
  pickled tensors                     `torch.load(weights_only=True)` only (a restricted unpickler
                                      that builds tensors and plain containers and calls nothing
                                      else); anything it refuses is one `ModelFileError` naming
                                      the member
  custom and opaque objects           refused: they are arbitrary pickles
  data/sample_inputs/                 never read (jaxport does not use them)

then hands the parsed program and tensors to torch's deserializer, whose verifier admits only
ATen ops, higher-order ops and a fixed list of builtins as graph targets. Archives from torch
before 2.7 (`serialized_exported_program.json` at the root) are read the same way. Every failure is
one `ModelFileError` line naming the file and the member.
"""

from __future__ import annotations

import ast
import io
import json
import math
import re
import sys
import warnings
import zipfile
import zlib
from typing import Any

import sympy
import torch
import torch.utils._sympy.functions as torch_functions
from torch._export.serde import schema, serialize

from ...errors import ModelFileError, one_line
from ..torch_export import quiet_torch_logs

_MODEL = "model"  # the program torch.export.load returns
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_NUMBER = re.compile(r"[-+]?(\d+(\.\d*)?|\.\d+)([eE][-+]?\d+)?\Z|[-+]?(inf|nan)\Z")
_SYMBOL = re.compile(r"[a-z]+\d+\Z")  # torch's size symbols: s0, u3, zuf1, ...


class _Archive:
    """The zip's members by their name inside the archive's root folder, read with size checks."""

    def __init__(self, path: str):
        self.path = path
        try:
            self.zip = zipfile.ZipFile(path)
            infos = self.zip.infolist()
        except (zipfile.BadZipFile, OSError, EOFError, ValueError) as e:
            raise self.unreadable(f"not a zip archive ({type(e).__name__}: {e})") from None
        names = [i.filename for i in infos if not i.is_dir()]
        root = names[0].split("/", 1)[0] + "/" if names and "/" in names[0] else ""
        if not root or not all(n.startswith(root) for n in names):
            root = ""  # torch before 2.7 wrote its files at the top level
        self.members = {i.filename[len(root):]: i for i in infos if not i.is_dir()}

    def unreadable(self, reason: str) -> ModelFileError:
        return ModelFileError(f"{self.path} is not a readable torch.export archive: {one_line(reason)}")

    def size(self, name: str) -> int:
        return self.members[name].file_size

    def read(self, name: str) -> bytes:
        info = self.members.get(name)
        if info is None:
            raise self.unreadable(f"{name} is missing")
        if info.compress_type == zipfile.ZIP_STORED and info.compress_size != info.file_size:
            raise self.unreadable(f"{name} is corrupt (its sizes disagree)")
        try:
            return self.zip.read(info)
        except (zipfile.BadZipFile, zlib.error, OSError, EOFError, ValueError, NotImplementedError) as e:
            raise self.unreadable(f"{name} cannot be read ({type(e).__name__}: {e})") from None

    def json(self, name: str) -> Any:
        try:
            return json.loads(self.read(name).decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise self.unreadable(f"{name} is not valid JSON ({e})") from None


def load(path: str):
    """The `ExportedProgram` saved at `path` (see the module docstring); no code from the file runs."""
    archive = _Archive(path)
    if "archive_format" in archive.members or f"models/{_MODEL}.json" in archive.members:
        fmt = archive.read("archive_format").decode("utf-8", "replace").strip() \
            if "archive_format" in archive.members else "pt2"
        if fmt != "pt2":
            raise archive.unreadable(f"archive_format is {fmt[:40]!r}, not 'pt2'")
        order = archive.read("byteorder").decode("utf-8", "replace").strip() \
            if "byteorder" in archive.members else sys.byteorder
        if order != sys.byteorder:
            raise archive.unreadable(f"its tensors are stored {order[:40]!r}-endian, and this machine is "
                                     f"{sys.byteorder}-endian")
        version = archive.read("archive_version").decode("utf-8", "replace").strip() \
            if "archive_version" in archive.members else "0"
        if version != "0":
            raise archive.unreadable(f"archive version {version[:40]!r} is newer than this torch reads (0)")
        program_name = f"models/{_MODEL}.json"
        if program_name not in archive.members and any(n.startswith("data/aotinductor/") for n in archive.members):
            raise ModelFileError(f"{path} holds only AOTInductor-compiled code, which jaxport does not load "
                                 "(it converts torch.export programs: save one with torch.export.save)")
        document = archive.json(program_name)
        state_dict = _payloads(archive, f"data/weights/{_MODEL}_weights_config.json", "data/weights/", "weight",
                               legacy=f"data/weights/{_MODEL}.pt")
        constants = _payloads(archive, f"data/constants/{_MODEL}_constants_config.json", "data/constants/",
                              "constant", legacy=f"data/constants/{_MODEL}.pt")
    elif "serialized_exported_program.json" in archive.members:
        program_name = "serialized_exported_program.json"
        document = archive.json(program_name)
        state_dict = _unpickle(archive, "serialized_state_dict.pt", "the weights", dict)
        constants = (_unpickle(archive, "serialized_constants.pt", "the constants", dict)
                     if "serialized_constants.pt" in archive.members else {})
    else:
        raise archive.unreadable(f"it holds no models/{_MODEL}.json (is it a torch.export.save'd file?)")

    _check_expressions(document, path, program_name)
    try:
        program = serialize._dict_to_dataclass(schema.ExportedProgram, document)
    except Exception as e:  # noqa: BLE001 - any schema mismatch means "unreadable"
        raise archive.unreadable(f"{program_name} does not hold a torch.export program "
                                 f"({type(e).__name__}: {str(e)[:200]})") from None
    if hasattr(program, "guards_code"):
        program.guards_code = []  # Python source torch would exec; jaxport checks inputs itself
    with quiet_torch_logs(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return serialize.ExportedProgramDeserializer().deserialize(program, state_dict, constants, None)
        except Exception as e:  # noqa: BLE001 - torch's deserializer and verifier raise many kinds
            raise archive.unreadable(f"{program_name}: {type(e).__name__}: {str(e)[:300]}") from None


# -- tensors ------------------------------------------------------------------------------------


def _payloads(archive: _Archive, config_name: str, directory: str, kind: str, legacy: str) -> dict:
    """{fqn: tensor} from a weights or constants config and its raw (or restricted-pickle) members."""
    if legacy in archive.members and config_name not in archive.members:
        return _unpickle(archive, legacy, f"the {kind}s", dict)
    if config_name not in archive.members:
        raise archive.unreadable(f"{config_name} is missing")
    config = archive.json(config_name)
    entries = config.get("config") if isinstance(config, dict) else None
    if not isinstance(entries, dict):
        raise archive.unreadable(f"{config_name} has no 'config' table")
    storages: dict[tuple[str, Any], torch.Tensor] = {}
    out = {}
    for fqn, meta in entries.items():
        what = f"{kind} '{fqn}'"
        path_name = meta.get("path_name") if isinstance(meta, dict) else None
        if not isinstance(path_name, str):
            raise archive.unreadable(f"{config_name}: {what} names no member")
        member = directory + path_name
        if kind == "constant" and path_name.startswith(("custom_obj_", "opaque_obj_")):
            raise ModelFileError(
                f"{archive.path}: {what} ({member}) is a pickled "
                f"{'TorchScript' if path_name.startswith('custom_obj_') else 'Python'} object; jaxport does not "
                "unpickle objects from a file (unpickling can run code), and converts tensors only")
        if meta.get("use_pickle"):
            out[fqn] = _unpickle(archive, member, what, torch.Tensor)
            continue
        dtype, size, stride, offset, requires_grad = _tensor_meta(archive, config_name, what, meta.get("tensor_meta"))
        key = (path_name, dtype)
        if key not in storages:
            storages[key] = _storage(archive, member, dtype, what)
        storage = storages[key]
        numel = 1
        for n in size:
            numel *= n
        extent = 0 if numel == 0 else offset + sum((n - 1) * s for n, s in zip(size, stride)) + 1
        if extent > storage.numel() and storage.numel() == 0:
            # Saved without data: exported on the meta device (or from fake tensors). Weights and
            # buffers (non-persistent ones are kept among the constants) convert as weights without
            # values, which JaxModel.load_weights fills; the translation refuses true constants.
            tensor = torch.empty_strided(size, stride, dtype=dtype, device="meta")
        elif extent > storage.numel():
            raise ModelFileError(f"{archive.path}: {what} ({member}) holds {storage.numel():,} values of "
                                 f"{str(dtype).removeprefix('torch.')}, fewer than its shape {list(size)} "
                                 f"(strides {list(stride)}, offset {offset}) needs: the archive is truncated or corrupt")
        else:
            tensor = torch.as_strided(storage, size, stride, offset)
        if meta.get("is_param"):
            tensor = torch.nn.Parameter(tensor, requires_grad=bool(requires_grad) and (
                tensor.is_floating_point() or tensor.is_complex()))
        out[fqn] = tensor
    return out


def _tensor_meta(archive: _Archive, config_name: str, what: str, meta) -> tuple:
    def ints(values, name):
        if not isinstance(values, list) or not all(
                isinstance(v, dict) and type(v.get("as_int")) is int and v["as_int"] >= 0 for v in values):
            raise archive.unreadable(f"{config_name}: {what} has no valid {name} (non-negative integers)")
        return tuple(v["as_int"] for v in values)

    if not isinstance(meta, dict):
        raise archive.unreadable(f"{config_name}: {what} has no tensor_meta")
    try:
        dtype = serialize._SERIALIZE_TO_TORCH_DTYPE[schema.ScalarType(meta.get("dtype"))]
    except (ValueError, KeyError):
        raise archive.unreadable(f"{config_name}: {what} has an unknown dtype {meta.get('dtype')!r}") from None
    if not isinstance(dtype, torch.dtype):
        raise archive.unreadable(f"{config_name}: {what} has an unknown dtype {meta.get('dtype')!r}")
    size, stride = ints(meta.get("sizes"), "sizes"), ints(meta.get("strides"), "strides")
    (offset,) = ints([meta.get("storage_offset")], "storage_offset")
    if len(size) != len(stride):
        raise archive.unreadable(f"{config_name}: {what} has {len(size)} sizes but {len(stride)} strides")
    return dtype, size, stride, offset, meta.get("requires_grad")


def _storage(archive: _Archive, member: str, dtype, what: str):
    """The member's bytes as a flat tensor of `dtype`, its size checked before it is read."""
    if member not in archive.members:
        raise archive.unreadable(f"{member} (of {what}) is missing")
    itemsize = torch.empty((), dtype=dtype).element_size()
    nbytes = archive.size(member)
    if nbytes % itemsize:
        raise archive.unreadable(f"{member} (of {what}) has {nbytes} bytes, not a whole number of "
                                 f"{str(dtype).removeprefix('torch.')} values")
    if nbytes == 0:
        return torch.empty(0, dtype=dtype)
    data = bytearray(archive.read(member))
    if len(data) != nbytes:
        raise archive.unreadable(f"{member} (of {what}) is truncated")
    return torch.frombuffer(data, dtype=dtype)


def _unpickle(archive: _Archive, member: str, what: str, kind: type):
    """`torch.load(weights_only=True)` of a member: tensors and plain containers only."""
    data = archive.read(member)
    try:
        with warnings.catch_warnings(), quiet_torch_logs():
            warnings.simplefilter("ignore")
            value = torch.load(io.BytesIO(data), weights_only=True, map_location="cpu")
    except Exception as e:  # noqa: BLE001 - the restricted unpickler's refusal, or a corrupt pickle
        raise ModelFileError(f"{archive.path}: {what} ({member}) is a pickle jaxport will not load: "
                             f"{_unpickling_reason(e)}; jaxport unpickles only plain tensors "
                             "(torch.load(weights_only=True)), since other pickles can run code") from None
    if kind is dict:
        if not isinstance(value, dict) or not all(isinstance(v, torch.Tensor) for v in value.values()):
            raise ModelFileError(f"{archive.path}: {what} ({member}) is not a dict of tensors")
    elif not isinstance(value, kind):
        raise ModelFileError(f"{archive.path}: {what} ({member}) holds a {type(value).__name__}, not a tensor")
    return value


def _unpickling_reason(error: Exception) -> str:
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    noise = ("Weights only load failed", "Check the documentation", "Please file an issue")
    kept = [line for line in lines if not line.startswith(noise)]
    reason = " ".join(kept or lines[:1]) or type(error).__name__
    return reason[:200]


# -- symbolic sizes ---------------------------------------------------------------------------


#: sympy names a size expression may use besides torch's own size functions: its arithmetic,
#: comparisons and logic (what torch prints), none of which can take long on small numbers.
_SYMPY_NAMES = ("Symbol", "Dummy", "Integer", "Float", "Rational", "Add", "Mul", "Pow", "Max", "Min", "Mod",
                "floor", "ceiling", "Abs", "sign", "Eq", "Ne", "Lt", "Le", "Gt", "Ge", "Equality", "Unequality",
                "StrictLessThan", "StrictGreaterThan", "LessThan", "GreaterThan", "And", "Or", "Not", "Xor",
                "Piecewise", "ITE", "oo", "zoo", "nan", "true", "false", "pi", "E", "I")
#: The most bits a number in a size expression may need (sympy evaluates `2**2**40` eagerly).
_MAX_BITS = 4096


def _sympy_names() -> frozenset[str]:
    """Names an expression may use: the sympy names above and torch's size functions."""
    names = set(_SYMPY_NAMES)
    for name in dir(torch_functions):
        obj = getattr(torch_functions, name, None)
        if not name.startswith("_") and isinstance(obj, type) and issubclass(obj, sympy.Basic):
            names.add(name)
    return frozenset(names)


def _bits(node: ast.AST) -> float:
    """An upper bound on the bits of any number sympy computes evaluating `node` (a symbol counts
    as 64 bits); an exponent or shift must be a literal or a symbol, never arithmetic."""

    def exponent(base: ast.AST, power: ast.AST, shift: bool = False) -> float:
        if isinstance(power, ast.Name) or (isinstance(power, ast.Call) and isinstance(power.func, ast.Name)
                                           and power.func.id in ("Symbol", "Dummy")):
            return 64  # stays symbolic: nothing is computed
        if isinstance(power, ast.UnaryOp) and isinstance(power.op, ast.USub):
            power = power.operand
        if not (isinstance(power, ast.Constant) and type(power.value) in (int, float)):
            return math.inf
        n = abs(power.value)
        if n > _MAX_BITS:
            return math.inf
        return _bits(base) + n if shift else _bits(base) * max(n, 1)

    if isinstance(node, ast.Expression):
        return _bits(node.body)
    if isinstance(node, ast.Constant):
        return max(1, abs(node.value).bit_length()) if type(node.value) is int else 64
    if isinstance(node, ast.Name):
        return 64
    if isinstance(node, ast.UnaryOp):
        return _bits(node.operand)
    if isinstance(node, ast.BinOp):
        if isinstance(node.op, ast.Pow):
            return exponent(node.left, node.right)
        if isinstance(node.op, ast.LShift):
            return exponent(node.left, node.right, shift=True)
        a, b = _bits(node.left), _bits(node.right)
        return a + b if isinstance(node.op, (ast.Mult, ast.MatMult)) else max(a, b) + 1
    if isinstance(node, ast.Call):
        name = node.func.id if isinstance(node.func, ast.Name) else ""
        if name in ("Symbol", "Dummy", "Float"):
            return 64
        if name in ("Pow", "PowByNatural", "FloatPow", "LShift") and len(node.args) == 2:
            return exponent(*node.args, shift=name == "LShift")
        parts = [_bits(a) for a in node.args] + [_bits(k.value) for k in node.keywords]
        return sum(parts) + 1
    return max((_bits(child) for child in ast.iter_child_nodes(node)), default=0)


def _safe_expression(text: str, names: frozenset[str]) -> bool:
    """Whether `text` is plain sympy arithmetic on size symbols: calls of sympy expression classes,
    numbers, symbol names, operators; strings only as the name of a `Symbol` or the digits of a
    `Float`. No attribute access, no other names, so `sympify`'s `eval` can call nothing else."""
    if len(text) > 20_000:
        return False
    try:
        tree = ast.parse(text, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    allowed = (ast.Expression, ast.BinOp, ast.UnaryOp, ast.BoolOp, ast.Compare, ast.Tuple, ast.Load,
               ast.operator, ast.unaryop, ast.boolop, ast.cmpop, ast.keyword)

    def ok(node: ast.AST) -> bool:
        if isinstance(node, ast.Call):
            if not (isinstance(node.func, ast.Name) and node.func.id in names):
                return False
            args = list(node.args)
            if args and isinstance(args[0], ast.Constant) and isinstance(args[0].value, str):
                value = args[0].value
                pattern = {"Symbol": _IDENTIFIER, "Dummy": _IDENTIFIER, "Float": _NUMBER}.get(node.func.id)
                if pattern is None or not pattern.match(value) or value.startswith("__"):
                    return False
                args = args[1:]
            return all(ok(a) for a in args) and all(
                k.arg is not None and not k.arg.startswith("_") and ok(k.value) for k in node.keywords)
        if isinstance(node, ast.Name):
            return node.id in names or bool(_SYMBOL.match(node.id))
        if isinstance(node, ast.Constant):
            return isinstance(node.value, (int, float, bool)) or node.value is None
        if not isinstance(node, allowed):
            return False
        return all(ok(child) for child in ast.iter_child_nodes(node))

    try:
        return ok(tree) and _bits(tree) <= _MAX_BITS
    except RecursionError:
        return False


def _check_expressions(document: Any, path: str, member: str) -> None:
    """Refuse a program whose symbolic sizes are not plain expressions (torch `sympify`s them)."""
    names = _sympy_names()
    stack = [document]
    while stack:
        item = stack.pop()
        if isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, dict):
            for key, value in item.items():
                if key == "expr_str" and not (isinstance(value, str) and _safe_expression(value, names)):
                    shown = repr(value)[:80]
                    raise ModelFileError(f"{path}: {member} records the symbolic size {shown}, which is not a "
                                         "plain expression of sizes; jaxport does not evaluate it (it could run code)")
                stack.append(value)
