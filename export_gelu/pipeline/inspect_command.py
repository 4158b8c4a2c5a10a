"""`export-gelu inspect` as its list of stages: the file loaded as every command loads it,
then what each target would make of it (inspection.py holds the judgements)."""

from __future__ import annotations

from export_gelu.check.inspection import engine_here, fit_after_export
from export_gelu.errors import BadInputError
from export_gelu.graph import all_node_protos
from export_gelu.graph.provenance import describe, source_of
from export_gelu.onnx_weights import load_graph
from export_gelu.parse_check import compatibility_table, model_opset, op_counts
from export_gelu.passes.onnx import find_sites
from export_gelu.pipeline import sources
from export_gelu.pipeline.stage import Stage, stage_io
from export_gelu.pipeline.state import InspectState, need


@stage_io(reads=("loaded", "model_path"), writes=("graph", "inspection"))
def require_onnx(state: InspectState) -> None:
    """loaded → the graph (weights left in their files); inspect judges ONNX files only."""
    loaded = need(state.loaded, "loaded")
    if not loaded.is_onnx:
        raise BadInputError(f"{state.model_path}: inspect takes an ONNX file (export one "
                            "first)")
    state.graph = load_graph(loaded.path)
    state.inspection = {"model": str(state.model_path)}


@stage_io(reads=("graph", "inspection", "model_path", "options"), writes=("inspection",))
def census(state: InspectState) -> None:
    """graph → opset, IR version, op counts, GELU sites (each with the module and source line
    it came from) and the asked nodes' (the graph is only read)."""
    model = need(state.graph, "graph")
    by_name = {n.name: n for n in all_node_protos(model.graph)}
    sites = []
    for site in find_sites(model):
        root = by_name.get(site.onnx_nodes[0]) if site.onnx_nodes else None
        sites.append({**site.to_json(), "where": source_of(root) if root else None})
    missing = [n for n in state.options.nodes if n not in by_name]
    if missing:
        raise BadInputError(f"{state.model_path}: no node named {missing[0]!r}")
    need(state.inspection, "inspection").update(
        opset=model_opset(model), ir_version=int(model.ir_version),
        op_counts=dict(sorted(op_counts(model).items())), gelu_sites=sites,
        nodes=[describe(by_name[n]) for n in state.options.nodes])


@stage_io(reads=("checked", "graph", "inspection"), writes=("inspection",))
def target_verdicts(state: InspectState) -> None:
    """graph, the checked profiles → why each target would not parse the file as is, and
    whether this machine can build an engine of each TensorRT version."""
    profiles = state.checked.profiles
    need(state.inspection, "inspection").update(
        compatibility=compatibility_table(need(state.graph, "graph"), list(profiles)),
        engine_here={p.name: e for p in profiles if (e := engine_here(p)) is not None})


@stage_io(reads=("checked", "graph", "inspection"), writes=("inspection",))
def dry_run(state: InspectState) -> None:
    """graph → per target: would `export-gelu FILE --target T` fit it (passes on a copy)."""
    state.progress.step("dry run of the ONNX passes per target")
    graph = need(state.graph, "graph")
    need(state.inspection, "inspection")["after_export"] = {
        p.name: fit_after_export(graph, p) for p in state.checked.profiles}


def _dry_runs(state: InspectState) -> bool:
    return bool(state.options.dry_run)


INSPECT: tuple[Stage[InspectState], ...] = (
    Stage("load", sources.load),
    Stage("graph", require_onnx, timed_as="load"),
    Stage("census", census),
    Stage("targets", target_verdicts),
    Stage("dry_run", dry_run, applies=_dry_runs),
)
