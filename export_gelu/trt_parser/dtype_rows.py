"""Restriction records about element types: DOUBLE on 7.x, INT64 constants narrowed to INT32
before 9.0, CastLike before 9.1, integer Pow before 10.8 / 10.12 (see `restrictions.py`)."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_graphsurgeon as gs
from onnx import TensorProto

from export_gelu import graph as G
from export_gelu.onnx_weights import is_lazy, tensor_array
from export_gelu.trt_parser.restriction_records import graph_restriction, restriction
from export_gelu.trt_parser.restriction_shared import (
    CLAMP_SAFE_READS,
    attr_tensors,
    float32_exact_enough,
)

_INT32 = np.iinfo(np.int32)
INTEGER_TYPES = frozenset({TensorProto.INT8, TensorProto.INT16, TensorProto.INT32,
                           TensorProto.INT64, TensorProto.UINT8, TensorProto.UINT16,
                           TensorProto.UINT32, TensorProto.UINT64})


# -- DOUBLE on 7.x -------------------------------------------------------------------------

def declares_double(node: gs.Node) -> bool:
    """Whether a node brings DOUBLE in by itself (an attribute type or tensor)."""
    for name in ("to", "dtype"):
        value = node.attrs.get(name)
        if isinstance(value, int) and not isinstance(value, bool) \
                and value == TensorProto.DOUBLE:
            return True
    return any(G.elem_type_of(t) == TensorProto.DOUBLE for t in attr_tensors(node))


def _proto_attr_types(node: onnx.NodeProto) -> list[int]:
    """Element types a NodeProto names by itself: `to`/`dtype` and its tensor attributes."""
    found = [a.i for a in node.attribute if a.name in ("to", "dtype")
             and a.type == onnx.AttributeProto.INT]
    return found + [a.t.data_type for a in node.attribute if a.type == onnx.AttributeProto.TENSOR]


def _has_double(graph: gs.Graph | onnx.ModelProto) -> bool:
    if isinstance(graph, onnx.ModelProto):  # the file as it is: no graph loaded
        g = graph.graph
        return any(v.type.tensor_type.elem_type == TensorProto.DOUBLE
                   for v in (*g.input, *g.output, *g.value_info)) or any(
            i.data_type == TensorProto.DOUBLE for i in g.initializer) or any(
            n.op_type == "CastLike" or TensorProto.DOUBLE in _proto_attr_types(n)
            for n in g.node)
    if any(isinstance(t, gs.Variable) and t.dtype is not None
           and G.elem_type_of(t) == TensorProto.DOUBLE for t in G.tensors(graph).values()):
        return True
    if any(G.elem_type_of(i) == TensorProto.DOUBLE for i in G.initializers(graph)):
        return True
    return any(declares_double(n) or n.op == "CastLike" for n in graph.nodes)


def _is_double(tensor: gs.Tensor, graph: gs.Graph) -> bool:
    vt = G.type_of(graph, tensor)
    return vt is not None and vt.elem_type == TensorProto.DOUBLE


def _range_note(value: np.ndarray | None) -> str:
    """', values outside float32's range' when a DOUBLE constant cannot become FLOAT."""
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
def _double_tensors(graph: gs.Graph) -> list[tuple[str, str]]:
    """Where DOUBLE enters the graph: inputs, initializers, and nodes that make DOUBLE from
    non-DOUBLE inputs (Constant, Cast, ConstantOfShape, ...)."""
    found = [(i.name, "graph input") for i in graph.inputs
             if G.elem_type_of(i) == TensorProto.DOUBLE]
    found += [(i.name, "initializer" + _range_note(G.value(i)))
              for i in G.initializers(graph) if G.elem_type_of(i) == TensorProto.DOUBLE]
    for n in graph.nodes:
        if not G.is_default(n):
            continue
        outs = [o for o in n.outputs if not o.is_empty()]
        makes = declares_double(n) or any(_is_double(o, graph) for o in outs)
        if makes and not any(_is_double(i, graph) for i in n.inputs if not i.is_empty()):
            out = outs[0].name if outs else n.name
            value = G.value(outs[0]) if n.op == "Constant" and outs else None
            found.append((out, f"output of {n.op} {n.name or out!r}{_range_note(value)}"))
    return found


# -- INT64 constants out of INT32 range before 9.0 -----------------------------------------

def _has_int64_constant(graph: gs.Graph | onnx.ModelProto) -> bool:
    if isinstance(graph, onnx.ModelProto):  # the file as it is: no graph loaded
        g = graph.graph
        return any(i.data_type == TensorProto.INT64 for i in g.initializer) or any(
            a.type == onnx.AttributeProto.TENSOR and a.t.data_type == TensorProto.INT64
            for n in g.node if n.op_type in ("Constant", "ConstantOfShape") for a in n.attribute)
    if any(G.elem_type_of(i) == TensorProto.INT64 for i in G.initializers(graph)):
        return True
    return any(G.elem_type_of(t) == TensorProto.INT64 for n in graph.nodes
               if n.op in ("Constant", "ConstantOfShape") for t in attr_tensors(n))


def _out_of_int32(value: np.ndarray) -> str | None:
    if value.dtype != np.int64 or not value.size:
        return None
    lo, hi = int(value.min()), int(value.max())
    if lo >= _INT32.min and hi <= _INT32.max:
        return None
    return str(hi if hi > _INT32.max else lo)


def _clamp_safe(tensor: gs.Tensor, graph: gs.Graph) -> bool:
    if G.is_output(graph, tensor):
        return False
    return all((n.op, i) in CLAMP_SAFE_READS for n in G.consumers(tensor)
               for i, inp in enumerate(n.inputs) if inp is tensor)


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
def _int64_out_of_range(graph: gs.Graph) -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    for init in G.initializers(graph):
        if G.elem_type_of(init) != TensorProto.INT64:
            continue
        proto = G.proto_of(init)
        # a big one left in its file (onnx_weights.load_graph) is read to be scanned
        value = tensor_array(proto) if proto is not None and is_lazy(proto) else G.value(init)
        bad = _out_of_int32(value) if value is not None else None
        if bad is not None and not _clamp_safe(init, graph):
            found.append((init.name, f"INT64 initializer holding {bad}"))
    for n in graph.nodes:
        if n.op not in ("Constant", "ConstantOfShape") or not G.is_default(n):
            continue
        for t in attr_tensors(n):
            if G.elem_type_of(t) != TensorProto.INT64:
                continue
            arr = G.array_of(t)
            bad = _out_of_int32(arr) if arr is not None else None
            out = n.outputs[0]
            if bad is not None and not (n.op == "Constant" and _clamp_safe(out, graph)):
                found.append((out.name, f"INT64 {n.op} value {bad}"))
    return found


# -- CastLike before 9.1 -------------------------------------------------------------------

@restriction(key="castlike-no-importer", op="CastLike", condition="no importer",
             since=None, fixed_in="9.1",
             parser_words="\"No importer registered for op: CastLike. Attempting to import as "
                          "plugin.\" (no such plugin); the CastLike importer arrives in 9.1",
             source="onnx/onnx-tensorrt 9.0-GA builtin_op_importers.cpp (no CastLike), "
                    "ModelImporter.cpp; 9.1 builtin_op_importers.cpp CastLike")
def _castlike(node: gs.Node, graph: gs.Graph) -> str | None:
    vt = G.type_of(graph, node.inputs[1])
    if vt is None or not vt.elem_type:
        return f"target type from {node.inputs[1].name!r}, unknown"
    return f"target type {TensorProto.DataType.Name(vt.elem_type)}"


# -- integer Pow ---------------------------------------------------------------------------

def _type_name(tensor: gs.Tensor, graph: gs.Graph) -> str | None:
    vt = G.type_of(graph, tensor)
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
def _pow_int_exponent(node: gs.Node, graph: gs.Graph) -> str | None:
    if _type_name(node.inputs[0], graph) is not None:
        return None  # an integer base is the other record's
    t = _type_name(node.inputs[1], graph)
    return f"{t} exponent {node.inputs[1].name!r}" if t else None


@restriction(key="pow-integer-base", op="Pow", condition="an integer base",
             since="7.1", fixed_in="10.12", parser_words=_POW_WORDS + "; 10.12: \"Added support "
             "for integer-typed base tensors for Pow operations\"",
             source=_POW_SOURCE.format(release="10.12 GA"))
def _pow_int_base(node: gs.Node, graph: gs.Graph) -> str | None:
    t = _type_name(node.inputs[0], graph)
    return f"{t} base {node.inputs[0].name!r}" if t else None

