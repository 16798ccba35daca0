"""The one small program representation every frontend produces and every backend reads.

    program     `Program`, `Node`, `Ref`, `TensorSpec`, `Input`, `Subgraph`; `Translation`, a
                frontend's whole result (program, weights, input and output structure); `references`, the
                value names a node's arguments (or outputs) read
    interpret   `interpret`: runs a program with the registered lowerings
"""

from .interpret import interpret
from .program import (
           Input,
           Node,
           Program,
           Ref,
           Subgraph,
           TensorSpec,
           Translation,
           flatten_by_name,
           references,
)

__all__ = ["Input", "Node", "Program", "Ref", "Subgraph", "TensorSpec", "Translation", "flatten_by_name", "interpret",
           "references"]
