"""Ops a target lacks, applied to constants only → their value, as an initializer.

Exports often compute constants with ops an old parser lacks (BERT's token-type ids come out
of a GatherElements on two initializers). When every input of such a node is a constant, the
node is evaluated here once (in ONNX Runtime) and replaced by its value.
"""

from __future__ import annotations

from collections.abc import Callable

import onnx
from onnx import helper

from export_gelu.passes.compat.graph import GraphEditor


def _evaluate(node: onnx.NodeProto, ed: GraphEditor, opset: int) -> list | None:
    import onnxruntime as ort

    values = [ed.constant(name) for name in node.input]
    if not node.input or any(v is None for v in values):
        return None
    inputs = [helper.make_tensor_value_info(f"in{i}", helper.np_dtype_to_tensor_dtype(v.dtype),
                                            v.shape) for i, v in enumerate(values)]
    outputs = [onnx.ValueInfoProto(name=f"out{i}") for i in range(len(node.output))]
    one = onnx.NodeProto()
    one.CopyFrom(node)
    one.ClearField("input")
    one.input.extend(i.name for i in inputs)
    one.ClearField("output")
    one.output.extend(o.name for o in outputs)
    graph = helper.make_graph([one], "fold", inputs, outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    try:
        opts = ort.SessionOptions()
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        sess = ort.InferenceSession(model.SerializeToString(), opts,
                                    providers=["CPUExecutionProvider"])
        return sess.run(None, {i.name: v for i, v in zip(inputs, values)})
    except Exception:  # noqa: BLE001 - anything ONNX Runtime cannot evaluate stays as it was
        return None


def fold_constant_ops(model: onnx.ModelProto, ed: GraphEditor, opset: int,
                      wanted: Callable[[onnx.NodeProto], bool]) -> list[str]:
    """Fold each top-level node for which `wanted(node)` holds and whose inputs are constant.

    Returns the op types folded (one entry per node).
    """
    nodes: list[onnx.NodeProto] = []
    folded: list[str] = []
    for node in model.graph.node:
        results = _evaluate(node, ed, opset) if (
            node.domain in ("", "ai.onnx") and wanted(node)) else None
        if results is None:
            nodes.append(node)
            continue
        for name, value in zip(node.output, results):
            if name:
                ed.const_named(value, name)
        ed.replaced(node, [])
        folded.append(node.op_type)
    if folded:
        ed.commit(nodes)
    return folded
