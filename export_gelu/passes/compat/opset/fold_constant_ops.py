"""Ops a target lacks, computed from constants only → their value, as an initializer.

Exports often compute constants with ops an old parser lacks: BERT's token-type ids come out
of a `GatherElements` on two initializers (dynamo), or on an `Expand(Where(Equal(…)))` of
`ConstantOfShape`s (TorchScript). When everything such a node reads traces back to constants
(no graph input), its cone is evaluated once in ONNX Runtime and the node is replaced by its
value; cone nodes nothing else reads are dropped with it.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx
import onnx_graphsurgeon as gs
from onnx import helper

from export_gelu import graph as G

#: Cones larger than this, or values larger than this many elements, are left alone.
_MAX_CONE_NODES = 200
_MAX_VALUE_ELEMENTS = 1 << 22


#: A leaf of a cone: (node) → the values of its outputs by name when they are known without
#: running it (the shape of a tensor whose shape is static), else None.
Leaf = Callable[[gs.Node], "dict[str, np.ndarray] | None"]


def _cone(node: gs.Node, leaf: Leaf | None = None,
          known: dict[str, np.ndarray] | None = None) -> list[gs.Node] | None:
    """The nodes `node` depends on (itself included), or None when a graph input is reached.

    With `leaf`, a node whose outputs `leaf` knows is not entered: its values go to `known`.
    """
    seen: dict[int, gs.Node] = {}
    stack = [node]
    while stack:
        n = stack.pop()
        if id(n) in seen:
            continue
        values = leaf(n) if leaf is not None and n is not node else None
        if values is not None and known is not None:
            known.update(values)
            continue
        seen[id(n)] = n
        if len(seen) > _MAX_CONE_NODES or G.subgraphs(n):
            return None
        for t in n.inputs:
            if t.is_empty():
                continue
            producer = G.producer(t)
            if producer is not None:
                stack.append(producer)
            elif not G.has_value(t):  # a graph input, or a weight left in a file
                return None
    return list(seen.values())


def _evaluate(graph: gs.Graph, cone: list[gs.Node], outputs: list[str],
              known: dict[str, np.ndarray] | None = None) -> list[np.ndarray] | None:
    import onnxruntime as ort

    order = {id(n): i for i, n in enumerate(graph.nodes)}
    nodes = sorted(cone, key=lambda n: order.get(id(n), -1))
    produced = {id(o) for n in nodes for o in n.outputs}
    needed = {t.name: t for n in nodes for t in n.inputs
              if not t.is_empty() and id(t) not in produced}
    inits = []
    for name in sorted(needed):
        value = known[name] if known and name in known else G.value(needed[name])
        if value is None:
            return None
        inits.append(onnx.numpy_helper.from_array(np.asarray(value), name))
    onnx_graph = helper.make_graph(G.node_protos(nodes), "fold", [],
                                   [onnx.ValueInfoProto(name=o) for o in outputs], inits)
    model = helper.make_model(onnx_graph, opset_imports=G.opset_imports(graph))
    try:
        opts = ort.SessionOptions()
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        sess = ort.InferenceSession(model.SerializeToString(), opts,
                                    providers=["CPUExecutionProvider"])
        values = sess.run(None, {})
    except Exception:  # noqa: BLE001 - anything ONNX Runtime cannot evaluate stays as it was
        return None
    if any(np.asarray(v).size > _MAX_VALUE_ELEMENTS for v in values):
        return None
    return values


def fold_constant_ops(graph: gs.Graph, wanted: Callable[[gs.Node], bool]) -> list[str]:
    """Fold each top-level node for which `wanted(node)` holds and which depends on constants
    only. Returns the op types folded (one entry per node)."""
    folded: list[str] = []
    removed: set[int] = set()
    released: list[gs.Tensor] = []
    for node in list(graph.nodes):
        if not G.is_default(node) or not wanted(node) or id(node) in removed:
            continue
        cone = _cone(node)
        outs = [o for o in node.outputs if not o.is_empty()]
        values = None if cone is None else _evaluate(graph, cone, [o.name for o in outs])
        if values is None:
            continue
        released += node.inputs
        for tensor, value in zip(outs, values):
            G.to_constant(tensor, value)  # its readers now read the value
        removed.add(id(node))
        folded.append(node.op)
    if folded:
        G.set_nodes(graph, [n for n in graph.nodes if id(n) not in removed])
        G.drop_unread(graph, released)  # cone nodes nothing reads any more go too
    return folded


def constant_value(graph: gs.Graph, tensor: gs.Tensor | None,
                   leaf: Leaf | None = None) -> np.ndarray | None:
    """The value of `tensor` of the main graph when everything it depends on is constant
    (initializers, Constant nodes, and whatever `leaf` knows), evaluated in ONNX Runtime;
    None when it depends on a graph input or cannot be evaluated."""
    if tensor is None:
        return None
    value = G.value(tensor)
    if value is not None:
        return value
    node = G.producer(tensor)
    if node is None or not G.is_default(node):
        return None
    known: dict[str, np.ndarray] = {}
    if leaf is not None and (values := leaf(node)) is not None:
        return values.get(tensor.name)
    cone = _cone(node, leaf, known)
    if cone is None:
        return None
    evaluated = _evaluate(graph, cone, [tensor.name], known)
    return None if evaluated is None else np.asarray(evaluated[0])
