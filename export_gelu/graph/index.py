"""The one graph's index: the subgraph walk, producers and consumers (graphsurgeon's own
tensor ↔ node links: a subgraph node that reads an outer tensor is linked to it, so an
If/Loop/Scan body's read counts as a user), attributes, opsets; and what this package keeps
on graphsurgeon's objects (their own attributes, as gs's `node.id` is)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TypeVar

import onnx
import onnx_graphsurgeon as gs
from onnx_graphsurgeon.logger import G_LOGGER

from export_gelu.graph.session import session_of

DEFAULT_DOMAINS = ("", "ai.onnx")
FLOAT_TYPES = frozenset({onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16,
                         onnx.TensorProto.BFLOAT16, onnx.TensorProto.DOUBLE})
#: Constants with more elements than this are never read as formula literals.
MAX_LITERAL_ELEMENTS = 64

# What this package keeps on graphsurgeon's objects (their own attributes, as gs's `node.id`):
_SRC = "_eg_src"  # node / graph / function: the proto it was imported from
_KEY = "_eg_key"  # node: its op, domain, tensor names and attributes on import
_META = "_eg_meta"  # new node: the NodeProto whose metadata_props it carries
_TYPE = "_eg_type"  # tensor: (dtype, shape) as imported, to tell a type a pass changed
_VALUE = "_eg_value"  # tensor: its value as last read (with what held it, and how read)
_MADE_AT = "_eg_made_at"  # constant a pass made: the edit count then (new ones saved in order)
# What is known about a whole graph is its GraphSession (graph/session.py).
#: Edits made by the helpers here, counted (caches hold the count they were made at).
_EDITS = [0]
T = TypeVar("T")


def root_of(graph: gs.Graph) -> gs.Graph:
    """The main graph a subgraph belongs to (the graph itself for the main graph)."""
    return session_of(graph).root or graph


def graphs(graph: gs.Graph) -> Iterator[gs.Graph]:
    """`graph` and its subgraphs (If/Loop/Scan bodies), recursively: the one subgraph walk."""
    yield graph
    for node in graph.nodes:
        for value in node.attrs.values():
            if isinstance(value, gs.Graph):
                yield from graphs(value)


def walk(graph: gs.Graph) -> Iterator[gs.Node]:
    """Every node of `graph` and of its subgraphs."""
    for g in graphs(graph):
        yield from g.nodes


def subgraphs(node: gs.Node) -> list[gs.Graph]:
    return [v for v in node.attrs.values() if isinstance(v, gs.Graph)]


def is_default(node: gs.Node) -> bool:
    """Whether the node is in the default ONNX domain."""
    return (node.domain or "") in DEFAULT_DOMAINS


def producer(tensor: gs.Tensor) -> gs.Node | None:
    return tensor.inputs[0] if tensor.inputs else None


def consumers(tensor: gs.Tensor) -> list[gs.Node]:
    """The nodes that read `tensor`, subgraph nodes included."""
    return list(tensor.outputs)


def is_output(graph: gs.Graph, tensor: gs.Tensor) -> bool:
    return any(o is tensor or o.name == tensor.name for o in graph.outputs)


def users(graph: gs.Graph, tensor: gs.Tensor) -> int:
    """How many node inputs read `tensor` (a subgraph's too), plus one for a graph output."""
    return len(tensor.outputs) + int(is_output(graph, tensor))


def is_used(graph: gs.Graph, tensor: gs.Tensor) -> bool:
    return not tensor.is_empty() and users(graph, tensor) > 0


def tensors(graph: gs.Graph) -> dict[str, gs.Tensor]:
    """Name → tensor of every tensor the graph's nodes and inputs/outputs use."""
    return _own_tensors(graph)


def node_named(graph: gs.Graph) -> dict[str, gs.Node]:
    return {n.name: n for n in graph.nodes}


def metadata_props(node: gs.Node) -> list[onnx.StringStringEntryProto]:
    """The node's metadata_props (the dynamo exporter's module scopes): those it was imported
    with, or those of the node it was made `like`."""
    src = node.__dict__.get(_SRC) or node.__dict__.get(_META)
    return list(src.metadata_props) if src is not None else []


def opset(graph: gs.Graph, domain: str = "") -> int:
    """The model's opset for `domain` (the default domain's: what `graph.opset` says)."""
    root = root_of(graph)
    if domain in DEFAULT_DOMAINS:
        return int(root.opset or 0)
    return session_of(root).domains.get(domain, 0)


def use_domain(graph: gs.Graph, domain: str, version: int = 1) -> None:
    """Import `domain` at `version` when saved (a domain already imported stays as it is)."""
    session_of(root_of(graph)).domains.setdefault(domain, version)


def set_opset(graph: gs.Graph, version: int) -> None:
    """Set the default-domain opset of the model and of its local functions."""
    root = root_of(graph)
    root.opset = version
    for fn in root.functions:
        fn.opset = version


def _own_tensors(graph: gs.Graph) -> dict[str, gs.Tensor]:
    """graphsurgeon's tensor map of `graph`, kept until an edit made here (not to modify)."""
    session = session_of(graph)
    version = _version(graph)
    cached = session.tensors
    if cached is not None and cached[0] == version:
        return cached[1]
    with G_LOGGER.suppress(G_LOGGER.ERROR):  # a subgraph output named like an outer tensor
        found = graph.tensors()
    session.tensors = (version, found)
    return found


def cached(graph: gs.Graph, key: str, compute: Callable[[], T]) -> T:
    """`compute()`, kept on `graph` under `key` until the next edit made with these helpers
    (for facts several checks ask about one graph, such as a presence scan)."""
    memo = session_of(graph).memo
    hit = memo.get(key)
    if hit is not None and hit[0] == _version():
        return hit[1]
    found = compute()
    memo[key] = (_version(), found)
    return found


def _version(graph: gs.Graph | None = None) -> int:
    """How many edits the helpers here have made (to any graph)."""
    return _EDITS[0]


def _edited(graph: gs.Graph | None = None) -> None:
    """Count an edit: tensor maps cached before it are stale."""
    _EDITS[0] += 1
