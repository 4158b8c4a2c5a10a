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
from onnx import helper

from export_gelu.passes.compat.graph import GraphEditor

#: Cones larger than this, or values larger than this many elements, are left alone.
_MAX_CONE_NODES = 200
_MAX_VALUE_ELEMENTS = 1 << 22


#: A leaf of a cone: (node) → the values of its outputs when they are known without running
#: it (the shape of a tensor whose shape is static), else None.
Leaf = Callable[[onnx.NodeProto], "dict[str, np.ndarray] | None"]


def _cone(node: onnx.NodeProto, producer: dict[str, onnx.NodeProto], ed: GraphEditor,
          graph_inputs: set[str], leaf: Leaf | None = None,
          known: dict[str, np.ndarray] | None = None) -> list[onnx.NodeProto] | None:
    """The nodes `node` depends on (itself included), or None when a graph input is reached.

    With `leaf`, a node whose outputs `leaf` knows is not entered: its values go to `known`.
    """
    seen: dict[int, onnx.NodeProto] = {}
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
        if len(seen) > _MAX_CONE_NODES or any(a.type in (onnx.AttributeProto.GRAPH,
                                                          onnx.AttributeProto.GRAPHS)
                                               for a in n.attribute):
            return None
        for name in n.input:
            if not name or (name in producer and producer[name].op_type == "Constant"):
                if name in producer:
                    stack.append(producer[name])
                continue
            if name in producer:
                stack.append(producer[name])
            elif name in graph_inputs or ed.constant(name) is None:
                return None
    return list(seen.values())


def _evaluate(cone: list[onnx.NodeProto], outputs: list[str], ed: GraphEditor,
              order: dict[int, int], opset_imports: list[onnx.OperatorSetIdProto],
              known: dict[str, np.ndarray] | None = None) -> list[np.ndarray] | None:
    import onnxruntime as ort

    nodes = sorted(cone, key=lambda n: order[id(n)])
    produced = {o for n in nodes for o in n.output}
    needed = {i for n in nodes for i in n.input if i and i not in produced}
    inits = []
    for name in sorted(needed):
        value = known[name] if known and name in known else ed.constant(name)
        if value is None:
            return None
        inits.append(onnx.numpy_helper.from_array(value, name))
    graph = helper.make_graph(nodes, "fold", [], [onnx.ValueInfoProto(name=o) for o in outputs],
                              inits)
    model = helper.make_model(graph, opset_imports=list(opset_imports))
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


def fold_constant_ops(model: onnx.ModelProto, ed: GraphEditor, opset: int,
                      wanted: Callable[[onnx.NodeProto], bool]) -> list[str]:
    """Fold each top-level node for which `wanted(node)` holds and which depends on constants
    only. Returns the op types folded (one entry per node)."""
    graph = model.graph
    producer = {o: n for n in graph.node for o in n.output}
    order = {id(n): i for i, n in enumerate(graph.node)}
    graph_inputs = {i.name for i in graph.input} - {i.name for i in graph.initializer}
    folded: list[str] = []
    removed: set[int] = set()
    in_cones: set[int] = set()
    for node in list(graph.node):
        if node.domain not in ("", "ai.onnx") or not wanted(node) or id(node) in removed:
            continue
        cone = _cone(node, producer, ed, graph_inputs)
        values = None if cone is None else _evaluate(cone, list(node.output), ed, order,
                                                      list(model.opset_import))
        if values is None:
            continue
        for name, value in zip(node.output, values):
            if name:
                ed.const_named(value, name)
        removed.add(id(node))
        in_cones.update(id(n) for n in cone)
        ed.replaced(node, [])
        folded.append(node.op_type)
    if not folded:
        return folded
    nodes = [n for n in graph.node if id(n) not in removed]
    while True:  # cone nodes whose values nothing reads any more go too
        read = {i for n in nodes for i in n.input} | {o.name for o in graph.output}
        dead = {id(n) for n in nodes if id(n) in in_cones and not any(o in read
                                                                      for o in n.output)}
        if not dead:
            break
        for n in nodes:
            if id(n) in dead:
                ed.replaced(n, [])
        nodes = [n for n in nodes if id(n) not in dead]
    ed.commit(nodes)
    return folded


def constant_value(model: onnx.ModelProto, ed: GraphEditor, name: str,
                   leaf: Leaf | None = None) -> np.ndarray | None:
    """The value of tensor `name` of `model`'s top-level graph when everything it depends on
    is constant (initializers, Constant nodes, and whatever `leaf` knows), evaluated in ONNX
    Runtime; None when it depends on a graph input or cannot be evaluated."""
    value = ed.constant(name)
    if value is not None:
        return value
    graph = model.graph
    producer = {o: n for n in graph.node for o in n.output if o}
    node = producer.get(name)
    if node is None or node.domain not in ("", "ai.onnx"):
        return None
    known: dict[str, np.ndarray] = {}
    if leaf is not None and (values := leaf(node)) is not None:
        return values.get(name)
    graph_inputs = {i.name for i in graph.input} - {i.name for i in graph.initializer}
    cone = _cone(node, producer, ed, graph_inputs, leaf, known)
    if cone is None:
        return None
    order = {id(n): i for i, n in enumerate(graph.node)}
    values = _evaluate(cone, [name], ed, order, list(model.opset_import), known)
    return None if values is None else np.asarray(values[0])
