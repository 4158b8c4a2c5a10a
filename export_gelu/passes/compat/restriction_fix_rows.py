"""The fixes for TensorRT restrictions, one function per restriction key (see
`restriction_fixes.py` for the contract)."""

from __future__ import annotations

import numpy as np
import onnx

from export_gelu.passes.compat.restriction_fixes import fix
from export_gelu.trt_parser.restrictions import GraphContext


@fix("gather-negative-indices", "made non-negative")
def _gather_nonnegative(node: onnx.NodeProto, ctx: GraphContext) -> list[onnx.NodeProto] | None:
    idx = ctx.constant(node.input[1])
    data = ctx.type_of(node.input[0])
    if idx is None or data is None or data.shape is None:
        return None
    axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
    dim = data.shape[axis]
    if not isinstance(dim, int):
        return None
    fixed = np.where(idx < 0, idx + dim, idx).astype(idx.dtype)
    new = onnx.NodeProto()
    new.CopyFrom(node)
    new.input[1] = ctx.editor.const(fixed, f"{node.input[1]}_nonneg")
    return [new]


# Fixes for inputs the parser needs as constants, Trilu, Einsum, Reduce and Pad axes, ScatterND.
from export_gelu.passes.compat import restriction_fix_inputs  # noqa: E402,F401
