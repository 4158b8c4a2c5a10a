"""What this package knows about one imported graph, beyond what onnx-graphsurgeon holds: one
typed record per graph (`GraphSession`), found from the graph by `session_of`.

Every pass takes and returns onnx-graphsurgeon's `gs.Graph`, so the record travels with the
graph: it is kept in the graph's `__dict__` under one name (gs.Graph's `__getattr__` logs
every miss, so it is never looked up as an attribute). Per-node and per-tensor facts stay on
those objects, as graphsurgeon's own `node.id` does (graph/index.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import onnx
import onnx_graphsurgeon as gs

_SESSION = "_eg_session"


@dataclass(frozen=True)
class TensorType:
    """Element type and shape (ints, symbolic names, or None per dim; None when rank unknown)."""

    elem_type: int  # onnx.TensorProto.DataType, 0 when unknown
    shape: tuple[int | str | None, ...] | None

    @property
    def rank(self) -> int | None:
        return None if self.shape is None else len(self.shape)

    @property
    def last_dim(self) -> int | None:
        if not self.shape:
            return None
        last = self.shape[-1]
        return last if isinstance(last, int) else None

    def type_str(self) -> str | None:
        """'tensor(float)' and the like, as operator schemas spell type constraints."""
        if not self.elem_type:
            return None
        return f"tensor({onnx.TensorProto.DataType.Name(self.elem_type).lower()})"


class Names:
    """Allocates node and tensor names that are unique in the graph."""

    def __init__(self, taken: set[str]) -> None:
        self.taken = taken

    def fresh(self, base: str) -> str:
        name, i = base, 1
        while name in self.taken:
            i += 1
            name = f"{base}_{i}"
        self.taken.add(name)
        return name


@dataclass(eq=False)
class GraphSession:
    """One graph's record. The main graph's holds the model-wide facts (model, types, names,
    domains, sync count); a subgraph's names its main graph (`root`)."""

    #: subgraph: the main graph it belongs to (None for the main graph itself)
    root: gs.Graph | None = None
    #: the proto the graph was imported from (GraphProto, or FunctionProto for a function)
    src: onnx.GraphProto | onnx.FunctionProto | None = None
    #: main graph: the ModelProto it was loaded from
    model: onnx.ModelProto | None = None
    #: main graph: the edit count when `model` last matched the graph (-1: never)
    synced: int = -1
    #: main graph: the inferred types (None until asked for, and after the node list changed)
    types: dict[str, TensorType] | None = None
    #: main graph: the name allocator (None until asked for, and after a rename)
    names: Names | None = None
    #: main graph: domain → opset version to import when saved
    domains: dict[str, int] = field(default_factory=dict)
    #: nodes made and not yet placed by `set_nodes`
    made: list[gs.Node] = field(default_factory=list)
    #: initializer names no node read on load (None: not an imported GraphProto)
    unread: set[str] | None = None
    #: those initializers, as Constants a pass may change
    unread_consts: dict[str, gs.Constant] = field(default_factory=dict)
    #: initializers that are also graph inputs
    input_inits: set[str] = field(default_factory=set)
    #: (edit count, graphsurgeon's tensor map) as last built
    tensors: tuple[int, dict[str, gs.Tensor]] | None = None
    #: key → (edit count, a fact `cached` computed)
    memo: dict[str, tuple[int, Any]] = field(default_factory=dict)


def session_of(graph: gs.Graph) -> GraphSession:
    """`graph`'s record, made empty the first time it is asked for."""
    found = graph.__dict__.get(_SESSION)
    if found is None:
        found = graph.__dict__[_SESSION] = GraphSession()
    return found


def loaded_model(graph: gs.Graph) -> onnx.ModelProto:
    """The ModelProto the main graph was loaded from (a graph not loaded by graph.load has
    none: a bug in the caller)."""
    model = session_of(graph).model
    if model is None:
        raise RuntimeError("this graph was not loaded with export_gelu.graph.load")
    return model
