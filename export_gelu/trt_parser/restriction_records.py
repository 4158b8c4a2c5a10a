"""The restriction records' types and registry: `Restriction`, `Hit`, `RESTRICTIONS`, and the
decorators the row modules register their detectors with (`restriction`,
`graph_restriction`). What the records mean and how they are used: `restrictions.py`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import onnx
import onnx_graphsurgeon as gs

from export_gelu.trt_parser.versions import in_range, range_text

#: A detector: (node, its graph) → a short description of what it saw, or None.
Detector = Callable[[gs.Node, gs.Graph], "str | None"]
#: A graph detector: graph → [(tensor or node name, what it saw)] (empty: no hit).
GraphDetector = Callable[[gs.Graph], "list[tuple[str, str]]"]
#: A cheap whole-graph test: could the graph detector find anything at all? It takes the
#: graph, or the ModelProto itself (then it scans the file's protos, loading no graph).
Presence = Callable[[gs.Graph | onnx.ModelProto], bool]


@dataclass(frozen=True)
class Restriction:
    """One restriction of one op on a range of TensorRT versions."""

    key: str  # stable id, e.g. 'gather-negative-indices'
    op: str  # the ONNX op type it concerns
    condition: str  # when it bites, in words: 'negative indices'
    since: str | None  # first TensorRT version with it (None: every version from 7.0)
    fixed_in: str | None  # first TensorRT version without it (None: not lifted yet)
    parser_words: str  # what the parser says or does, quoted or paraphrased from its source
    source: str  # where it was read: repository, tag or commit, file
    silent: bool = False  # the parser accepts the graph but the engine computes wrong values
    detect: Detector = field(default=lambda node, graph: None, compare=False, repr=False)
    #: Set for graph-wide records (`@graph_restriction`): then `op` names what they concern
    #: ('tensor') and `detect` is unused.
    detect_graph: GraphDetector | None = field(default=None, compare=False, repr=False)
    present: Presence | None = field(default=None, compare=False, repr=False)

    def applies_to(self, trt_version: str) -> bool:
        return in_range(trt_version, self.since, self.fixed_in)

    @property
    def versions_text(self) -> str:
        return range_text(self.since, self.fixed_in)

    @property
    def takers_text(self) -> str:
        """The versions that take a graph with this condition, for messages."""
        if self.fixed_in and self.since:
            return f"TensorRT before {self.since} or from {self.fixed_in}"
        if self.fixed_in:
            return f"TensorRT {self.fixed_in} and newer"
        if self.since:
            return f"TensorRT before {self.since}"
        return "no TensorRT version"


@dataclass(frozen=True)
class Hit:
    """A node of a graph that meets a restriction's condition."""

    restriction: Restriction
    node_name: str
    detail: str  # what the detector saw, e.g. 'constant indices [-1]'
    node: gs.Node | None = field(default=None, compare=False, repr=False)  # None: graph-wide

    def message(self, trt_version: str) -> str:
        r = self.restriction
        effect = ("parses but computes wrong values" if r.silent
                  else "is refused by the parser")
        return (f"{r.op} {self.node_name!r} with {r.condition} ({self.detail}) {effect} on "
                f"TensorRT {trt_version} ({r.parser_words}); taken by {r.takers_text}")


#: Every restriction record, in the order they are checked.
RESTRICTIONS: list[Restriction] = []


def restriction(**fields: Any) -> Callable[[Detector], Detector]:
    """Register a `Restriction` whose detector is the decorated function."""

    def register(fn: Detector) -> Detector:
        RESTRICTIONS.append(Restriction(detect=fn, **fields))
        return fn

    return register


def graph_restriction(present: Presence, **fields: Any
                      ) -> Callable[[GraphDetector], GraphDetector]:
    """Register a graph-wide `Restriction`: the decorated function gets the graph and returns
    (name, detail) for every tensor that meets the condition; `present(graph or model)` is
    a cheap scan run first (no shape inference) that says whether it could find any."""

    def register(fn: GraphDetector) -> GraphDetector:
        RESTRICTIONS.append(Restriction(detect_graph=fn, present=present, **fields))
        return fn

    return register
