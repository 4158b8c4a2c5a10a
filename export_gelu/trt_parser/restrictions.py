"""Per-op restrictions of the TensorRT ONNX parser, beyond op presence, as records.

A `Restriction` says which op, under which condition, on which TensorRT versions
(`since` <= version < `fixed_in`), in the parser's own words and where that was read. Each
record has a detector: a function that looks at one node in its graph and says whether the
condition holds (and what it saw). The static check (`export_gelu.parse_check`) reports every hit
for a profile; `fit_to_profile` rewrites the hits it has a rewrite for and refuses the rest
(exit 3), naming the op, the condition and the versions that take it.

Records are added to `RESTRICTIONS` with `@restriction(...)` on their detector. A few
conditions concern tensors rather than one op (DOUBLE anywhere on 7.x, INT64 constants out of
INT32 range before 9.0): those are registered with `@graph_restriction(...)`, whose detector
looks at the whole graph once and names each offending tensor, and whose `present` test is a
cheap scan that decides whether the detector (and shape inference) needs to run at all.

Detectors look at the one graph type of `export_gelu.graph` (onnx-graphsurgeon's `gs.Graph`)
and ask it what they need (constants, inferred types, producers, users); the records and
their registry live in `restriction_records.py`, the rows in `restriction_rows*.py`,
`dtype_rows.py` and `output_rows.py`, and this module finds the hits. None of them imports
a pass.
"""

from __future__ import annotations

import onnx
import onnx_graphsurgeon as gs

from export_gelu import graph as G
from export_gelu.trt_parser import restriction_rows  # noqa: F401 - registers the records
from export_gelu.trt_parser.restriction_records import (  # noqa: F401 - re-exported
    RESTRICTIONS,
    Hit,
    Restriction,
    graph_restriction,
    restriction,
)


def _present(graph: gs.Graph, r: Restriction) -> bool:
    """Whether a graph-wide record's cheap presence test (when it has one) passes (cached)."""
    present = r.present
    return present is None or G.cached(graph, f"present:{r.key}", lambda: present(graph))


def _active(trt_version: str) -> tuple[dict[str, list[Restriction]], list[Restriction]]:
    """(op → node records, graph-wide records) of `trt_version`."""
    by_op: dict[str, list[Restriction]] = {}
    graph_wide: list[Restriction] = []
    for r in RESTRICTIONS:
        if not r.applies_to(trt_version):
            continue
        if r.detect_graph is None:
            by_op.setdefault(r.op, []).append(r)
        else:
            graph_wide.append(r)
    return by_op, graph_wide


def could_hit(model: onnx.ModelProto, trt_version: str) -> bool:
    """Whether any restriction of `trt_version` could apply to `model` (a scan of its main
    graph's op types; no graph is loaded)."""
    by_op, graph_wide = _active(trt_version)
    return any(r.present is None or r.present(model) for r in graph_wide) or any(
        n.op_type in by_op for n in model.graph.node if n.domain in G.DEFAULT_DOMAINS)


def find_hits(model: onnx.ModelProto | gs.Graph, trt_version: str) -> list[Hit]:
    """Every node of the main graph (and tensor, for graph-wide records) that meets a
    restriction of `trt_version`. A ModelProto is loaded only when a record could apply."""
    if isinstance(model, onnx.ModelProto):
        if not could_hit(model, trt_version):
            return []
        with G.opened(model) as graph:
            return find_hits(graph, trt_version)
    graph = model
    by_op, graph_wide = _active(trt_version)
    graph_wide = [r for r in graph_wide if _present(graph, r)]
    if not graph_wide and not any(n.op in by_op for n in graph.nodes if G.is_default(n)):
        return []
    hits: list[Hit] = []
    for r in graph_wide:
        assert r.detect_graph is not None  # what makes a record graph-wide
        hits.extend(Hit(r, name, detail) for name, detail in r.detect_graph(graph))
    for node in graph.nodes:
        if not G.is_default(node):
            continue
        for r in by_op.get(node.op, ()):
            detail = r.detect(node, graph)
            if detail:
                hits.append(Hit(r, node.name or node.outputs[0].name, detail, node))
    return hits
