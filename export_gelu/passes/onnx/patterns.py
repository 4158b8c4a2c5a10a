"""Exporter shapes (`exporter_shapes.py`, derived by exporting) matched with graphsurgeon.

onnx-graphsurgeon's `GraphPattern` fits these exactly: an exporter writes a formula with
one fixed operand order, and its `constant()` matches initializers, so the TorchScript
exporter's `Constant` nodes are folded into constants in a read-only graphsurgeon view
first. `GraphPattern` neither checks literal values nor sees subgraph reads, so each
match is checked here: literals within the formula tolerance, intermediates used once.
Anything written in another order or spelling is left to the formula matcher.
"""

from __future__ import annotations

import functools

import numpy as np

from export_gelu.passes.onnx.exporter_shapes import SHAPES, ExporterShape
from export_gelu.passes.onnx.expr import Const, _literal_rtol
from export_gelu.passes.onnx.formulas import close
from export_gelu.passes.onnx.match import Match
from export_gelu.passes.onnx.view import GraphView

_SHAPE_OPS = frozenset(op for s in SHAPES for op, _r in s.nodes)


@functools.cache
def _pattern(index: int):  # -> onnx_graphsurgeon.GraphPattern
    from onnx_graphsurgeon import GraphPattern

    shape = SHAPES[index]
    p = GraphPattern()
    x = p.variable()
    outs: list[int] = []
    for i, (op, refs) in enumerate(shape.nodes):
        ins = [x if r == "x" else outs[r] if isinstance(r, int) else p.constant()
               for r in refs]
        outs.append(p.add(f"n{i}", op, inputs=ins))
    p.set_output_tensors([outs[-1]])
    return p


def made_by(shape: ExporterShape) -> str:
    """'dynamo 18/19, torchscript 13/17' from the shape's exporter list."""
    opsets: dict[str, list[str]] = {}
    for item in shape.exporters:
        exporter, _sp, opset = item.partition(" ")
        opsets.setdefault(exporter, []).append(opset)
    return ", ".join(f"{e} {'/'.join(o)}" for e, o in opsets.items())


def _gs_view(view: GraphView):  # -> onnx_graphsurgeon.Graph
    """A graphsurgeon graph of the model with `Constant` node outputs as constants."""
    import onnx_graphsurgeon as gs

    graph = gs.import_onnx(view.model)
    for node in graph.nodes:
        if node.op != "Constant" or not node.outputs:
            continue
        out = node.outputs[0]
        value = view.constant(out.name)
        if value is None:
            continue
        const = gs.Constant(out.name, np.asarray(value))
        for consumer in list(out.outputs):
            for i, tensor in enumerate(list(consumer.inputs)):
                if tensor is out:
                    consumer.inputs[i] = const
    return graph


def _literals_match(shape: ExporterShape, nodes: list, view: GraphView) -> bool:
    for (_op, refs), node in zip(shape.nodes, nodes):
        for ref, tensor in zip(refs, node.inputs):
            if isinstance(ref, float):
                arr = view.constant(tensor.name)
                if arr is None or arr.size != 1:
                    return False
                lit = Const(float(np.asarray(arr).reshape(())), _literal_rtol(arr))
                if not close(ref, lit):
                    return False
    return True


def exporter_shape_matches(view: GraphView, claimed: set[str]) -> list[Match]:
    """Sites whose nodes are exactly an exporter's shape of a reference formula."""
    if not any(n.op_type in _SHAPE_OPS for n in view.model.graph.node):
        return []
    from onnx_graphsurgeon.logger import G_LOGGER

    found: list[Match] = []
    with G_LOGGER.suppress(G_LOGGER.ERROR):  # GraphPattern logs every attempt at INFO
        graph = _gs_view(view)
        mappings = [(shape, m) for index, shape in enumerate(SHAPES)
                    for m in _pattern(index).match_all(graph)]
    for shape, mapping in mappings:
        nodes = [mapping.get(f"n{i}") for i in range(len(shape.nodes))]
        names = [n.name for n in nodes]
        if any(n in claimed for n in names) or not _literals_match(shape, nodes, view):
            continue
        if any(view.users(n.outputs[0].name) != 1 for n in nodes[:-1]):
            continue
        x = mapping.inputs[0].name
        found.append(Match(shape.kind, f"{shape.formula}, as exported by {made_by(shape)}", x,
                           nodes[-1].outputs[0].name, names[::-1], names[-1]))
        claimed.update(names)
    return found
