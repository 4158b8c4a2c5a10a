"""The TensorRT GELU plugin as ONNX math, so that ONNX Runtime can run a graph holding it.

`CustomGeluPluginDynamic` computes the tanh GELU of (x + bias), the bias read as the plugin
reads it (`recognise.plugin_bias`: per `type_id`). `plugins_as_math` replaces every plugin
node of the main graph by that math — computed in float32 between Casts for a float16 node —
which makes a stand-in for parity: it checks the graph around the plugin and the plugin's
attributes, not TensorRT's kernel (which rounds in float16 for `type_id` 1).
"""

from __future__ import annotations

import numpy as np
import onnx
import onnx_graphsurgeon as gs
from onnx import TensorProto

from export_gelu import graph as G
from export_gelu.passes.onnx import emit
from export_gelu.passes.onnx.recognise import PLUGIN_OP, plugin_bias

#: What the report says where a graph's plugin nodes ran as their math.
STANDIN_NOTE = (f"{PLUGIN_OP} node(s) of {{which}} ran in ONNX Runtime as the plugin's math, "
                "tanh GELU of (x + bias) with the bias read as the plugin reads it: this "
                "checks the graph and the plugin's attributes, not TensorRT's kernel")


def plugin_nodes(model: onnx.ModelProto) -> int:
    """How many plugin nodes the main graph holds."""
    return sum(n.op_type == PLUGIN_OP for n in model.graph.node)


def _replacement(graph: gs.Graph, node: gs.Node, opset: int) -> list[gs.Node]:
    try:
        bias = plugin_bias(node)
    except ValueError as exc:
        raise ValueError(f"{PLUGIN_OP} node {node.name!r}: {exc}") from exc
    half = int(node.attrs["type_id"]) == 1
    b = emit.SiteBuilder(graph, node.name or "plugin", TensorProto.FLOAT, None, opset)
    x_in, y = node.inputs[0], node.outputs[0]
    x = b.node("Cast", [x_in], to=TensorProto.FLOAT) if half else x_in
    if bias is not None:
        x = b.node("Add", [x, b.const_array(bias.astype(np.float32), "bias")])
    out = G.variable(graph, f"{b.prefix}/gelu_fp32") if half else y
    if opset >= 20:
        emit.onnx_gelu(b, x, out, "tanh")
    else:
        emit.tanh_primitives(b, x, out, ort_fusable=False)
    if half:
        b.node("Cast", [out], out=y, to=TensorProto.FLOAT16)
    return b.nodes


def plugins_as_math(model: onnx.ModelProto) -> int:
    """Replace every plugin node of `model`'s main graph by its math, in place; how many.

    Raises ValueError naming a node the plugin itself could not run.
    """
    if not plugin_nodes(model):
        return 0
    with G.opened(model, write=True) as graph:
        opset = G.opset(graph)
        nodes: list[gs.Node] = []
        count = 0
        for node in graph.nodes:
            if node.op != PLUGIN_OP:
                nodes.append(node)
                continue
            nodes.extend(_replacement(graph, node, opset))
            count += 1
        G.set_nodes(graph, nodes)
    used = {n.domain for n in model.graph.node}
    keep = [i for i in model.opset_import if i.domain in ("", "ai.onnx") or i.domain in used]
    del model.opset_import[:]
    model.opset_import.extend(keep)
    return count
