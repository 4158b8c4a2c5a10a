"""A Q/DQ graph without its Q/DQ: what the same graph computes in float (the GELU form's own
error in the verdict, quantize/judge.py).

Each DequantizeLinear's output is replaced by the float tensor behind it: a QuantizeLinear's
input (activations, and weights written float → Q → DQ), or, for a weight stored quantized,
the float weight given for it by name (the module's own: not the graph's dequantized values,
which a wrong scale would carry into the "unquantized" graph).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import onnx
from onnx import helper, numpy_helper

from export_gelu.quantize.read_qdq import QDQ_OPS


def without_qdq(model: onnx.ModelProto, weights: Mapping[str, np.ndarray]
                ) -> onnx.ModelProto | str:
    """`model` with every QuantizeLinear/DequantizeLinear taken out, or why it cannot be
    (a stored weight with no float weight in `weights`)."""
    g = model.graph
    q_input = {n.output[0]: n.input[0] for n in g.node
               if n.op_type == "QuantizeLinear" and n.domain in ("", "ai.onnx")}
    inits = {i.name for i in g.initializer}
    source: dict[str, str] = {}
    added: list[onnx.TensorProto] = []
    for node in g.node:
        if node.op_type != "DequantizeLinear" or node.domain not in ("", "ai.onnx"):
            continue
        data = node.input[0]
        if data in q_input:
            source[node.output[0]] = q_input[data]
        elif data in inits and data in weights:
            name = f"{data}__float"
            added.append(numpy_helper.from_array(np.asarray(weights[data], np.float32), name))
            source[node.output[0]] = name
        else:
            return f"{node.name or data}: the float values behind {data!r} are not known"
    stripped = onnx.ModelProto()
    stripped.CopyFrom(model)
    sg = stripped.graph
    kept = [n for n in sg.node if not (n.op_type in QDQ_OPS and n.domain in ("", "ai.onnx"))]
    for node in kept:
        for i, name in enumerate(node.input):
            if name in source:
                node.input[i] = source[name]
    outputs = {o.name for o in sg.output}
    kept += [helper.make_node("Identity", [source[o]], [o], name=f"{o}__unquantized")
             for o in outputs if o in source]
    del sg.node[:]
    sg.node.extend(kept)
    used = {t for n in kept for t in n.input}
    keep_inits = [i for i in sg.initializer if i.name in used]
    del sg.initializer[:]
    sg.initializer.extend(keep_inits + [a for a in added if a.name in used])
    del sg.value_info[:]
    return stripped
