"""IsNaN(x) → Not(Equal(x, x)), for TensorRT parsers older than 8.2 (which lack IsNaN).

NaN is the only value not equal to itself, so the two agree on every input. The dynamo
exporter emits IsNaN in its attention guard (`Where(IsNaN(p), 0, p)` after the softmax).
"""

from __future__ import annotations

import onnx_graphsurgeon as gs

from export_gelu import graph as G


def isnan_to_equal(graph: gs.Graph) -> int:
    """Rewrite every top-level IsNaN; returns how many."""
    nodes: list[gs.Node] = []
    count = 0
    for node in graph.nodes:
        if node.op != "IsNaN" or not G.is_default(node):
            nodes.append(node)
            continue
        base = node.name or "isnan"
        x = node.inputs[0]
        same = G.node(graph, "Equal", [x, x], base=base)
        nodes += [same, G.node(graph, "Not", [same.outputs[0]], base=base,
                               outputs=[node.outputs[0]])]
        count += 1
    if count:
        G.set_nodes(graph, nodes)
    return count
