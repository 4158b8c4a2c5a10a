"""The registry of restriction fixes: `@fix(key)` and `@graph_fix(key)` (the contract is in
`apply.py`, which applies them)."""

from __future__ import annotations

from collections.abc import Callable

import onnx_graphsurgeon as gs

Fix = Callable[[gs.Node, gs.Graph], "list[gs.Node] | None"]
GraphFix = Callable[[gs.Graph], "str | None"]

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
