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

from collections.abc import Callable
from typing import Any

import numpy as np
import onnx_graphsurgeon as gs
from onnx import TensorProto, helper

from export_gelu import graph as G
from export_gelu.errors import TargetUnmetError


def _reduce_mean(graph: gs.Graph, x: gs.Tensor, axes: list[int], opset: int, base: str
                 ) -> gs.Node:
    if opset >= 18:
        return G.node(graph, "ReduceMean",
                      [x, G.constant(graph, np.array(axes, np.int64), f"{base}_axes")],
                      base=base, keepdims=1)
    return G.node(graph, "ReduceMean", [x], base=base, axes=axes, keepdims=1)


TypeOf = Callable[[gs.Tensor], "G.TensorType | None"]


def _elem_type(node: gs.Node, type_of: TypeOf) -> int:
    for tensor in node.inputs[:2]:
        vt = type_of(tensor)
        if vt is not None and vt.elem_type:
            return vt.elem_type
        value = G.value(tensor)
        if value is not None:
            return helper.np_dtype_to_tensor_dtype(value.dtype)
    return TensorProto.FLOAT


def expand_layernorm(graph: gs.Graph, node: gs.Node, opset: int, type_of: TypeOf
                     ) -> list[gs.Node]:
    """The primitive nodes computing `node` (a LayerNormalization) at `opset`; `type_of`
    says what is known of a tensor's type."""
    x, scale = node.inputs[0], node.inputs[1]
    bias = node.inputs[2] if len(node.inputs) > 2 and not node.inputs[2].is_empty() else None
    axis = int(node.attrs.get("axis", -1))
    eps = float(node.attrs.get("epsilon", 1e-5))
    stash = int(node.attrs.get("stash_type", TensorProto.FLOAT))
    if axis < 0:
        axes = list(range(axis, 0))
    else:
        vt = type_of(x)
        if vt is None or vt.rank is None:
            raise TargetUnmetError(f"LayerNormalization {node.name!r}: axis {axis} on an input "
                                   "of unknown rank cannot be expanded")
        axes = list(range(axis, vt.rank))
    elem = _elem_type(node, type_of)
    base = node.name or "layernorm"
    out: list[gs.Node] = []

    def add(n: gs.Node) -> gs.Tensor:
        out.append(n)
        return n.outputs[0]

    def op(op_type: str, *inputs: gs.Tensor, outputs: list[gs.Tensor] | None = None,
           **attrs: Any) -> gs.Node:
        return G.node(graph, op_type, list(inputs), base=base, outputs=outputs, **attrs)

    cast = stash != elem
    xs = add(op("Cast", x, to=stash)) if cast else x
    mean = add(_reduce_mean(graph, xs, axes, opset, f"{base}_mean"))
    d = add(op("Sub", xs, mean))
    sq = add(op("Mul", d, d))
    var = add(_reduce_mean(graph, sq, axes, opset, f"{base}_var"))
    eps_c = G.scalar(graph, eps, stash, f"{base}_epsilon")
    var_eps = add(op("Add", var, eps_c))
    std = add(op("Sqrt", var_eps))
    norm = add(op("Div", d, std))
    if cast:
        norm = add(op("Cast", norm, to=elem))
    y = node.outputs[0]
    if bias is not None:
        scaled = add(op("Mul", norm, scale))
        out.append(op("Add", scaled, bias, outputs=[y]))
    else:
        out.append(op("Mul", norm, scale, outputs=[y]))
    if len(node.outputs) > 1 and not node.outputs[1].is_empty():
        out.append(op("Identity", mean, outputs=[node.outputs[1]]))
    if len(node.outputs) > 2 and not node.outputs[2].is_empty():
        one = G.scalar(graph, 1.0, stash, f"{base}_one")
        out.append(op("Div", one, std, outputs=[node.outputs[2]]))
    return out


def expand_all_layernorms(graph: gs.Graph, opset: int) -> int:
    """Expand every top-level LayerNormalization of `graph`; returns how many."""
    types = dict(G.infer_types(graph))  # as they are before any node changes
    nodes: list[gs.Node] = []
    count = 0
    for node in graph.nodes:
        if node.op == "LayerNormalization" and G.is_default(node):
            nodes.extend(expand_layernorm(graph, node, opset, lambda t: types.get(t.name)))
            count += 1
        else:
            nodes.append(node)
    if count:
        G.set_nodes(graph, nodes)
    return count
