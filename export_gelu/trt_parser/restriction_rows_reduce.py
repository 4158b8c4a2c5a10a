"""Restriction rows of the Reduce ops' `axes` input: computed axes (the parser needs them as
weights) and, before 10.0, constant opset-18 axes the importers ignore (a silent row: they
reduce over every axis)."""

from __future__ import annotations

import onnx_graphsurgeon as gs

from export_gelu import graph as G
from export_gelu.trt_parser.restriction_records import restriction
from export_gelu.trt_parser.restriction_shared import (
    OTRT,
    REDUCE_AXES_INPUT,
    given,
    must_be_weights,
    opset_of,
    rank_of,
)

for _op, _from in REDUCE_AXES_INPUT.items():
    must_be_weights(
        key=f"{_op.lower()}-axes-computed", op=_op, inputs=(1,), labels=("axes",),
        from_opset=_from, since=None, fixed_in=None,
        parser_words="\"Axis input must be an initializer!\" (reduceTensor); docs/operators.md "
                     "10.0-10.15 \"`axes` must be an initializer\"" + (
                         "" if _op == "ReduceSum" else "; before 10.0 the importer does not "
                         "read an axes input at all"),
        source=f"{OTRT} onnx2trt_utils.cpp release/8.0, 9.3 and importerUtils.cpp "
               f"release/10.1-GA (reduceTensor); docs/operators.md release/10.0-GA, 10.15")


def _axes_ignored(node: gs.Node, graph: gs.Graph) -> str | None:
    """The constant axes input of an opset-18 Reduce op, when ignoring it changes the result
    (computed axes are the axes-computed row's)."""
    axes_in = given(node, 1)
    if opset_of(graph) < 18 or axes_in is None or not G.is_weights(axes_in):
        return None
    axes = G.value(axes_in)
    rank = rank_of(graph, node.inputs[0])
    if axes is None:
        return "axes held in external data"
    if axes.size == 0 and not node.attrs.get("noop_with_empty_axes", 0):
        return None  # empty axes reduce everything: what the parser does anyway
    if rank is not None and {int(a) % rank for a in axes.ravel()} == set(range(rank)):
        return None
    return f"axes {axes.ravel().tolist()} of a rank-{rank} input"


for _op, _from in REDUCE_AXES_INPUT.items():
    if _op == "ReduceSum":
        continue
    restriction(
        key=f"{_op.lower()}-axes-ignored", op=_op,
        condition="a constant `axes` input (opset >= 18) that does not cover every axis",
        since=None, fixed_in="10.0", silent=True,
        parser_words=f"the {_op} importer passes no axes input to reduceTensor, so it reduces "
                     "over every axis; 10.0 passes inputs.at(1)",
        source=f"{OTRT} builtin_op_importers.cpp release/8.6-GA, 9.0-GA, 9.3 and "
               f"onnxOpImporters.cpp release/10.0-GA ({_op})")(_axes_ignored)
