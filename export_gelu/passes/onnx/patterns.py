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
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import onnx_graphsurgeon as gs

from export_gelu import graph as G
from export_gelu.passes.onnx.exporter_shapes import SHAPES, ExporterShape
from export_gelu.passes.onnx.expr import Const, _literal_rtol
from export_gelu.passes.onnx.formulas import close
from export_gelu.passes.onnx.match import Match

_SHAPE_OPS = frozenset(op for s in SHAPES for op, _r in s.nodes)


@functools.cache
def _pattern(index: int) -> gs.GraphPattern:
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


@contextmanager
def _as_pattern_sees_it(graph: gs.Graph) -> Iterator[dict[int, gs.Tensor]]:
    """While matching: `Constant` node outputs read as constants (`GraphPattern.constant()`
    matches graphsurgeon Constants only), and an id on every subgraph node too (its
    consumer check reads `.id` of every consumer, a subgraph's included). Undone after."""
    swaps: list[tuple[gs.Node, int, gs.Tensor]] = []
    for node in graph.nodes:
        if node.op != "Constant" or not G.is_default(node) or len(node.outputs) != 1:
            continue
        out = node.outputs[0]
        arr = G.literal(graph, out)
        if arr is None:
            continue
        const = gs.Constant(out.name, np.asarray(arr))
        for consumer in G.consumers(out):
            for i, tensor in enumerate(consumer.inputs):
                if tensor is out:
                    G.set_input(consumer, i, const)
                    swaps.append((consumer, i, out))
    top = {id(n) for n in graph.nodes}
    inner = [n for n in G.walk(graph) if id(n) not in top] \
        if any(G.subgraphs(n) for n in graph.nodes) else []
    for k, n in enumerate(inner):
        n.id = -1 - k
    try:
        yield {id(consumer.inputs[i]): out for consumer, i, out in swaps}
    finally:
        for n in inner:
            del n.id
        for consumer, i, out in reversed(swaps):
            G.set_input(consumer, i, out)


def _literals_match(graph: gs.Graph, shape: ExporterShape, nodes: list[gs.Node]) -> bool:
    for (_op, refs), node in zip(shape.nodes, nodes):
        for ref, tensor in zip(refs, node.inputs):
            if isinstance(ref, float):
                arr = G.literal(graph, tensor)
                if arr is None or arr.size != 1:
                    return False
                lit = Const(float(np.asarray(arr).reshape(())), _literal_rtol(arr))
                if not close(ref, lit):
                    return False
    return True


def exporter_shape_matches(graph: gs.Graph, claimed: set[int]) -> list[Match]:
    """Sites whose nodes are exactly an exporter's shape of a reference formula; `claimed`:
    ids of nodes another source took (updated)."""
    if not any(n.op in _SHAPE_OPS for n in graph.nodes):
        return []
    from onnx_graphsurgeon.logger import G_LOGGER

    found: list[Match] = []
    with G_LOGGER.suppress(G_LOGGER.ERROR), _as_pattern_sees_it(graph) as swapped:
        # GraphPattern logs every attempt at INFO
        mappings = [(shape, m) for index, shape in enumerate(SHAPES)
                    for m in _pattern(index).match_all(graph)]
        hits = [(shape, [mapping.get(f"n{i}") for i in range(len(shape.nodes))],
                 swapped.get(id(mapping.inputs[0]), mapping.inputs[0]))
                for shape, mapping in mappings]
        hits = [(shape, nodes, x) for shape, nodes, x in hits
                if _literals_match(graph, shape, nodes)]
    for shape, nodes, x in hits:
        if any(id(n) in claimed for n in nodes):
            continue
        if any(G.users(graph, n.outputs[0]) != 1 for n in nodes[:-1]):
            continue
        found.append(Match(shape.kind, f"{shape.formula}, as exported by {made_by(shape)}", x,
                           nodes[-1].outputs[0], nodes[::-1], nodes[-1]))
        claimed.update(id(n) for n in nodes)
    return found
