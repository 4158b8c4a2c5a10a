"""Fixes for the element-type restrictions (`export_gelu.trt_parser.dtype_rows`): DOUBLE to
FLOAT on 7.x where the values allow it, CastLike to Cast, integer Pow to forms with the same
values. INT64 constants out of INT32 range have no fix: no rewrite can keep their values."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from export_gelu.passes.compat.graph import attr_value, clone
from export_gelu.passes.compat.restriction_fixes import fix, graph_fix
from export_gelu.trt_parser.restrictions import GraphContext

_F32 = np.finfo(np.float32)
_FLOAT_TYPES = (TensorProto.FLOAT, TensorProto.FLOAT16)


def float32_exact_enough(value: np.ndarray) -> bool:
    """Whether every finite non-zero value lies in float32's normal range (inf/nan stay as
    they are): then rounding to float32 changes each value by at most 2**-24 relative."""
    finite = value[np.isfinite(value) & (value != 0)]
    mag = np.abs(finite)
    return not finite.size or bool((mag <= _F32.max).all() and (mag >= _F32.tiny).all())


def _max_relative_change(value: np.ndarray) -> float:
    finite = value[np.isfinite(value) & (value != 0)]
    if not finite.size:
        return 0.0
    return float(np.max(np.abs(finite.astype(np.float32).astype(np.float64) - finite)
                        / np.abs(finite)))


def _double_tensors_of(model: onnx.ModelProto) -> list[onnx.TensorProto]:
    """Every DOUBLE tensor value the graph holds: initializers and node attribute tensors."""
    found = [i for i in model.graph.initializer if i.data_type == TensorProto.DOUBLE]
    found += [a.t for n in model.graph.node for a in n.attribute
              if a.type == onnx.AttributeProto.TENSOR and a.t.data_type == TensorProto.DOUBLE]
    return found


@graph_fix("double-tensors")
def _double_to_float(model: onnx.ModelProto, ctx: GraphContext) -> str | None:
    """DOUBLE inputs, outputs, initializers, constants and Cast targets → FLOAT.

    Refuses (None) when a DOUBLE value is external data it cannot read (a tensor left in its
    file by onnx_weights.load_graph is read, and comes back inline in float32) or lies outside
    float32's range, or when something other than those makes DOUBLE (then the graph keeps
    its DOUBLE and the hit is reported)."""
    from export_gelu.onnx_weights import is_lazy, tensor_array

    tensors = _double_tensors_of(model)
    values = []
    for t in tensors:
        if t.data_location == TensorProto.EXTERNAL and not is_lazy(t):
            return None
        v = tensor_array(t)
        if not float32_exact_enough(v):
            return None
        values.append(v)
    g = model.graph
    worst = max((_max_relative_change(v) for v in values), default=0.0)
    for t, v in zip(tensors, values, strict=True):
        t.CopyFrom(numpy_helper.from_array(v.astype(np.float32), t.name))
    casts = 0
    for n in g.node:
        for a in n.attribute:
            if a.name in ("to", "dtype") and a.type == onnx.AttributeProto.INT \
                    and a.i == TensorProto.DOUBLE:
                a.i = TensorProto.FLOAT
                casts += 1
    io = 0
    for group in (g.input, g.output, g.value_info):
        for vi in group:
            tt = vi.type.tensor_type
            if tt.elem_type == TensorProto.DOUBLE:
                tt.elem_type = TensorProto.FLOAT
                io += group is not g.value_info
    if not (tensors or casts or io):
        return None  # nothing of ours made the DOUBLE that is left
    return (f"DOUBLE tensors converted to FLOAT ({len(tensors)} constant(s), {casts} Cast/dtype "
            f"attribute(s), {io} graph input/output(s)): constants rounded to float32 (largest "
            f"relative change {worst:.1e}), and arithmetic that ran in double now runs in "
            "float32 (about 7 significant digits instead of 16)")


@fix("castlike-no-importer", "rewritten as Cast to the type of their second input", early=True)
def _castlike_to_cast(node: onnx.NodeProto, ctx: GraphContext) -> list[onnx.NodeProto] | None:
    vt = ctx.type_of(node.input[1])
    if vt is None or not vt.elem_type:
        return None
    attrs: dict[str, object] = {"to": vt.elem_type}
    saturate = attr_value(node, "saturate")
    if saturate is not None and ctx.opset >= 19:
        attrs["saturate"] = saturate
    return [helper.make_node("Cast", [node.input[0]], [node.output[0]],
                             name=node.name or ctx.editor.fresh("CastLike/Cast"), **attrs)]


@fix("pow-integer-exponent", "given the same exponent values as a float constant")
def _float_exponent(node: onnx.NodeProto, ctx: GraphContext) -> list[onnx.NodeProto] | None:
    """A constant integer exponent as a constant of the base's float type, when every value
    converts exactly (|e| <= 2**24 for float32, 2048 for float16)."""
    e = ctx.constant(node.input[1])
    base = ctx.type_of(node.input[0])
    if e is None or base is None or base.elem_type not in _FLOAT_TYPES:
        return None
    f = e.astype(helper.tensor_dtype_to_np_dtype(base.elem_type))
    if not np.array_equal(f.astype(np.float64), e.astype(np.float64)):
        return None
    new = clone(node)
    new.input[1] = ctx.editor.const(f, f"{node.input[1]}_float")
    return [new]


#: The largest constant exponent an integer Pow is expanded for (that many Muls, less one).
MAX_MUL_EXPONENT = 8


@fix("pow-integer-base", f"rewritten as a chain of integer Mul (constant exponent 1 to "
     f"{MAX_MUL_EXPONENT})")
def _pow_as_muls(node: onnx.NodeProto, ctx: GraphContext) -> list[onnx.NodeProto] | None:
    """x ** k for a constant integer-valued k in 1..8 as x * x * … (exact integer arithmetic,
    the same values as Pow's), when the exponent cannot broadcast the base to a new shape."""
    e = ctx.constant(node.input[1])
    base = ctx.type_of(node.input[0])
    if e is None or e.size != 1 or base is None or base.rank is None or e.ndim > base.rank:
        return None
    k = float(e.reshape(()))
    if k != int(k) or not 1 <= k <= MAX_MUL_EXPONENT:
        return None
    ed = ctx.editor
    x = node.input[0]
    label = node.name or node.output[0]
    if k == 1:
        return [ed.node("Identity", [x], label, outputs=[node.output[0]])]
    nodes: list[onnx.NodeProto] = []
    acc = x
    for i in range(int(k) - 1):
        last = i == int(k) - 2
        mul = ed.node("Mul", [acc, x], label, outputs=[node.output[0]] if last else None)
        nodes.append(mul)
        acc = mul.output[0]
    return nodes
