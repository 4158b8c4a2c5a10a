"""IsNaN(x) → Not(Equal(x, x)), for TensorRT parsers older than 8.2 (which lack IsNaN).

NaN is the only value not equal to itself, so the two agree on every input. The dynamo
exporter emits IsNaN in its attention guard (`Where(IsNaN(p), 0, p)` after the softmax).
"""

from __future__ import annotations

import onnx

from export_gelu.passes.compat.graph import GraphEditor


def isnan_to_equal(model: onnx.ModelProto, ed: GraphEditor) -> int:
    """Rewrite every top-level IsNaN; returns how many."""
    nodes: list[onnx.NodeProto] = []
    count = 0
    for node in model.graph.node:
        if node.op_type != "IsNaN" or node.domain not in ("", "ai.onnx"):
            nodes.append(node)
            continue
        base = node.name or "isnan"
        same = ed.node("Equal", [node.input[0], node.input[0]], base)
        nodes += [same, ed.node("Not", [same.output[0]], base, outputs=[node.output[0]])]
        count += 1
    if count:
        ed.commit(nodes)
    return count
