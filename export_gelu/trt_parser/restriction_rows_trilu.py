"""Restriction row of Trilu: the 8.5 importer takes 2-D and 3-D inputs only."""

from __future__ import annotations

import onnx_graphsurgeon as gs

from export_gelu.trt_parser.restriction_records import restriction
from export_gelu.trt_parser.restriction_shared import CHANGELOG, OTRT, rank_of


@restriction(key="trilu-rank", op="Trilu", condition="an input of rank other than 2 or 3",
             since="8.5", fixed_in="8.6",
             parser_words="\"Trilu input must have 2 or 3 input dimensions!\"; 8.6 GA: "
                          "\"Added support for N-D `Trilu`\"",
             source=f"{OTRT} builtin_op_importers.cpp release/8.5-GA and release/8.6-GA "
                    f"(Trilu); {CHANGELOG}")
def _trilu_rank(node: gs.Node, graph: gs.Graph) -> str | None:
    rank = rank_of(graph, node.inputs[0])
    return f"rank {rank}" if rank is not None and rank not in (2, 3) else None
