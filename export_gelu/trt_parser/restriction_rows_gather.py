"""Restriction rows of the Gather family: negative indices (silent before 8.2 unless the
parser was built with SUPPORT_NEGATIVE_GATHER) and BOOL data (refused before 8.5), with
`non_negative`, the sign analysis the negative-indices rows and their fix stand on.
"""

from __future__ import annotations

import onnx_graphsurgeon as gs
from onnx import TensorProto

from export_gelu import graph as G
from export_gelu.trt_parser.restriction_records import restriction

_SIGNED_INT = (TensorProto.INT8, TensorProto.INT16, TensorProto.INT32, TensorProto.INT64)
#: Ops whose (first) output is never negative, whatever their inputs.
_NON_NEGATIVE_OPS = frozenset({"Shape", "Size", "NonZero", "ArgMax", "ArgMin", "Abs", "Relu"})
#: Ops that keep a non-negative input non-negative (their data input is input 0).
_SIGN_KEEPING_OPS = frozenset({"Cast", "Identity", "Reshape", "Squeeze", "Unsqueeze", "Flatten",
                               "Expand", "Transpose", "Slice", "Gather", "GatherElements",
                               "GatherND", "Concat", "Tile"})


def non_negative(tensor: gs.Tensor, graph: gs.Graph, depth: int = 0) -> bool:
    """Whether `tensor` is provably never negative (constants, shapes, unsigned types,
    TopK/ArgMax indices, the guarded form `negative_gather_guard` emits, and what keeps their
    sign). False means "not known", not "negative"."""
    value = G.value(tensor)
    if value is not None:
        return value.dtype.kind in "ub" or (value.size == 0 or bool((value >= 0).all()))
    vt = G.type_of(graph, tensor)
    if vt is not None and vt.elem_type and vt.elem_type not in _SIGNED_INT + (
            TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE, TensorProto.BFLOAT16):
        return True  # unsigned or bool
    node = G.producer(tensor)
    if node is None or depth > 8:
        return False
    op = node.op
    if op in _NON_NEGATIVE_OPS:
        return True
    if op == "TopK":
        return len(node.outputs) > 1 and tensor is node.outputs[1]
    if op == "Range":
        start, delta = G.value(node.inputs[0]), G.value(node.inputs[2])
        return start is not None and delta is not None and bool(start >= 0) and bool(delta > 0)
    if op == "Where" and is_gather_guard(node):
        return True
    if op == "Concat":
        return all(non_negative(i, graph, depth + 1) for i in node.inputs)
    if op in _SIGN_KEEPING_OPS:
        return non_negative(node.inputs[0], graph, depth + 1)
    if op in ("Add", "Mul", "Max"):
        return all(non_negative(i, graph, depth + 1) for i in node.inputs)
    return False


def is_gather_guard(where: gs.Node) -> bool:
    """Whether `where` is Where(Less(i, 0), Add(i, dim), i), the guarded index form."""
    less = G.producer(where.inputs[0])
    add = G.producer(where.inputs[1])
    if less is None or add is None or less.op != "Less" or add.op != "Add":
        return False
    zero = G.value(less.inputs[1])
    return (zero is not None and zero.size == 1 and zero.item() == 0
            and less.inputs[0] is where.inputs[2] and add.inputs[0] is where.inputs[2])


def _negative_indices(node: gs.Node, graph: gs.Graph) -> str | None:
    indices = node.inputs[1]
    idx = G.value(indices)
    if idx is not None:
        return f"constant indices, min {idx.min()}" if idx.size and idx.min() < 0 else None
    vt = G.type_of(graph, indices)
    if vt is None or vt.elem_type not in _SIGNED_INT or non_negative(indices, graph):
        return None
    return (f"computed {TensorProto.DataType.Name(vt.elem_type)} indices {indices.name!r} of "
            "unknown sign")


_NEGATIVE_WORDS = ("negative indices are not handled unless the parser is built with "
                   "SUPPORT_NEGATIVE_GATHER; 8.2 EA: \"natively support negative indices\"")


@restriction(key="gather-negative-indices", op="Gather", condition="negative indices",
             since=None, fixed_in="8.2", parser_words=_NEGATIVE_WORDS,
             source="onnx/onnx-tensorrt 84b5be1 (7.0) and release/7.1, release/7.2.1 "
                    "builtin_op_importers.cpp Gather (no handling); release/8.0 "
                    "builtin_op_importers.cpp Gather (#if SUPPORT_NEGATIVE_GATHER); "
                    "release/8.2-GA docs/Changelog.md 8.2 EA",
             silent=True)
def _gather_negative_indices(node: gs.Node, graph: gs.Graph) -> str | None:
    return _negative_indices(node, graph)


@restriction(key="gatherelements-negative-indices", op="GatherElements",
             condition="negative indices", since="8.0", fixed_in="8.2",
             parser_words=_NEGATIVE_WORDS,
             source="onnx/onnx-tensorrt release/8.0 builtin_op_importers.cpp GatherElements "
                    "(#if SUPPORT_NEGATIVE_GATHER); release/8.2-GA docs/Changelog.md 8.2 EA",
             silent=True)
def _gatherelements_negative_indices(node: gs.Node, graph: gs.Graph) -> str | None:
    return _negative_indices(node, graph)


def _bool_data(node: gs.Node, graph: gs.Graph) -> str | None:
    vt = G.type_of(graph, node.inputs[0])
    return "BOOL data" if vt is not None and vt.elem_type == TensorProto.BOOL else None


_BOOL_SOURCE = ("onnx/onnx-tensorrt release/7.1, release/7.2.1, release/8.0, release/8.2-GA, "
                "release/8.4-GA builtin_op_importers.cpp {op} (ASSERT data type != kBOOL); "
                "gone in release/8.5-GA")


@restriction(key="gather-bool-data", op="Gather", condition="BOOL data",
             since="7.1", fixed_in="8.5",
             parser_words="\"This version of TensorRT does not support BOOL input type for the "
                          "Gather operator.\"",
             source=_BOOL_SOURCE.format(op="Gather"))
def _gather_bool(node: gs.Node, graph: gs.Graph) -> str | None:
    return _bool_data(node, graph)


@restriction(key="gatherelements-bool-data", op="GatherElements", condition="BOOL data",
             since="8.0", fixed_in="8.5",
             parser_words="\"This version of TensorRT does not support BOOL input type for the "
                          "GatherElements operator.\"",
             source=_BOOL_SOURCE.format(op="GatherElements"))
def _gatherelements_bool(node: gs.Node, graph: gs.Graph) -> str | None:
    return _bool_data(node, graph)


@restriction(key="gathernd-bool-data", op="GatherND", condition="BOOL data",
             since="8.2", fixed_in="8.5",
             parser_words="\"This version of TensorRT does not support BOOL input type for the "
                          "GatherND operator.\"",
             source=_BOOL_SOURCE.format(op="GatherND"))
def _gathernd_bool(node: gs.Node, graph: gs.Graph) -> str | None:
    return _bool_data(node, graph)
