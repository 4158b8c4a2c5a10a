"""The restriction records (see `restrictions.py`), each with its detector.

Each record cites where it was read. Keep one record per (op, condition, version range).
"""

from __future__ import annotations

import onnx

from export_gelu.trt_parser.restrictions import GraphContext, restriction

# Example record (replace/extend; keep the shape):


@restriction(key="gather-negative-indices", op="Gather", condition="negative indices",
             since=None, fixed_in="8.2",
             parser_words="negative indices are not handled unless the parser is built with "
                          "SUPPORT_NEGATIVE_GATHER; 8.2 EA: \"natively support negative indices\"",
             source="onnx/onnx-tensorrt release/8.0 builtin_op_importers.cpp (Gather); "
                    "docs/Changelog.md 8.2 EA",
             silent=True)
def _gather_negative_indices(node: onnx.NodeProto, ctx: GraphContext) -> str | None:
    idx = ctx.constant(node.input[1])
    if idx is not None:
        return f"constant indices {idx.min()}" if idx.size and idx.min() < 0 else None
    return None


# Records for inputs the parser needs as constants, Trilu, Einsum and the check-only rows.
from export_gelu.trt_parser import restriction_rows_inputs  # noqa: E402,F401
