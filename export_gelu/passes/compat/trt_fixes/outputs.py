"""Fixes for the extra-output restrictions (`export_gelu.trt_parser.output_rows`):
LayerNormalization keeps only Y (Mean and InvStdDev computed beside it where something reads
them), a two-output Dropout becomes Identity (and where the mask is read, the mask ONNX
Runtime computes in inference: all false at opsets 10-11 as `Less(x, x)`, all true from 12 as
`Not(Less(x, x))` — the elementwise form TensorRT 8.0's own importer uses, without BOOL
constants, which 7.x handles poorly)."""

from __future__ import annotations

import numpy as np
import onnx_graphsurgeon as gs
from onnx import TensorProto

from export_gelu import graph as G
from export_gelu.passes.compat.trt_fixes.registry import fix


def _reduce_mean(graph: gs.Graph, x: gs.Tensor, axes: list[int], base: str,
                 outputs: list[gs.Tensor] | None = None) -> gs.Node:
    """ReduceMean over `axes` keeping dims, in the form the model's opset spells it."""
    if G.opset(graph) >= 18:
        return G.node(graph, "ReduceMean",
                      [x, G.constant(graph, np.array(axes, np.int64), f"{base}_axes")],
                      base=base, outputs=outputs, keepdims=1)
    return G.node(graph, "ReduceMean", [x], base=base, outputs=outputs, axes=axes, keepdims=1)


@fix("layernorm-extra-outputs", "reduced to their Y output (Mean and InvStdDev, where read, "
     "computed beside them with ReduceMean/Sub/Mul/Sqrt/Div in the stash type)")
def _layernorm_y_only(node: gs.Node, graph: gs.Graph) -> list[gs.Node] | None:
    extra = [o if G.is_used(graph, o) else None for o in node.outputs[1:]] + [None, None]
    mean_out, inv_out = extra[:2]
    x = node.inputs[0]
    xt = G.type_of(graph, x)
    axis = int(node.attrs.get("axis", -1))
    if (mean_out is not None or inv_out is not None) and axis >= 0 \
            and (xt is None or xt.rank is None):
        return None
    y = G.clone(graph, node)
    G.trim_outputs(y, 1)
    if mean_out is None and inv_out is None:
        return [y]
    base = node.name or node.outputs[0].name
    if axis >= 0:
        assert xt is not None and xt.rank is not None  # else returned above
        axes = list(range(axis, xt.rank))
    else:
        axes = list(range(axis, 0))
    stash = int(node.attrs.get("stash_type", TensorProto.FLOAT))
    eps = float(node.attrs.get("epsilon", 1e-5))
    nodes = [y]
    if xt is None or xt.elem_type != stash:
        cast = G.node(graph, "Cast", [x], base=base, to=stash)
        nodes.append(cast)
        x = cast.outputs[0]
    mean = _reduce_mean(graph, x, axes, base, [mean_out] if mean_out is not None else None)
    nodes.append(mean)
    if inv_out is not None:
        d = G.node(graph, "Sub", [x, mean.outputs[0]], base=base)
        sq = G.node(graph, "Mul", [d.outputs[0], d.outputs[0]], base=base)
        var = _reduce_mean(graph, sq.outputs[0], axes, base)
        plus = G.node(graph, "Add", [var.outputs[0], G.scalar(graph, eps, stash, f"{base}_eps")],
                      base=base)
        sd = G.node(graph, "Sqrt", [plus.outputs[0]], base=base)
        inv = G.node(graph, "Div", [G.scalar(graph, 1.0, stash, f"{base}_one"), sd.outputs[0]],
                     base=base, outputs=[inv_out])
        nodes += [d, sq, var, plus, sd, inv]
    return nodes


@fix("dropout-mask-output", "rewritten as Identity (a constant mask where the mask is read)")
def _dropout_identity(node: gs.Node, graph: gs.Graph) -> list[gs.Node] | None:
    if len(node.inputs) > 2 and not node.inputs[2].is_empty():
        mode = G.value(node.inputs[2])  # training_mode: only a constant False is kept
        if mode is None or bool(mode.any()):
            return None
    base = node.name or node.outputs[0].name
    x = node.inputs[0]
    nodes: list[gs.Node] = []
    if not node.outputs[0].is_empty():
        nodes.append(G.node(graph, "Identity", [x], base=base, outputs=[node.outputs[0]]))
    mask = node.outputs[1]
    if G.is_used(graph, mask):  # Less(x, x) is false everywhere, NaN included
        opset = G.opset(graph)
        less = G.node(graph, "Less", [x, x], base=base,
                      outputs=None if opset >= 12 else [mask])
        nodes.append(less)
        if opset >= 12:
            nodes.append(G.node(graph, "Not", [less.outputs[0]], base=base, outputs=[mask]))
    return nodes
