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


def _cone(node: onnx.NodeProto, producer: dict[str, onnx.NodeProto], ed: GraphEditor,
          graph_inputs: set[str]) -> list[onnx.NodeProto] | None:
    """The nodes `node` depends on (itself included), or None when a graph input is reached."""
    seen: dict[int, onnx.NodeProto] = {}
    stack = [node]
    while stack:
        n = stack.pop()
        if id(n) in seen:
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
              order: dict[int, int], opset_imports: list[onnx.OperatorSetIdProto]
              ) -> list[np.ndarray] | None:
    import onnxruntime as ort

    nodes = sorted(cone, key=lambda n: order[id(n)])
    produced = {o for n in nodes for o in n.output}
    needed = {i for n in nodes for i in n.input if i and i not in produced}
    inits = []
    for name in sorted(needed):
        value = ed.constant(name)
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
