"""Restriction records about extra outputs: LayerNormalization's Mean/InvStdDev (8.6+) and
Dropout's mask at opset >= 10 on 7.x (see `restrictions.py`).

From 8.6 the parser's ModelImporter refuses any node that declares more outputs than its
importer returns ("Node has more output tensors than TRT expected."), so even an unused or
empty-named extra output counts.
"""

from __future__ import annotations

import onnx_graphsurgeon as gs

from export_gelu import graph as G
from export_gelu.trt_parser.restriction_records import restriction


def _extra_outputs(node: gs.Node, graph: gs.Graph, names: tuple[str, ...]) -> str:
    used = [f"{names[i - 1]} {o.name!r}" for i, o in enumerate(node.outputs)
            if i and G.is_used(graph, o)]
    return (f"{len(node.outputs)} outputs declared, read: {', '.join(used)}" if used
            else f"{len(node.outputs)} outputs declared, only Y read")


@restriction(key="layernorm-extra-outputs", op="LayerNormalization",
             condition="its Mean/InvStdDev outputs declared", since="8.6", fixed_in=None,
             parser_words="\"Only the first output `Y` is supported.\" (operators.md); "
                          "ModelImporter: \"Node has more output tensors than TRT expected.\"",
             source="onnx/onnx-tensorrt release/8.6-GA builtin_op_importers.cpp "
                    "LayerNormalization (RETURN_FIRST_OUTPUT), ModelImporter.cpp; "
                    "release/10.1-GA and 10.15 docs/operators.md")
def _layernorm_outputs(node: gs.Node, graph: gs.Graph) -> str | None:
    if len(node.outputs) <= 1:
        return None
    return _extra_outputs(node, graph, ("Mean", "InvStdDev"))


@restriction(key="dropout-mask-output", op="Dropout",
             condition="a mask output at opset >= 10", since=None, fixed_in="8.0",
             parser_words="two-output Dropout asserts getOpsetVersion() < 10 (\"boolean not "
                          "supported right now\"); 8.0 builds the mask itself",
             source="onnx/onnx-tensorrt 84b5be1 (7.0), release/7.1, release/7.2.1 "
                    "builtin_op_importers.cpp Dropout; release/8.0 builtin_op_importers.cpp "
                    "Dropout")
def _dropout_mask(node: gs.Node, graph: gs.Graph) -> str | None:
    if len(node.outputs) <= 1 or G.opset(graph) < 10:
        return None
    return _extra_outputs(node, graph, ("mask",))
