"""Restriction records about element types: DOUBLE on 7.x, INT64 constants narrowed to INT32
before 9.0, CastLike before 9.1, integer Pow before 10.8 / 10.12 (see `restrictions.py`)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto

from export_gelu.trt_parser.restrictions import GraphContext, graph_restriction, restriction

_DEFAULT = ("", "ai.onnx")
_INT32 = np.iinfo(np.int32)
INTEGER_TYPES = frozenset({TensorProto.INT8, TensorProto.INT16, TensorProto.INT32,
                           TensorProto.INT64, TensorProto.UINT8, TensorProto.UINT16,
                           TensorProto.UINT32, TensorProto.UINT64})


# -- DOUBLE on 7.x -------------------------------------------------------------------------

def _attr_tensors(node: onnx.NodeProto) -> list[onnx.TensorProto]:
    return [a.t for a in node.attribute if a.type == onnx.AttributeProto.TENSOR]


def _declares_double(node: onnx.NodeProto) -> bool:
    """Whether a node brings DOUBLE in by itself (an attribute type or tensor)."""
    for a in node.attribute:
        if a.name in ("to", "dtype") and a.type == onnx.AttributeProto.INT \
                and a.i == TensorProto.DOUBLE:
            return True
    return any(t.data_type == TensorProto.DOUBLE for t in _attr_tensors(node))


def _has_double(model: onnx.ModelProto) -> bool:
    g = model.graph
    values = [*g.input, *g.output, *g.value_info]
    if any(v.type.tensor_type.elem_type == TensorProto.DOUBLE for v in values):
        return True
    if any(i.data_type == TensorProto.DOUBLE for i in g.initializer):
        return True
    return any(_declares_double(n) or n.op_type == "CastLike" for n in g.node)


def _is_double(name: str, ctx: GraphContext) -> bool:
    vt = ctx.type_of(name)
    return vt is not None and vt.elem_type == TensorProto.DOUBLE


def _range_note(value: np.ndarray | None) -> str:
    """', values outside float32's range' when a DOUBLE constant cannot become FLOAT."""
    from export_gelu.passes.compat.dtype_fixes import float32_exact_enough

    if value is None or float32_exact_enough(value):
        return ""
    return ", values outside float32's normal range"


@graph_restriction(
    present=_has_double,
    key="double-tensors", op="tensor", condition="element type DOUBLE",
    since=None, fixed_in="8.0",
    parser_words="convertDtype has no DOUBLE case: \"Unsupported ONNX data type: DOUBLE\", "
                 "Cast to DOUBLE \"Unsupported cast!\"; from 8.0 (21.05) DOUBLE is read as FLOAT",
    source="onnx/onnx-tensorrt 84b5be1 (7.0), release/7.1, release/7.2.1 onnx2trt_utils.cpp "
           "convertDtype, builtin_op_importers.cpp Cast; release/8.0 onnx2trt_utils.cpp "
           "convertDtype (DOUBLE → kFLOAT); docs/Changelog.md 21.05 \"DOUBLE-typed inputs and "
           "weights through downcast to float\"")
def _double_tensors(ctx: GraphContext) -> list[tuple[str, str]]:
    """Where DOUBLE enters the graph: inputs, initializers, and nodes that make DOUBLE from
    non-DOUBLE inputs (Constant, Cast, ConstantOfShape, ...)."""
    g = ctx.model.graph
    inits = {i.name for i in g.initializer}
    found = [(i.name, "graph input") for i in g.input
             if i.name not in inits and i.type.tensor_type.elem_type == TensorProto.DOUBLE]
    found += [(i.name, "initializer" + _range_note(ctx.constant(i.name)))
              for i in g.initializer if i.data_type == TensorProto.DOUBLE]
    for n in g.node:
        if n.domain not in _DEFAULT:
            continue
        makes = _declares_double(n) or any(_is_double(o, ctx) for o in n.output if o)
        if makes and not any(_is_double(i, ctx) for i in n.input if i):
            out = next((o for o in n.output if o), n.name)
            value = ctx.constant(out) if n.op_type == "Constant" else None
            found.append((out, f"output of {n.op_type} {n.name or out!r}{_range_note(value)}"))
    return found


# -- INT64 constants out of INT32 range before 9.0 -----------------------------------------

#: (op, input index) reads where clamping an INT64 constant to INT32 changes nothing: Slice
#: starts/ends are clamped to the dimension anyway, and Clip bounds to INT32 data.
_CLAMP_SAFE = {("Slice", 1), ("Slice", 2), ("Clip", 1), ("Clip", 2)}


def _has_int64_constant(model: onnx.ModelProto) -> bool:
    if any(i.data_type == TensorProto.INT64 for i in model.graph.initializer):
        return True
    return any(t.data_type == TensorProto.INT64 for n in model.graph.node
               if n.op_type in ("Constant", "ConstantOfShape") for t in _attr_tensors(n))


def _out_of_int32(value: np.ndarray) -> str | None:
    if value.dtype != np.int64 or not value.size:
        return None
    lo, hi = int(value.min()), int(value.max())
    if lo >= _INT32.min and hi <= _INT32.max:
        return None
    return str(hi if hi > _INT32.max else lo)


def _clamp_safe(name: str, ctx: GraphContext) -> bool:
    if name in ctx.graph_outputs:
        return False
    return all((n.op_type, i) in _CLAMP_SAFE for n in ctx.users.get(name, ())
               for i, inp in enumerate(n.input) if inp == name)


@graph_restriction(
    present=_has_int64_constant,
    key="int64-out-of-int32", op="tensor", condition="INT64 values outside the INT32 range",
    since=None, fixed_in="9.0",
    parser_words="INT64 weights are cast down to INT32 and values out of range clamped (\"One "
                 "or more weights outside the range of INT32 was clamped\", a warning); 9.0 EA: "
                 "\"The ONNX parser no longer automatically casts INT64 to INT32\"",
    source="onnx/onnx-tensorrt 84b5be1 (7.0) … release/8.6-GA onnx2trt_utils.cpp convertINT64; "
           "docs/Changelog.md 9.0 EA",
    silent=True)
def _int64_out_of_range(ctx: GraphContext) -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    from export_gelu.onnx_weights import is_lazy, tensor_array

    for init in ctx.model.graph.initializer:
        if init.data_type == TensorProto.INT64:
            # a big one left in its file (onnx_weights.load_graph) is read to be scanned
            value = tensor_array(init) if is_lazy(init) else ctx.constant(init.name)
            bad = _out_of_int32(value) if value is not None else None
            if bad is not None and not _clamp_safe(init.name, ctx):
                found.append((init.name, f"INT64 initializer holding {bad}"))
    for n in ctx.model.graph.node:
        if n.op_type not in ("Constant", "ConstantOfShape") or n.domain not in _DEFAULT:
            continue
        for t in _attr_tensors(n):
            if t.data_type != TensorProto.INT64:
                continue
            bad = _out_of_int32(onnx.numpy_helper.to_array(t))
            if bad is not None and not (n.op_type == "Constant" and _clamp_safe(n.output[0], ctx)):
                found.append((n.output[0], f"INT64 {n.op_type} value {bad}"))
    return found


# -- CastLike before 9.1 -------------------------------------------------------------------

@restriction(key="castlike-no-importer", op="CastLike", condition="no importer",
             since=None, fixed_in="9.1",
             parser_words="\"No importer registered for op: CastLike. Attempting to import as "
                          "plugin.\" (no such plugin); the CastLike importer arrives in 9.1",
             source="onnx/onnx-tensorrt 9.0-GA builtin_op_importers.cpp (no CastLike), "
                    "ModelImporter.cpp; 9.1 builtin_op_importers.cpp CastLike")
def _castlike(node: onnx.NodeProto, ctx: GraphContext) -> str | None:
    vt = ctx.type_of(node.input[1])
    if vt is None or not vt.elem_type:
        return f"target type from {node.input[1]!r}, unknown"
    return f"target type {TensorProto.DataType.Name(vt.elem_type)}"


# -- integer Pow ---------------------------------------------------------------------------

def _type_name(name: str, ctx: GraphContext) -> str | None:
    vt = ctx.type_of(name)
    if vt is None or vt.elem_type not in INTEGER_TYPES:
        return None
    return TensorProto.DataType.Name(vt.elem_type)


_POW_SOURCE = ("onnx/onnx-tensorrt release/7.1 … release/8.6-GA onnx2trt_utils.cpp "
               "elementwiseCheck (kPOW), release/10.1-GA importerUtils.cpp; "
               "docs/Changelog.md {release}")
_POW_WORDS = ("\"Elementwise layer does not support operator POW with boolean or integer "
              "types.\"")


@restriction(key="pow-integer-exponent", op="Pow", condition="an integer exponent",
             since="7.1", fixed_in="10.8", parser_words=_POW_WORDS + "; 10.8: \"Added support "
             "for Pow ops with integer-typed exponent values\"",
             source=_POW_SOURCE.format(release="10.8 GA"))
def _pow_int_exponent(node: onnx.NodeProto, ctx: GraphContext) -> str | None:
    if _type_name(node.input[0], ctx) is not None:
        return None  # an integer base is the other record's
    t = _type_name(node.input[1], ctx)
    return f"{t} exponent {node.input[1]!r}" if t else None


@restriction(key="pow-integer-base", op="Pow", condition="an integer base",
             since="7.1", fixed_in="10.12", parser_words=_POW_WORDS + "; 10.12: \"Added support "
             "for integer-typed base tensors for Pow operations\"",
             source=_POW_SOURCE.format(release="10.12 GA"))
def _pow_int_base(node: onnx.NodeProto, ctx: GraphContext) -> str | None:
    t = _type_name(node.input[0], ctx)
    return f"{t} base {node.input[0]!r}" if t else None

