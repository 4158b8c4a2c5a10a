"""Restriction rows of control flow: If branches whose outputs do not broadcast (before 10.1)
or differ in rank (from 10.1), and Loop scan outputs whose length no trip count fixes."""

from __future__ import annotations

import numpy as np
import onnx_graphsurgeon as gs

from export_gelu import graph as G
from export_gelu.trt_parser.restriction_records import restriction
from export_gelu.trt_parser.restriction_shared import OTRT, given


def _branch_shapes(node: gs.Node) -> list[tuple[tuple | None, tuple | None]]:
    """(then shape, else shape) per output of an If node, from the branches' declared types."""
    def shapes(name: str) -> list[tuple | None]:
        body = node.attrs.get(name, None)
        out = []
        for t in ([] if not isinstance(body, gs.Graph) else body.outputs):
            out.append(None if t.shape is None else
                       tuple(d if isinstance(d, int) else None for d in t.shape))
        return out

    return list(zip(shapes("then_branch"), shapes("else_branch")))


def _broadcastable(a: tuple, b: tuple) -> bool:
    return all(x is None or y is None or x == y or 1 in (x, y)
               for x, y in zip(reversed(a), reversed(b)))


IF_SOURCE = (f"{OTRT} docs/operators.md release/8.0 to release/10.0-GA (\"must have broadcastable "
             f"shapes\"), release/10.1-GA and 10.15 (\"must have the same rank\"); "
             f"onnxOpImporters.cpp release/10.1-GA (If: a constant condition imports one branch)")


@restriction(key="if-branch-shapes", op="If",
             condition="branch outputs of shapes that do not broadcast", since=None,
             fixed_in="10.1", parser_words="\"Output tensors of the two conditional branches "
             "must have broadcastable shapes\"", source=IF_SOURCE)
def _if_broadcast(node: gs.Node, graph: gs.Graph) -> str | None:
    if G.is_weights(node.inputs[0]):
        return None
    for i, (a, b) in enumerate(_branch_shapes(node)):
        if a is not None and b is not None and not _broadcastable(a, b):
            return f"output {i}: {list(a)} vs {list(b)}"
    return None


@restriction(key="if-branch-rank", op="If", condition="branch outputs of different ranks",
             since="10.1", fixed_in=None, parser_words="\"Output tensors of the two "
             "conditional branches must have the same rank\"", source=IF_SOURCE)
def _if_rank(node: gs.Node, graph: gs.Graph) -> str | None:
    if G.is_weights(node.inputs[0]):
        return None
    for i, (a, b) in enumerate(_branch_shapes(node)):
        if a is not None and b is not None and len(a) != len(b):
            return f"output {i}: rank {len(a)} vs {len(b)}"
    return None


@restriction(key="loop-scan-length", op="Loop",
             condition="scan outputs whose length no trip count fixes (no `M`, or a body that "
                       "can stop early)", since=None, fixed_in=None, silent=True,
             parser_words="without a trip count the scan outputs get a dummy length of 1024 and "
                          "\"must not be used in the rest of the model\"; docs 10.1-10.15: \"Scan "
                          "output length cannot be dynamic\"",
             source=f"{OTRT} builtin_op_importers.cpp release/8.0 (Loop: "
                    f"MAX_SCAN_OUTPUT_LENGTH); docs/operators.md release/10.1-GA, 10.15")
def _loop_scan(node: gs.Node, graph: gs.Graph) -> str | None:
    body = node.attrs.get("body", None)
    if not isinstance(body, gs.Graph):
        return None
    n_carried = len(node.inputs) - 2
    scans = [o for o in node.outputs[n_carried:] if G.is_used(graph, o)]
    if not scans:
        return None
    if given(node, 0) is None:
        return "no trip count `M`"
    if len(body.inputs) < 2 or not body.outputs:  # malformed body: the checker's business
        return None
    cond_in, cond_out = body.inputs[1], body.outputs[0]
    p = G.producer(cond_out)
    stays = cond_out.name == cond_in.name or (p is not None and p.op == "Identity"
                                              and p.inputs[0].name == cond_in.name)
    cond = G.value(given(node, 1)) if given(node, 1) is not None else np.array(True)
    if not stays or (cond is None or not bool(np.asarray(cond).all())):
        return "the body computes its own `cond`" if not stays else "a computed `cond`"
    return None
