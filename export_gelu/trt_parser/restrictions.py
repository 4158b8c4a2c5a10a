"""Per-op restrictions of the TensorRT ONNX parser, beyond op presence, as records.

A `Restriction` says which op, under which condition, on which TensorRT versions
(`since` <= version < `fixed_in`), in the parser's own words and where that was read. Each
record has a detector: a function that looks at one node in its graph and says whether the
condition holds (and what it saw). The static check (`export_gelu.compat`) reports every hit
for a profile; `fit_to_profile` rewrites the hits it has a rewrite for and refuses the rest
(exit 3), naming the op, the condition and the versions that take it.

Records are added to `RESTRICTIONS` with `@restriction(...)` on their detector. A few
conditions concern tensors rather than one op (DOUBLE anywhere on 7.x, INT64 constants out of
INT32 range before 9.0): those are registered with `@graph_restriction(...)`, whose detector
looks at the whole graph once and names each offending tensor, and whose `present` test is a
cheap scan that decides whether the detector (and shape inference) needs to run at all.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import onnx

from export_gelu.trt_parser.versions import in_range, range_text

#: A detector: (node, graph context) → a short description of what it saw, or None.
Detector = Callable[[onnx.NodeProto, "GraphContext"], "str | None"]
#: A graph detector: graph context → [(tensor or node name, what it saw)] (empty: no hit).
GraphDetector = Callable[["GraphContext"], "list[tuple[str, str]]"]
#: A cheap whole-model test: could the graph detector find anything at all?
Presence = Callable[[onnx.ModelProto], bool]


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
    detect: Detector = field(default=lambda node, ctx: None, compare=False, repr=False)
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

    def message(self, trt_version: str) -> str:
        r = self.restriction
        effect = ("parses but computes wrong values" if r.silent
                  else "is refused by the parser")
        return (f"{r.op} {self.node_name!r} with {r.condition} ({self.detail}) {effect} on "
                f"TensorRT {trt_version} ({r.parser_words}); taken by {r.takers_text}")


#: Every restriction record, in the order they are checked.
RESTRICTIONS: list[Restriction] = []


def restriction(**fields: object) -> Callable[[Detector], Detector]:
    """Register a `Restriction` whose detector is the decorated function."""

    def register(fn: Detector) -> Detector:
        RESTRICTIONS.append(Restriction(detect=fn, **fields))  # type: ignore[arg-type]
        return fn

    return register


def graph_restriction(present: Presence, **fields: object
                      ) -> Callable[[GraphDetector], GraphDetector]:
    """Register a graph-wide `Restriction`: the decorated function gets the graph context and
    returns (name, detail) for every tensor that meets the condition; `present(model)` is a
    cheap scan run first (no shape inference) that says whether it could find any."""

    def register(fn: GraphDetector) -> GraphDetector:
        RESTRICTIONS.append(Restriction(detect_graph=fn, present=present,
                                        **fields))  # type: ignore[arg-type]
        return fn

    return register


class GraphContext:
    """What detectors may ask about a graph: constants, types and shapes, producers, users.

    Wraps the compat passes' `GraphEditor` (constants, inferred types) with producer and
    consumer indexes over the top-level graph.
    """

    def __init__(self, model: onnx.ModelProto, types: dict | None = None) -> None:
        from export_gelu.passes.compat.graph import GraphEditor, infer_types

        self.model = model
        self.editor = GraphEditor(model.graph, types)
        self._infer = None if types is not None else infer_types  # shape inference, on demand
        self.producer = {o: n for n in model.graph.node for o in n.output if o}
        self.users: dict[str, list[onnx.NodeProto]] = {}
        for n in model.graph.node:
            for i in n.input:
                if i:
                    self.users.setdefault(i, []).append(n)
        self.graph_outputs = {o.name for o in model.graph.output}

    def constant(self, name: str):  # -> np.ndarray | None
        return self.editor.constant(name)

    def type_of(self, name: str):  # -> ValueType | None
        if self._infer is not None:  # the first question about types pays for inference
            self.editor.types.update(self._infer(self.model))
            self._infer = None
        return self.editor.type_of(name)

    def is_used(self, name: str) -> bool:
        return bool(name) and (name in self.users or name in self.graph_outputs)

    @property
    def opset(self) -> int:
        """The model's default-domain opset (what the parser's `getOpsetVersion` returns)."""
        return next((int(i.version) for i in self.model.opset_import
                     if i.domain in ("", "ai.onnx")), 0)


def find_hits(model: onnx.ModelProto, trt_version: str,
              ctx: GraphContext | None = None) -> list[Hit]:
    """Every node of `model`'s top-level graph that meets a restriction of `trt_version`."""
    from export_gelu.trt_parser import restriction_rows  # noqa: F401 - registers the records

    active = [r for r in RESTRICTIONS if r.applies_to(trt_version)]
    if not active:
        return []
    by_op: dict[str, list[Restriction]] = {}
    for r in active:
        if r.detect_graph is None:
            by_op.setdefault(r.op, []).append(r)
    graph_wide = [r for r in active if r.detect_graph is not None
                  and (r.present is None or r.present(model))]
    if not graph_wide and not any(n.op_type in by_op for n in model.graph.node
                                  if n.domain in ("", "ai.onnx")):
        return []
    ctx = ctx or GraphContext(model)
    hits: list[Hit] = []
    for r in graph_wide:
        hits.extend(Hit(r, name, detail) for name, detail in r.detect_graph(ctx))
    for node in model.graph.node:
        if node.domain not in ("", "ai.onnx"):
            continue
        for r in by_op.get(node.op_type, ()):
            detail = r.detect(node, ctx)
            if detail:
                hits.append(Hit(r, node.name or node.output[0], detail))
    return hits
