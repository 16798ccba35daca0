"""The torch.export frontend: an `nn.Module` or an `ExportedProgram` becomes a `Translation`.

    capture     `torch.export` of a module (Hugging Face models in transformers' export context),
                and `lowerable`: only the ops jaxport lacks decomposed (`original_nodes`: which
                node of the graph before each node of the decomposed one came from)
    inplace     in-place ops rebound to functional ones; writes through views as scatters
    nodes       what each FX node records: source line, module path, shape and dtype
    translate   the graph walked into a `Program` with its state (`to_program`, `translate`); an
                AOTAutograd graph of plain inputs (`graph_program`, for the Dynamo backend)
    structure   the module's input and output structure over the program's flat values
"""

from .capture import export, lowerable, missing_decompositions, original_nodes, quiet_torch_logs
from .inplace import view_writes
from .translate import StateInfo, graph_program, to_program, translate

__all__ = [
    "StateInfo", "export", "graph_program", "lowerable", "missing_decompositions", "original_nodes",
    "quiet_torch_logs", "to_program", "translate", "view_writes",
]
