"""The fixes for TensorRT restrictions, one function per restriction key (see
`apply.py` for the contract). This module holds the Gather-family fixes; the
others live beside it by topic and are registered by the imports at the end."""

from __future__ import annotations

import numpy as np
import onnx_graphsurgeon as gs
from onnx import TensorProto, helper

from export_gelu import graph as G
from export_gelu.passes.compat.trt_fixes.registry import fix


def _axis_dim(node: gs.Node, graph: gs.Graph) -> tuple[int | None, object]:
    """The gather axis made non-negative (None when the rank is unknown) and its dim."""
    axis = int(node.attrs.get("axis", 0))
    data = G.type_of(graph, node.inputs[0])
    rank = data.rank if data is not None else None
    if axis < 0:
        if rank is None:
            return None, None
        axis += rank
    dim = data.shape[axis] if data is not None and data.shape is not None else None
    return axis, dim


def _guarded(node: gs.Node, graph: gs.Graph, axis: int
             ) -> tuple[list[gs.Node], gs.Tensor] | None:
    """Where(Less(i, 0), Add(i, dim), i), dim read from Shape(data) at run time."""
    indices = node.inputs[1]
    vt = G.type_of(graph, indices)
    value = G.value(indices)
    elem = vt.elem_type if vt is not None and vt.elem_type else (
        helper.np_dtype_to_tensor_dtype(value.dtype) if value is not None else 0)
    if elem not in (TensorProto.INT32, TensorProto.INT64):
        return None
    base = node.name or node.outputs[0].name
    shape = G.node(graph, "Shape", [node.inputs[0]], base=base)
    dim = G.node(graph, "Gather", [shape.outputs[0],
                                   G.constant(graph, np.array(axis, np.int64), f"{base}_axis")],
                 base=base, axis=0)
    nodes = [shape, dim]
    dim_out = dim.outputs[0]
    if elem != TensorProto.INT64:
        cast = G.node(graph, "Cast", [dim_out], base=base, to=elem)
        nodes.append(cast)
        dim_out = cast.outputs[0]
    zero = G.constant(graph, np.array(0, helper.tensor_dtype_to_np_dtype(elem)), f"{base}_zero")
    less = G.node(graph, "Less", [indices, zero], base=base)
    add = G.node(graph, "Add", [indices, dim_out], base=base)
    where = G.node(graph, "Where", [less.outputs[0], add.outputs[0], indices], base=base)
    return [*nodes, less, add, where], where.outputs[0]


def _non_negative_indices(node: gs.Node, graph: gs.Graph) -> list[gs.Node] | None:
    axis, dim = _axis_dim(node, graph)
    if axis is None:
        return None
    indices = node.inputs[1]
    idx = G.value(indices)
    if idx is not None and isinstance(dim, int):  # static dim: fold to constants
        fixed = np.where(idx < 0, idx + dim, idx).astype(idx.dtype)
        new = G.clone(graph, node)
        G.set_input(new, 1, G.constant(graph, fixed, f"{indices.name}_nonneg"))
        return [new]
    guarded = _guarded(node, graph, axis)
    if guarded is None:
        return None
    nodes, out = guarded
    new = G.clone(graph, node)
    G.set_input(new, 1, out)
    return [*nodes, new]


@fix("gather-negative-indices", "made non-negative (constants folded, computed indices "
     "guarded with Where(i < 0, i + dim, i))")
def _gather_nonnegative(node: gs.Node, graph: gs.Graph) -> list[gs.Node] | None:
    return _non_negative_indices(node, graph)


@fix("gatherelements-negative-indices", "made non-negative (constants folded, computed "
     "indices guarded with Where(i < 0, i + dim, i))")
def _gatherelements_nonnegative(node: gs.Node, graph: gs.Graph) -> list[gs.Node] | None:
    return _non_negative_indices(node, graph)


def _through_int32(node: gs.Node, graph: gs.Graph) -> list[gs.Node]:
    """Cast(data → INT32) → the gather → Cast(→ BOOL): the same values, a type it takes."""
    base = node.name or node.outputs[0].name
    to_int = G.node(graph, "Cast", [node.inputs[0]], base=base, to=TensorProto.INT32)
    new = G.clone(graph, node)
    G.set_input(new, 0, to_int.outputs[0])
    out = node.outputs[0]
    G.set_output(new, 0, G.variable(graph, f"{base}_int32"))
    back = G.node(graph, "Cast", [new.outputs[0]], base=base, outputs=[out], to=TensorProto.BOOL)
    return [to_int, new, back]


for _key in ("gather-bool-data", "gatherelements-bool-data", "gathernd-bool-data"):
    fix(_key, "gathered as INT32 between two Casts")(_through_int32)


# The other fixes, by topic (importing them registers them).
from export_gelu.passes.compat.trt_fixes import (  # noqa: E402, F401
    dtypes,
    inputs,
    outputs,
)
