"""Rewrites that take a graph out of a TensorRT restriction without changing its math.

A fix is registered for a restriction key (`export_gelu.trt_parser.restriction_rows`) with
`@fix(key)` (`registry.py`; the fixes live in `gather.py` and
the modules it imports). It gets the node that meets the condition and its graph (the one
graph type of `export_gelu.graph`), and returns the nodes that replace it (made with
`export_gelu.graph`'s `node`/`constant`/`clone`), or None when it cannot help (for example
when a value it needs is not constant). `fit_restrictions` applies the fixes for a profile,
and refuses whatever still meets a restriction (exit 3).

Graph-wide records (`@graph_restriction`) are fixed by `@graph_fix(key)`: a function that
edits the whole graph in place and returns a note saying what it did, or None when it
cannot. A fix registered with `early=True` also runs before the opset down-conversion and
the op-presence check of `fit_to_profile` (for rewrites that replace an op the parser lacks,
such as CastLike → Cast).
"""

from __future__ import annotations

import onnx
import onnx_graphsurgeon as gs

from export_gelu import graph as G
from export_gelu.errors import TargetUnmetError
from export_gelu.passes.compat.trt_fixes import gather  # noqa: F401 - registers the fixes
from export_gelu.passes.compat.trt_fixes.registry import (  # noqa: F401 - re-exported
    EARLY,
    FIXES,
    GRAPH_FIXES,
    fix,
    graph_fix,
)
from export_gelu.trt_parser.restrictions import Hit, find_hits


def _apply_graph_fixes(graph: gs.Graph, hits: list[Hit], target: str) -> list[str]:
    """Run the graph-wide fix of each graph-wide record hit; notes for what they did."""
    notes: list[str] = []
    seen: set[str] = set()
    for h in hits:
        key = h.restriction.key
        if key in seen or key not in GRAPH_FIXES:
            continue
        seen.add(key)
        note = GRAPH_FIXES[key](graph)
        if note:
            notes.append(f"{note} ({target}: {h.restriction.parser_words})")
    return notes


def _apply(graph: gs.Graph, hits: list[Hit]) -> dict[str, int]:
    """Replace each hit node that has a fix; count the fixes made per restriction key."""
    by_node = {id(h.node): h for h in hits if h.node is not None and h.restriction.key in FIXES}
    done: dict[str, int] = {}
    nodes: list[gs.Node] = []
    released: list[gs.Tensor] = []
    for node in graph.nodes:
        hit = by_node.get(id(node))
        new = None
        if hit is not None and hit.restriction.op == node.op:
            new = FIXES[hit.restriction.key][0](node, graph)
        if new is None:
            nodes.append(node)
            continue
        still = {id(t) for n in new for t in n.inputs}
        released += [t for t in node.inputs if id(t) not in still]
        nodes.extend(new)
        assert hit is not None  # a fix ran, so there was a hit
        done[hit.restriction.key] = done.get(hit.restriction.key, 0) + 1
    if done:
        G.set_nodes(graph, nodes)
        G.drop_unread(graph, released)
    return done


def fit_restrictions(model: onnx.ModelProto | gs.Graph, trt_version: str, target: str,
                     early: bool = False) -> list[str]:
    """Rewrite the graph in place out of every restriction of `trt_version` that has a fix.

    Returns notes for the report; raises `TargetUnmetError` naming what is left. With
    `early`, only the fixes registered `early=True` run and nothing is refused.
    """
    if isinstance(model, onnx.ModelProto):
        with G.opened(model, write=True) as graph:
            return fit_restrictions(graph, trt_version, target, early)
    graph = model
    notes = []
    for _ in range(4):  # a fix may expose another restriction (rarely); bounded
        hits = find_hits(graph, trt_version)
        if early:
            hits = [h for h in hits if h.restriction.key in EARLY]
        if not hits:
            break
        graph_notes = _apply_graph_fixes(graph, hits, target)
        if graph_notes:
            G.forget_types(graph)
            notes.extend(graph_notes)
            continue  # the graph changed as a whole: detect again
        done = _apply(graph, hits)
        if not done:
            break
        for key, n in done.items():
            r = next(h.restriction for h in hits if h.restriction.key == key)
            notes.append(f"{n} {r.op} node(s) with {r.condition} {FIXES[key][1]} ({target}: "
                         f"{r.parser_words})")
    if early:
        return notes
    left = find_hits(graph, trt_version)
    if left:
        raise TargetUnmetError("; ".join(h.message(trt_version) for h in left)
                               + " — export-gelu has no rewrite for this"
                               + _exporter_hint(left))
    return notes


def _exporter_hint(left: list[Hit]) -> str:
    """For an INT64 constant out of range: torch's exporter may be its source, and the ways
    to an export without it."""
    if not any(h.restriction.key == "int64-out-of-int32" for h in left):
        return ""
    import torch

    return (f"; if the model does not hold such a value itself, torch {torch.__version__}'s "
            "exporter wrote it (an open slice end or a dynamic-shape bound): --static, or a "
            "newer torch, exports without it")
