"""The errors jaxport raises. Each says what went wrong and what to do next."""

from __future__ import annotations

from dataclasses import dataclass


def one_line(text: object, limit: int | None = None) -> str:
    """`text` (an exception, a message) on one line, its runs of whitespace made single spaces,
    cut to `limit` characters: how a dependency's message goes into a jaxport error line."""
    return " ".join(str(text).split())[:limit]


class JaxportError(Exception):
    """Base class of every error jaxport raises on purpose."""


class ExportError(JaxportError):
    """`torch.export` could not capture the model; the message is the exporter's reason."""


@dataclass(frozen=True)
class OpUse:
    """One place in a graph where an op is used."""

    op: str
    node: str
    module_path: str = ""
    source: str = ""

    def describe(self, multiline: bool = False) -> str:
        """Where the op is used, on one line (an error's context), or with the source line on a
        line of its own (`multiline`, for lists of uses)."""
        where = f"node {self.node}"
        if self.module_path:
            where += f" in module '{self.module_path}'"
        if self.source:
            where += ("\n        at " if multiline else " at ") + self.source
        return where


class UnsupportedOpsError(JaxportError):
    """The graph uses ops jaxport has no lowering for. Lists all of them at once."""

    def __init__(self, uses: list[OpUse]):
        self.uses = list(uses)
        by_op: dict[str, list[OpUse]] = {}
        for use in self.uses:
            by_op.setdefault(use.op, []).append(use)
        self.ops = sorted(by_op)
        lines = [f"jaxport has no lowering for {len(by_op)} op(s) used by this model:"]
        for op in self.ops:
            places = by_op[op]
            lines.append(f"  {op} ({len(places)} use{'s' if len(places) > 1 else ''})")
            for use in places[:3]:
                lines.append(f"    - {use.describe(multiline=True)}")
            if len(places) > 3:
                lines.append(f"    - ... and {len(places) - 3} more")
        lines.append(
            "Please report these ops; meanwhile, rewrite the model code around them "
            "or run that part with jaxport.interop.callback."
        )
        super().__init__("\n".join(lines))


class ModelFileError(JaxportError, ValueError):
    """A model file that cannot be read: missing, truncated, corrupt, or not a model."""


class UnsupportedDtypeError(JaxportError, TypeError):
    """The model holds values of a type jaxport cannot represent (strings, maps). Lists all."""

    def __init__(self, problems: list[str]):
        self.problems = list(problems)
        lines = [f"jaxport cannot hold the values of {len(problems)} part(s) of this model:"]
        lines += [f"  - {p}" for p in problems[:20]]
        if len(problems) > 20:
            lines.append(f"  - ... and {len(problems) - 20} more")
        super().__init__("\n".join(lines))


class LoweringError(JaxportError):
    """A lowering failed or disagreed with the shape/dtype torch.export recorded for a node."""


class InputError(JaxportError, TypeError):
    """A `JaxModel` was called with inputs of the wrong count, shape or dtype."""


class MaxBatchError(InputError):
    """`from_causal_lm` takes this model only with a smaller `max_batch` (RWKV: its batched
    decoding in transformers mixes the rows' states); `max_batch` is the largest it takes."""

    def __init__(self, message: str, max_batch: int):
        super().__init__(message)
        self.max_batch = max_batch


class SerializationError(JaxportError, ValueError):
    """A model that cannot be exported as asked, or a directory that holds no loadable artifact."""
