"""The steps of `export-gelu inspect`: an ONNX file's structure and GELU sites, what each
target would make of it as it is, and (a dry run) after `export-gelu --target T`; the
judgements themselves are in check/inspection.py and parse_check.py."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import onnx

from export_gelu.check.inspection import EngineHere, Fit, engine_here, fit_after_export
from export_gelu.errors import BadInputError
from export_gelu.graph import all_node_protos
from export_gelu.graph.provenance import describe, source_of
from export_gelu.onnx_weights import load_graph
from export_gelu.parse_check import compatibility_table, model_opset, op_counts
from export_gelu.passes.onnx import find_sites
from export_gelu.results.request import Source
from export_gelu.targets import TargetProfile


def require_onnx(source: Source, model: Path) -> onnx.ModelProto:
    """The ONNX file's graph (weights left in their files); inspect judges ONNX files only."""
    if source.kind != "onnx":
        raise BadInputError(f"{model}: inspect takes an ONNX file (export one first)")
    return load_graph(source.loaded.path)


@dataclass(frozen=True)
class Census:
    """What the graph is: opset, IR version, op counts, GELU sites (each with the module and
    source line it came from), and the asked nodes' origins."""

    opset: int
    ir_version: int
    op_counts: dict[str, int]
    gelu_sites: list[dict[str, object]]
    nodes: list[dict[str, str | None]]


def census(graph: onnx.ModelProto, model: Path, nodes: tuple[str, ...]) -> Census:
    """The graph's census (it is only read); a node name it does not hold is exit 2."""
    by_name = {n.name: n for n in all_node_protos(graph.graph)}
    sites = []
    for site in find_sites(graph):
        root = by_name.get(site.onnx_nodes[0]) if site.onnx_nodes else None
        sites.append({**site.to_json(), "where": source_of(root) if root else None})
    missing = [n for n in nodes if n not in by_name]
    if missing:
        raise BadInputError(f"{model}: no node named {missing[0]!r}")
    return Census(model_opset(graph), int(graph.ir_version), dict(sorted(op_counts(graph).items())),
                  sites, [describe(by_name[n]) for n in nodes])


@dataclass(frozen=True)
class TargetVerdicts:
    """Why each target would not parse the file as is ([] : it would), and whether this
    machine can build an engine of each TensorRT version."""

    compatibility: dict[str, list[str]]
    engine_here: dict[str, EngineHere] = field(default_factory=dict)


def target_verdicts(graph: onnx.ModelProto, profiles: tuple[TargetProfile, ...]
                    ) -> TargetVerdicts:
    return TargetVerdicts(
        compatibility_table(graph, list(profiles)),
        {p.name: e for p in profiles if (e := engine_here(p)) is not None})


def dry_run(graph: onnx.ModelProto, profiles: tuple[TargetProfile, ...]
            ) -> dict[str, Fit]:
    """Per target: would `export-gelu FILE --target T` fit it (the passes on a copy)."""
    return {p.name: fit_after_export(graph, p) for p in profiles}
