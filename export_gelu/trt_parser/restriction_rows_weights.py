"""Restriction rows: inputs the parser needs as weights (constants), for Slice, Squeeze,
Unsqueeze, Split, Clip, float Range and TopK. Each row cites the parser source it was read
from; the fix folds such an input to an initializer when it is constant in fact
(`passes/compat/trt_fixes/inputs.py`). The Reduce and Pad rows of the family are in
`restriction_rows_reduce.py` and `restriction_rows_pad.py`.
"""

from __future__ import annotations

import onnx_graphsurgeon as gs

from export_gelu import graph as G
from export_gelu.trt_parser.restriction_shared import (
    CHANGELOG,
    FLOATS,
    IMPORTERS,
    OTRT,
    must_be_weights,
)

must_be_weights(
    key="slice-axes-computed", op="Slice", inputs=(3,), labels=("axes",), from_opset=10,
    since=None, fixed_in="10.3",
    parser_words="\"This version of TensorRT does not support dynamic axes.\" (starts, ends and "
                 "steps may be tensors); 10.3 GA: \"Added support for tensor `axes` inputs for "
                 "`Slice` nodes\"",
    source=f"{OTRT} {IMPORTERS} (Slice: ASSERT axes.allValuesKnown()); {CHANGELOG}")

must_be_weights(
    key="squeeze-axes-computed", op="Squeeze", inputs=(1,), labels=("axes",), from_opset=13,
    since=None, fixed_in="10.7",
    parser_words="\"Squeeze axes input must be an initializer!\"; 10.7 GA: \"Added dynamic "
                 "axes support for `Squeeze` and `Unsqueeze` operations\"",
    source=f"{OTRT} {IMPORTERS} (Squeeze, opset >= 13: ASSERT inputs.at(1).is_weights()); "
           f"{CHANGELOG}")

must_be_weights(
    key="unsqueeze-axes-computed", op="Unsqueeze", inputs=(1,), labels=("axes",),
    from_opset=13, since=None, fixed_in="10.7",
    parser_words="\"Axes input for unsqueeze operation should be a constant tensor.\"; 10.7 GA: "
                 "\"Added dynamic axes support for `Squeeze` and `Unsqueeze` operations\"",
    source=f"{OTRT} {IMPORTERS} (Unsqueeze, opset >= 13: ASSERT axesInput.allValuesKnown()); "
           f"{CHANGELOG}")

must_be_weights(
    key="split-sizes-computed", op="Split", inputs=(1,), labels=("split",), from_opset=13,
    since=None, fixed_in="8.2",
    parser_words="\"Split input 'split', if specified, must be an initializer!\"; from 8.2 a "
                 "tensor `split` is read as a shape tensor",
    source=f"{OTRT} builtin_op_importers.cpp release/8.0 and release/8.2-GA (Split); "
           f"docs/operators.md release/8.0 \"`split` must be an initializer\"")

must_be_weights(
    key="clip-bounds-computed", op="Clip", inputs=(1, 2), labels=("min", "max"),
    from_opset=11, since=None, fixed_in="8.2",
    parser_words="\"Clip min value must be an initializer!\" / \"Clip max value must be an "
                 "initializer!\"; from 8.2 tensor bounds go through elementwise Max/Min",
    source=f"{OTRT} builtin_op_importers.cpp 7.0 (84b5be1), release/8.0, release/8.2-GA "
           f"(Clip); docs/operators.md 7.x/8.0 \"min and max clip values must be an "
           f"initializer\"")


def _float_range(node: gs.Node, graph: gs.Graph) -> bool:
    vt = G.type_of(graph, node.inputs[0])
    return vt is not None and vt.elem_type in FLOATS


must_be_weights(
    key="range-float-computed", op="Range", inputs=(0, 1, 2),
    labels=("start", "limit", "delta"), from_opset=11, since=None, fixed_in="8.4",
    when=_float_range,
    parser_words="floating-point Range is imported only when start, limit and delta are all "
                 "initializers, else \"For range operator with dynamic inputs, this version "
                 "of TensorRT only supports INT32!\"; 8.4 GA: \"Added dynamic shape support "
                 "for `Range` for floating point types\"",
    source=f"{OTRT} builtin_op_importers.cpp 7.0 (84b5be1), release/8.2-GA, release/8.4-GA "
           f"(Range); {CHANGELOG}")

must_be_weights(
    key="topk-k-computed", op="TopK", inputs=(1,), labels=("K",), from_opset=10,
    since=None, fixed_in="8.6",
    parser_words="\"This version of TensorRT only supports input K as an initializer.\"; "
                 "8.6 EA: \"Added support for `TopK` operators with dynamic `K` values\"",
    source=f"{OTRT} builtin_op_importers.cpp 7.0 (84b5be1) to release/8.5-GA, "
           f"release/8.6-GA (TopK); {CHANGELOG}")
