"""The fixes for TensorRT restrictions, one function per restriction key (see
`restriction_fixes.py` for the contract). This module holds the Gather-family fixes; the
others live beside it by topic and are registered by the imports at the end."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper

from export_gelu.passes.compat.graph import attr_value, clone
from export_gelu.passes.compat.restriction_fixes import fix
from export_gelu.trt_parser.restrictions import GraphContext


def _axis_dim(node: onnx.NodeProto, ctx: GraphContext) -> tuple[int | None, object]:
    """The gather axis made non-negative (None when the rank is unknown) and its dim."""
    axis = int(attr_value(node, "axis", 0))
    data = ctx.type_of(node.input[0])
    rank = data.rank if data is not None else None
    if axis < 0:
        if rank is None:
            return None, None
        axis += rank
    dim = data.shape[axis] if data is not None and data.shape is not None else None
    return axis, dim


def _guarded(node: onnx.NodeProto, ctx: GraphContext, axis: int
             ) -> tuple[list[onnx.NodeProto], str] | None:
    """Where(Less(i, 0), Add(i, dim), i), dim read from Shape(data) at run time."""
    ed = ctx.editor
    indices = node.input[1]
    vt = ctx.type_of(indices)
    value = ctx.constant(indices)
    elem = vt.elem_type if vt is not None and vt.elem_type else (
        helper.np_dtype_to_tensor_dtype(value.dtype) if value is not None else 0)
    if elem not in (TensorProto.INT32, TensorProto.INT64):
        return None
    base = node.name or node.output[0]
    shape = ed.node("Shape", [node.input[0]], base)
    dim = ed.node("Gather", [shape.output[0], ed.const(np.array(axis, np.int64), f"{base}_axis")],
                  base, axis=0)
    nodes = [shape, dim]
    dim_name = dim.output[0]
    if elem != TensorProto.INT64:
        cast = ed.node("Cast", [dim_name], base, to=elem)
        nodes.append(cast)
        dim_name = cast.output[0]
    zero = ed.const(np.array(0, helper.tensor_dtype_to_np_dtype(elem)), f"{base}_zero")
    less = ed.node("Less", [indices, zero], base)
    add = ed.node("Add", [indices, dim_name], base)
    where = ed.node("Where", [less.output[0], add.output[0], indices], base)
    return [*nodes, less, add, where], where.output[0]


def _non_negative_indices(node: onnx.NodeProto, ctx: GraphContext
                          ) -> list[onnx.NodeProto] | None:
    axis, dim = _axis_dim(node, ctx)
    if axis is None:
        return None
    idx = ctx.constant(node.input[1])
    new = clone(node)
    if idx is not None and isinstance(dim, int):  # static dim: fold to constants
        fixed = np.where(idx < 0, idx + dim, idx).astype(idx.dtype)
        new.input[1] = ctx.editor.const(fixed, f"{node.input[1]}_nonneg")
        return [new]
    guarded = _guarded(node, ctx, axis)
    if guarded is None:
        return None
    nodes, name = guarded
    new.input[1] = name
    return [*nodes, new]


@fix("gather-negative-indices", "made non-negative (constants folded, computed indices "
     "guarded with Where(i < 0, i + dim, i))")
def _gather_nonnegative(node: onnx.NodeProto, ctx: GraphContext) -> list[onnx.NodeProto] | None:
    return _non_negative_indices(node, ctx)


@fix("gatherelements-negative-indices", "made non-negative (constants folded, computed "
     "indices guarded with Where(i < 0, i + dim, i))")
def _gatherelements_nonnegative(node: onnx.NodeProto, ctx: GraphContext
                                ) -> list[onnx.NodeProto] | None:
    return _non_negative_indices(node, ctx)


def _through_int32(node: onnx.NodeProto, ctx: GraphContext) -> list[onnx.NodeProto]:
    """Cast(data → INT32) → the gather → Cast(→ BOOL): the same values, a type it takes."""
    ed = ctx.editor
    base = node.name or node.output[0]
    to_int = ed.node("Cast", [node.input[0]], base, to=TensorProto.INT32)
    new = clone(node)
    new.input[0] = to_int.output[0]
    new.output[0] = ed.fresh(f"{base}_int32")
    back = ed.node("Cast", [new.output[0]], base, outputs=[node.output[0]], to=TensorProto.BOOL)
    return [to_int, new, back]


for _key in ("gather-bool-data", "gatherelements-bool-data", "gathernd-bool-data"):
    fix(_key, "gathered as INT32 between two Casts")(_through_int32)


# The other fixes, by topic (importing them registers them).
from export_gelu.passes.compat import dtype_fixes, output_fixes  # noqa: E402, F401
