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
from onnx import TensorProto

from export_gelu.passes.onnx import emit
from export_gelu.passes.onnx.recognise import PLUGIN_OP, plugin_bias

#: What the report says where a graph's plugin nodes ran as their math.
STANDIN_NOTE = (f"{PLUGIN_OP} node(s) of {{which}} ran in ONNX Runtime as the plugin's math, "
                "tanh GELU of (x + bias) with the bias read as the plugin reads it: this "
                "checks the graph and the plugin's attributes, not TensorRT's kernel")


def plugin_nodes(model: onnx.ModelProto) -> int:
    """How many plugin nodes the main graph holds."""
    return sum(n.op_type == PLUGIN_OP for n in model.graph.node)


def _opset(model: onnx.ModelProto) -> int:
    return next((int(i.version) for i in model.opset_import if i.domain in ("", "ai.onnx")), 0)


def _replacement(node: onnx.NodeProto, names: emit.Names, opset: int
                 ) -> tuple[list[onnx.NodeProto], list[onnx.TensorProto]]:
    try:
        bias = plugin_bias(node)
    except ValueError as exc:
        raise ValueError(f"{PLUGIN_OP} node {node.name!r}: {exc}") from exc
    type_id = next(a.i for a in node.attribute if a.name == "type_id")
    half = type_id == 1
    b = emit.SiteBuilder(node.name or "plugin", names, TensorProto.FLOAT, None, opset)
    x = b.node("Cast", [node.input[0]], to=TensorProto.FLOAT) if half else node.input[0]
    if bias is not None:
        x = b.node("Add", [x, b.const_array(bias.astype(np.float32), "bias")])
    out = b.names.fresh(f"{b.prefix}/gelu_fp32") if half else node.output[0]
    if opset >= 20:
        emit.onnx_gelu(b, x, out, "tanh")
    else:
        emit.tanh_primitives(b, x, out, ort_fusable=False)
    if half:
        b.node("Cast", [out], out=node.output[0], to=TensorProto.FLOAT16)
    return b.nodes, b.initializers


def plugins_as_math(model: onnx.ModelProto) -> int:
    """Replace every plugin node of `model`'s main graph by its math, in place; how many.

    Raises ValueError naming a node the plugin itself could not run.
    """
    if not plugin_nodes(model):
        return 0
    graph = model.graph
    taken = {n.name for n in graph.node} | {o for n in graph.node for o in n.output} \
        | {i.name for i in graph.input} | {i.name for i in graph.initializer} \
        | {v.name for v in graph.value_info}
    names = emit.Names(taken)
    opset = _opset(model)
    nodes: list[onnx.NodeProto] = []
    count = 0
    for node in graph.node:
        if node.op_type != PLUGIN_OP:
            nodes.append(node)
            continue
        new, inits = _replacement(node, names, opset)
        nodes.extend(new)
        graph.initializer.extend(inits)
        count += 1
    del graph.node[:]
    graph.node.extend(nodes)
    used = {n.domain for n in graph.node}
    keep = [i for i in model.opset_import if i.domain in ("", "ai.onnx") or i.domain in used]
    del model.opset_import[:]
    model.opset_import.extend(keep)
    return count
