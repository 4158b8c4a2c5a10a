"""Rewrites that take a graph out of a TensorRT restriction without changing its math.

A fix is registered for a restriction key (`export_gelu.trt_parser.restriction_rows`) with
`@fix(key)`. It gets the node that meets the condition and the graph context, and returns
the nodes that replace it (new constants through `ctx.editor`), or None when it cannot help
(for example when a value it needs is not constant). `fit_restrictions` applies the fixes
for a profile, and refuses whatever still meets a restriction (exit 3).

Graph-wide records (`@graph_restriction`) are fixed by `@graph_fix(key)`: a function that
edits the whole model in place and returns a note saying what it did, or None when it
cannot. A fix registered with `early=True` also runs before the opset down-conversion and
the op-presence check of `fit_to_profile` (for rewrites that replace an op the parser lacks,
such as CastLike → Cast).
"""

from __future__ import annotations

from collections.abc import Callable

import onnx

from export_gelu.errors import TargetUnmetError
from export_gelu.trt_parser.restrictions import GraphContext, Hit, find_hits

Fix = Callable[[onnx.NodeProto, GraphContext], "list[onnx.NodeProto] | None"]
GraphFix = Callable[[onnx.ModelProto, GraphContext], "str | None"]

#: restriction key → its fix, and a few words for the report ('made non-negative').
FIXES: dict[str, tuple[Fix, str]] = {}
#: restriction key → the graph-wide fix of a `@graph_restriction` record.
GRAPH_FIXES: dict[str, GraphFix] = {}
#: keys whose fixes also run early in `fit_to_profile` (see the module docstring).
EARLY: set[str] = set()


def fix(key: str, does: str, early: bool = False) -> Callable[[Fix], Fix]:
    """Register the decorated function as the fix for restriction `key`."""

    def register(fn: Fix) -> Fix:
        FIXES[key] = (fn, does)
        if early:
            EARLY.add(key)
        return fn

    return register


def graph_fix(key: str) -> Callable[[GraphFix], GraphFix]:
    """Register the decorated function as the graph-wide fix for restriction `key`."""

    def register(fn: GraphFix) -> GraphFix:
        GRAPH_FIXES[key] = fn
        return fn

    return register


def _apply_graph_fixes(model: onnx.ModelProto, hits: list[Hit], target: str) -> list[str]:
    """Run the graph-wide fix of each graph-wide record hit; notes for what they did."""
    notes: list[str] = []
    seen: set[str] = set()
    for h in hits:
        key = h.restriction.key
        if key in seen or key not in GRAPH_FIXES:
            continue
        seen.add(key)
        note = GRAPH_FIXES[key](model, GraphContext(model))
        if note:
            notes.append(f"{note} ({target}: {h.restriction.parser_words})")
    return notes


def _apply(model: onnx.ModelProto, hits: list[Hit], ctx: GraphContext) -> dict[str, int]:
    """Replace each hit node that has a fix; count the fixes made per restriction key."""
    by_name = {h.node_name: h for h in hits if h.restriction.key in FIXES}
    done: dict[str, int] = {}
    nodes: list[onnx.NodeProto] = []
    for node in model.graph.node:
        hit = by_name.get(node.name or (node.output[0] if node.output else ""))
        new = None
        if hit is not None and hit.restriction.op == node.op_type:
            new = FIXES[hit.restriction.key][0](node, ctx)
        if new is None:
            nodes.append(node)
            continue
        ctx.editor.replaced(node, new)
        nodes.extend(new)
        done[hit.restriction.key] = done.get(hit.restriction.key, 0) + 1
    if done:
        ctx.editor.commit(nodes)
    return done


def fit_restrictions(model: onnx.ModelProto, trt_version: str, target: str,
                     early: bool = False) -> list[str]:
    """Rewrite `model` in place out of every restriction of `trt_version` that has a fix.

    Returns notes for the report; raises `TargetUnmetError` naming what is left. With
    `early`, only the fixes registered `early=True` run and nothing is refused.
    """
    from export_gelu.passes.compat import restriction_fix_rows  # noqa: F401 - registers

    notes: list[str] = []
    for _ in range(4):  # a fix may expose another restriction (rarely); bounded
        hits = find_hits(model, trt_version)
        if early:
            hits = [h for h in hits if h.restriction.key in EARLY]
        if not hits:
            break
        graph_notes = _apply_graph_fixes(model, hits, target)
        if graph_notes:
            notes.extend(graph_notes)
            continue  # the graph changed as a whole: detect again
        done = _apply(model, hits, GraphContext(model))
        if not done:
            break
        for key, n in done.items():
            r = next(h.restriction for h in hits if h.restriction.key == key)
            notes.append(f"{n} {r.op} node(s) with {r.condition} {FIXES[key][1]} ({target}: "
                         f"{r.parser_words})")
    if early:
        return notes
    left = find_hits(model, trt_version)
    if left:
        raise TargetUnmetError("; ".join(h.message(trt_version) for h in left)
                               + " — export-gelu has no rewrite for this")
    return notes
