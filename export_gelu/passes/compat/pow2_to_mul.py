"""Pow(x, 2) → Mul(x, x): the variance in LayerNormalization decompositions, Pow-free.

Both are the correctly rounded square, so the values are identical; TensorRT fuses a Mul
with its neighbours, and ONNX Runtime's TensorRT provider forces any Pow to fp32. A Pow
with another exponent (GELU's cube is the GELU passes' business) is left alone.
"""

from __future__ import annotations

import onnx

from export_gelu.passes.compat.graph import GraphEditor


def pow2_to_mul(model: onnx.ModelProto, ed: GraphEditor) -> int:
    """Rewrite every top-level Pow whose exponent is the constant 2; returns how many."""
    nodes: list[onnx.NodeProto] = []
    count = 0
    for node in model.graph.node:
        exponent = ed.constant(node.input[1]) if node.op_type == "Pow" else None
        if (node.domain not in ("", "ai.onnx") or exponent is None or exponent.size != 1
                or float(exponent.reshape(-1)[0]) != 2.0):
            nodes.append(node)
            continue
        x = node.input[0]
        square = ed.node("Mul", [x, x], node.name or "square", outputs=[node.output[0]])
        ed.replaced(node, [square])
        nodes.append(square)
        count += 1
    if count:
        ed.commit(nodes)
    return count



