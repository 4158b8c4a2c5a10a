"""`export-gelu MODEL`: plan where the export writes, load the model, then export its graph
(flows/one_graph.py), or each graph of a Hugging Face folder whose task exports several
(flows/graphs.py)."""

from __future__ import annotations

from export_gelu.flows.graphs import export_graphs, one_graph_flags, refuse_flags_for_many
from export_gelu.flows.one_graph import export_graph
from export_gelu.flows.running import command_run
from export_gelu.options import ExportOptions
from export_gelu.progress import Progress
from export_gelu.report.build import build_report
from export_gelu.report.report import Report
from export_gelu.report.write import write_report
from export_gelu.results.export import ExportResult
from export_gelu.results.request import GraphsSource, Request
from export_gelu.run import Run
from export_gelu.steps.load import load, several_graphs
from export_gelu.steps.plan import check_disk, plan_export


def export(request: Request[ExportOptions], run: Run) -> ExportResult:
    """The export `request` asks for."""
    plan = plan_export(request, run)
    many = several_graphs(request) if one_graph_flags(request.options) else None
    if many is not None:  # read from config.json: refused before the graphs are built
        refuse_flags_for_many(request, *many)
    with run.step("load"):
        source = load(request, run)
    with run.step("load", name="disk"):
        check_disk(source.loaded, plan.output)
    if isinstance(source, GraphsSource):
        return export_graphs(request, plan, source, run)
    return export_graph(request, plan, source, run, generation=True)


def export_report(request: Request[ExportOptions], progress: Progress | None = None) -> Report:
    """`export-gelu MODEL`: the export and its report, built once from the result and written
    (all or nothing: a run that fails leaves none of its files)."""
    with command_run(request, progress) as run:
        return write_report(build_report(export(request, run)), request.options, run.progress)
