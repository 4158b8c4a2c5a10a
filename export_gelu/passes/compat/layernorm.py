"""LayerNormalization → ReduceMean / Sub / Mul / Sqrt / Div primitives, for runtimes without it.

Matches `LayerNormalization(X, scale[, B])` (opset 17) and emits the op's own function body:

    Xs   = Cast(X, stash_type)            # only when X is not already in the stash type
    mean = ReduceMean(Xs, axes)           # axes = [axis, rank)
    d    = Xs - mean
    var  = ReduceMean(d * d, axes)        # no Pow: x*x is exact and fp16-safe
    norm = d / Sqrt(var + epsilon)
    Y    = Cast(norm, T) * scale + B

In fp32 this is the same arithmetic ONNX Runtime's kernel does (errors ~1e-7); for fp16/bf16
inputs statistics are computed in the stash type (fp32 by default), as the op specifies.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper

from export_gelu.errors import TargetUnmetError
from export_gelu.passes.compat.graph import GraphEditor, attr_value


def _reduce_mean(ed: GraphEditor, x: str, axes: list[int], opset: int, base: str
                 ) -> onnx.NodeProto:
    if opset >= 18:
        return ed.node("ReduceMean", [x, ed.const(np.array(axes, np.int64), f"{base}_axes")],
                       base, keepdims=1)
    return ed.node("ReduceMean", [x], base, axes=axes, keepdims=1)


def _elem_type(ed: GraphEditor, node: onnx.NodeProto) -> int:
    for name in node.input[:2]:
        vt = ed.type_of(name)
        if vt is not None and vt.elem_type:
            return vt.elem_type
        value = ed.constant(name)
        if value is not None:
            return helper.np_dtype_to_tensor_dtype(value.dtype)
    return TensorProto.FLOAT


def expand_layernorm(ed: GraphEditor, node: onnx.NodeProto, opset: int) -> list[onnx.NodeProto]:
    """The primitive nodes computing `node` (a LayerNormalization) at `opset`."""
    x, scale = node.input[0], node.input[1]
    bias = node.input[2] if len(node.input) > 2 else ""
    axis = int(attr_value(node, "axis", -1))
    eps = float(attr_value(node, "epsilon", 1e-5))
    stash = int(attr_value(node, "stash_type", TensorProto.FLOAT))
    if axis < 0:
        axes = list(range(axis, 0))
    else:
        vt = ed.type_of(x)
        if vt is None or vt.rank is None:
            raise TargetUnmetError(f"LayerNormalization {node.name!r}: axis {axis} on an input "
                                   "of unknown rank cannot be expanded")
        axes = list(range(axis, vt.rank))
    elem = _elem_type(ed, node)
    base = node.name or "layernorm"
    out: list[onnx.NodeProto] = []

    def add(n: onnx.NodeProto) -> str:
        out.append(n)
        return n.output[0]

    cast = stash != elem
    xs = add(ed.node("Cast", [x], base, to=stash)) if cast else x
    mean = add(_reduce_mean(ed, xs, axes, opset, f"{base}_mean"))
    d = add(ed.node("Sub", [xs, mean], base))
    sq = add(ed.node("Mul", [d, d], base))
    var = add(_reduce_mean(ed, sq, axes, opset, f"{base}_var"))
    eps_c = ed.scalar(eps, stash, f"{base}_epsilon")
    var_eps = add(ed.node("Add", [var, eps_c], base))
    std = add(ed.node("Sqrt", [var_eps], base))
    norm = add(ed.node("Div", [d, std], base))
    if cast:
        norm = add(ed.node("Cast", [norm], base, to=elem))
    y_name = node.output[0]
    if bias:
        scaled = add(ed.node("Mul", [norm, scale], base))
        out.append(ed.node("Add", [scaled, bias], base, outputs=[y_name]))
    else:
        out.append(ed.node("Mul", [norm, scale], base, outputs=[y_name]))
    if len(node.output) > 1 and node.output[1]:
        out.append(ed.node("Identity", [mean], base, outputs=[node.output[1]]))
    if len(node.output) > 2 and node.output[2]:
        one = ed.scalar(1.0, stash, f"{base}_one")
        out.append(ed.node("Div", [one, std], base, outputs=[node.output[2]]))
    return out


def expand_all_layernorms(model: onnx.ModelProto, ed: GraphEditor, opset: int) -> int:
    """Expand every top-level LayerNormalization in `model`; returns how many."""
    nodes: list[onnx.NodeProto] = []
    count = 0
    for node in model.graph.node:
        if node.op_type == "LayerNormalization" and node.domain in ("", "ai.onnx"):
            nodes.extend(expand_layernorm(ed, node, opset))
            count += 1
        else:
            nodes.append(node)
    if count:
        ed.commit(nodes)
    return count
