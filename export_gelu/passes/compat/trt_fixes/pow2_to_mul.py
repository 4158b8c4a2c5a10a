"""Pow(x, 2) → Mul(x, x): the variance in LayerNormalization decompositions, Pow-free.

Both are the correctly rounded square, so the values are identical; TensorRT fuses a Mul
with its neighbours, and ONNX Runtime's TensorRT provider forces any Pow to fp32. A Pow
with another exponent (GELU's cube is the GELU passes' business) is left alone.
"""

from __future__ import annotations

import onnx_graphsurgeon as gs

from export_gelu import graph as G


def pow2_to_mul(graph: gs.Graph) -> int:
    """Rewrite every top-level Pow whose exponent is the constant 2; returns how many."""
    nodes: list[gs.Node] = []
    count = 0
    for node in graph.nodes:
        exponent = G.value(node.inputs[1]) if node.op == "Pow" and len(node.inputs) > 1 \
            else None
        if (not G.is_default(node) or exponent is None or exponent.size != 1
                or float(exponent.reshape(-1)[0]) != 2.0):
            nodes.append(node)
            continue
        x = node.inputs[0]
        nodes.append(G.node(graph, "Mul", [x, x], base=node.name or "square",
                            outputs=[node.outputs[0]]))
        count += 1
    if count:
        G.set_nodes(graph, nodes)
    return count
