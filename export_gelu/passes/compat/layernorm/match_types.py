"""LayerNormalization's scale and bias in its input's element type.

ONNX types `LayerNormalization(X, Scale, B)` with one constraint for X, Scale and B (T; the
stash type is separate): an fp16 X with an fp32 scale is not a valid graph, and ONNX Runtime
refuses to load it ("Type parameter (T) of Optype (LayerNormalization) bound to different
types", onnxruntime 1.32). Such a node is left by fp16 graphs whose norm kept float32
weights; each mismatched scale or bias is read through a Cast to X's type.
"""

from __future__ import annotations

import onnx_graphsurgeon as gs

from export_gelu import graph as G


def _elem_type(graph: gs.Graph, tensor: gs.Tensor) -> int:
    """What the model states or inference derives of `tensor`'s element type (0: unknown)."""
    found = G.type_of(graph, tensor)
    return int(found.elem_type) if found is not None else 0


def match_layernorm_types(graph: gs.Graph) -> int:
    """Cast every LayerNormalization scale or bias whose type differs from its input's;
    returns how many nodes changed (the graph is edited in place)."""
    changed = 0
    nodes: list[gs.Node] = []
    for node in graph.nodes:
        if node.op == "LayerNormalization" and G.is_default(node) and len(node.inputs) >= 2:
            want = _elem_type(graph, node.inputs[0])
            casts = []
            for index, tensor in enumerate(node.inputs[1:3], start=1):
                have = _elem_type(graph, tensor)
                if want and have and have != want:
                    out = G.variable(graph, f"{node.name or 'ln'}_in{index}_cast", want)
                    cast = G.node(graph, "Cast", [tensor], outputs=[out], to=want, like=node)
                    G.set_input(node, index, out)
                    casts.append(cast)
            if casts:
                changed += 1
                nodes.extend(casts)
        nodes.append(node)
    if changed:
        G.set_nodes(graph, nodes)
    return changed
