"""Fixes for the extra-output restrictions (`export_gelu.trt_parser.output_rows`):
LayerNormalization keeps only Y (Mean and InvStdDev computed beside it where something reads
them), a two-output Dropout becomes Identity (and where the mask is read, the mask ONNX
Runtime computes in inference: all false at opsets 10-11 as `Less(x, x)`, all true from 12 as
`Not(Less(x, x))` — the elementwise form TensorRT 8.0's own importer uses, without BOOL
constants, which 7.x handles poorly)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto

from export_gelu.passes.compat.graph import attr_value, clone
from export_gelu.passes.compat.restriction_fixes import fix
from export_gelu.trt_parser.restrictions import GraphContext


def _reduce_mean(ctx: GraphContext, x: str, axes: list[int], base: str,
                 outputs: list[str] | None = None) -> onnx.NodeProto:
    """ReduceMean over `axes` keeping dims, in the form the model's opset spells it."""
    ed = ctx.editor
    if ctx.opset >= 18:
        return ed.node("ReduceMean", [x, ed.const(np.array(axes, np.int64), f"{base}_axes")],
                       base, outputs=outputs, keepdims=1)
    return ed.node("ReduceMean", [x], base, outputs=outputs, axes=axes, keepdims=1)


@fix("layernorm-extra-outputs", "reduced to their Y output (Mean and InvStdDev, where read, "
     "computed beside them with ReduceMean/Sub/Mul/Sqrt/Div in the stash type)")
def _layernorm_y_only(node: onnx.NodeProto, ctx: GraphContext) -> list[onnx.NodeProto] | None:
    y = clone(node)
    del y.output[1:]
    extra = list(node.output[1:]) + ["", ""]
    mean_out, inv_out = (o if ctx.is_used(o) else "" for o in extra[:2])
    if not mean_out and not inv_out:
        return [y]
    ed = ctx.editor
    base = node.name or node.output[0]
    x = node.input[0]
    xt = ctx.type_of(x)
    axis = int(attr_value(node, "axis", -1))
    if axis >= 0:
        if xt is None or xt.rank is None:
            return None
        axes = list(range(axis, xt.rank))
    else:
        axes = list(range(axis, 0))
    stash = int(attr_value(node, "stash_type", TensorProto.FLOAT))
    eps = float(attr_value(node, "epsilon", 1e-5))
    nodes = [y]
    if xt is None or xt.elem_type != stash:
        cast = ed.node("Cast", [x], base, to=stash)
        nodes.append(cast)
        x = cast.output[0]
    mean = _reduce_mean(ctx, x, axes, base, [mean_out] if mean_out else None)
    nodes.append(mean)
    if inv_out:
        d = ed.node("Sub", [x, mean.output[0]], base)
        sq = ed.node("Mul", [d.output[0], d.output[0]], base)
        var = _reduce_mean(ctx, sq.output[0], axes, base)
        plus = ed.node("Add", [var.output[0], ed.scalar(eps, stash, f"{base}_eps")], base)
        sd = ed.node("Sqrt", [plus.output[0]], base)
        inv = ed.node("Div", [ed.scalar(1.0, stash, f"{base}_one"), sd.output[0]], base,
                      outputs=[inv_out])
        nodes += [d, sq, var, plus, sd, inv]
    return nodes


@fix("dropout-mask-output", "rewritten as Identity (a constant mask where the mask is read)")
def _dropout_identity(node: onnx.NodeProto, ctx: GraphContext) -> list[onnx.NodeProto] | None:
    if len(node.input) > 2 and node.input[2]:  # training_mode: only a constant False is kept
        mode = ctx.constant(node.input[2])
        if mode is None or bool(mode.any()):
            return None
    ed = ctx.editor
    base = node.name or node.output[0]
    x = node.input[0]
    nodes: list[onnx.NodeProto] = []
    if node.output[0]:
        nodes.append(ed.node("Identity", [x], base, outputs=[node.output[0]]))
    if ctx.is_used(node.output[1]):  # Less(x, x) is false everywhere, NaN included
        mask = [node.output[1]]
        less = ed.node("Less", [x, x], base, outputs=None if ctx.opset >= 12 else mask)
        nodes.append(less)
        if ctx.opset >= 12:
            nodes.append(ed.node("Not", [less.output[0]], base, outputs=mask))
    return nodes
