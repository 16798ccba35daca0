"""What reaches a generated module's source from the model: names, comment text and literals.

Everything taken from a model file (node, value and graph names, module paths, source lines,
attribute names and strings) reaches the source only through here: as a sanitized identifier
(`_identifier`, `_Namer`), an ASCII-escaped string literal (`_string`) or comment text reduced to
printable ASCII without quotes or backslashes (`_text`), so a hostile model cannot inject code.
`_Literals` writes the non-tensor values nodes take (and small constants) as source.
"""

from __future__ import annotations

import builtins
import keyword
import math
import re

import jax
import numpy as np

from ..errors import JaxportError


class EmitError(JaxportError):
    """The model cannot be written as standalone source (the message says what and where)."""


# --- names and text from the model -----------------------------------------------------------


def _identifier(text: str, fallback: str = "value") -> str:
    """`text` as a lower-case Python identifier of ASCII letters, digits and underscores."""
    name = re.sub(r"[^0-9a-zA-Z]+", "_", text).strip("_").lower()
    name = re.sub(r"_+", "_", name)[:64].rstrip("_") or fallback
    return f"v_{name}" if name[0].isdigit() else name


def _text(text: str, limit: int = 160) -> str:
    """Comment and docstring text: printable ASCII only, no quotes or backslashes, one line."""
    cleaned = "".join(c if 32 <= ord(c) < 127 and c not in "\"'\\" else " " for c in str(text))
    cleaned = re.sub(r"\s+", " ", cleaned).strip()
    return cleaned if len(cleaned) <= limit else cleaned[: limit - 3] + "..."


class _Namer:
    def __init__(self, taken: set[str]):
        self.taken = set(taken)

    def fresh(self, text: str, fallback: str = "value") -> str:
        base = _identifier(text, fallback)
        if keyword.iskeyword(base) or hasattr(builtins, base) or base in ("l", "o", "i"):
            base = f"{base}_"
        name, counter = base, 2
        while name in self.taken:
            name, counter = f"{base}_{counter}", counter + 1
        self.taken.add(name)
        return name


def _string(text: str) -> str:
    """A double-quoted, ASCII-only Python string literal for any `text`."""
    literal = ascii(text)
    if literal.startswith("'") and '"' not in text:
        literal = '"' + literal[1:-1] + '"'
    return literal


def _where(source: str) -> str:
    """A torch source location without its directories: "linear.py:134 in forward: ..."."""
    return re.sub(r"^\S*[/\\]", "", source)


def _short_op(op: str) -> str:
    """"aten.linear.default" -> "linear", "onnx.MatMul-13" -> "matmul", "operator.getitem" -> "getitem"."""
    if op.startswith("aten.") or op.startswith("prims."):
        return op.split(".")[1]
    return op.rsplit(".", 1)[-1].split("-")[0]


# --- literals --------------------------------------------------------------------------------


def _dtype_literal(dtype) -> str:
    dtype = np.dtype(dtype)
    if dtype.name in ("bfloat16",) or dtype.name.startswith("float8") or dtype.name.startswith("int4") \
            or dtype.name.startswith("uint4") or dtype.name.startswith("float4"):
        return f"np.dtype(jnp.{dtype.name})"
    return f"np.dtype({_string(dtype.name)})"


def _float_literal(value: float) -> str:
    if math.isnan(value):
        return "math.nan"
    if math.isinf(value):
        return "math.inf" if value > 0 else "-math.inf"
    return repr(float(value))


class _Literals:
    """Python source for the non-tensor values nodes take (and small constants)."""

    def __init__(self, where: str):
        self.where = where

    def __call__(self, value) -> str:
        if value is None or isinstance(value, (bool, np.bool_)):
            return repr(None if value is None else bool(value))
        if isinstance(value, (int, np.integer)):
            return repr(int(value))
        if isinstance(value, (float, np.floating)):
            return _float_literal(float(value))
        if isinstance(value, (complex, np.complexfloating)):
            return f"complex({_float_literal(value.real)}, {_float_literal(value.imag)})"
        if isinstance(value, str):
            return _string(value)
        if isinstance(value, tuple):
            items = [self(v) for v in value]
            return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"
        if isinstance(value, list):
            return "[" + ", ".join(self(v) for v in value) + "]"
        if isinstance(value, dict):
            return "{" + ", ".join(f"{self(k)}: {self(v)}" for k, v in value.items()) + "}"
        if isinstance(value, np.dtype):
            return _dtype_literal(value)
        if isinstance(value, type) and issubclass(value, np.generic):
            return _dtype_literal(value)
        if isinstance(value, slice):
            return f"slice({self(value.start)}, {self(value.stop)}, {self(value.step)})"
        if value is Ellipsis:
            return "..."
        if isinstance(value, (np.ndarray, jax.Array)):
            return self.array(value)
        raise EmitError(f"{self.where}: cannot write a {type(value).__name__} argument as source")

    def array(self, value) -> str:
        array = np.asarray(value)
        body = self(array.tolist()) if array.ndim else self(array.item())
        text = f"np.array({body}, dtype={_dtype_literal(array.dtype)})"
        return f"jnp.asarray({text})" if isinstance(value, jax.Array) else text
