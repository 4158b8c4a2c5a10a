"""Exports of more than one graph (an encoder–decoder's encoder_model, decoder_model and
decoder_with_past_model in one folder): each graph is one export through the same steps as
any other (flows/one_graph.py), on a run of its own that shares the clock; the folder's
report lists them under `graphs` and sums them up, and greedy decoding checks them together.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from export_gelu.check.verdict.parity import ParityResult, skipped
from export_gelu.errors import BadInputError
from export_gelu.flows.one_graph import export_graph
from export_gelu.options import ExportOptions
from export_gelu.results.export import ExportPlan, GraphExport, GraphsExport
from export_gelu.results.request import GraphsSource, Request, one_graph_source
from export_gelu.run import Run
from export_gelu.steps.generation import decode_and_compare
from export_gelu.steps.plan import check_disk, plan_export


def one_graph_flags(o: ExportOptions) -> list[str]:
    """The flags given that name one graph's inputs or files."""
    return [flag for flag, value in (("--input", o.inputs), ("--inputs", o.inputs_npz),
                                     ("--dynamic", o.dynamic), ("--engine", o.engine),
                                     ("--bundle", o.bundle), ("--output-names", o.output_names))
            if value]


def refuse_flags_for_many(request: Request[ExportOptions], task: str, graphs: int) -> None:
    """Flags that name one graph's inputs or files do not fit several graphs (the `task`
    exports `graphs` of them)."""
    given = one_graph_flags(request.options)
    if given:
        raise BadInputError(f"{request.model}: task {task} exports "
                            f"{graphs} graphs, each with its own inputs and "
                            f"files; drop {', '.join(given)}")


def sum_parity(verdicts: dict[str, ParityResult]) -> ParityResult:
    """One verdict for the graphs (file name → its verdict): failed if any failed, passed if
    all passed."""
    results = list(verdicts.values())
    failed = [(n, p) for n, p in verdicts.items() if p.status == "failed"]
    if failed:
        name, parity = failed[0]
        return dataclasses.replace(parity, reason=f"{name}: {parity.reason}")
    if any(p.status != "passed" for p in results):
        reasons = {p.reason for p in results if p.status == "skipped"}
        return skipped("; ".join(sorted(reasons)) or "not every graph was checked")
    first = results[0]
    outputs = {f"{n}/{o}": e for n, p in verdicts.items() for o, e in p.outputs.items()}
    said = "; ".join(f"{n}: {p.reason}" for n, p in verdicts.items() if p.reason)
    return ParityResult("passed", f"all {len(results)} graphs passed" + (f"; {said}" if said
                                                                         else ""),
                        first.atol, first.rtol, list(first.runners), outputs, first.iterations)


def _part_request(request: Request[ExportOptions], folder: Path, graph_file: str,
                  source: GraphsSource) -> Request[ExportOptions]:
    graph = next(g for g in source.graphs if g.file_name == graph_file)
    options = dataclasses.replace(request.options, output=str(folder / graph_file), report=None,
                                  report_md=None, bundle=None, engine=None)
    checked = dataclasses.replace(request.checked, outputs=None)  # checked for the folder
    return Request(options, checked, request.model, in_memory=graph)


def export_part(request: Request[ExportOptions], run: Run) -> GraphExport:
    """One graph of the folder (handed over in `request.in_memory`), planned and exported."""
    graph = request.in_memory
    assert graph is not None  # (_part_request hands it over)
    plan = plan_export(request, run)
    with run.step("load", name="disk"):
        check_disk(graph, plan.output)
    return export_graph(request, plan, one_graph_source(graph), run)


def export_graphs(request: Request[ExportOptions], plan: ExportPlan, source: GraphsSource,
                  run: Run) -> GraphsExport:
    """Each graph of `source` exported and checked into the folder `plan.output`."""
    refuse_flags_for_many(request, source.loaded.task, len(source.graphs))
    plan.output.mkdir(parents=True, exist_ok=True)
    parts: dict[str, GraphExport] = {}
    for graph in source.graphs:
        run.say(f"graph {graph.file_name}")
        part = _part_request(request, plan.output, graph.file_name, source)
        part_run = run.part()
        parts[graph.file_name] = export_part(part, part_run)
        run.add_seconds(part_run.seconds)
    run.add_notes(dict.fromkeys(n for p in parts.values() for n in p.notes))  # each once
    parity = None
    if request.options.verify:  # each graph was checked (by its own export)
        parity = sum_parity({n: p.verdict.parity if p.verdict else skipped("not checked")
                             for n, p in parts.items()})
    decoded = None
    first = next(iter(parts.values()))
    if request.options.verify and source.loaded.generation is not None:
        with run.step("verify", name="generation"):
            by_role = {name.removesuffix("_model.onnx"): p.saved.path
                       for name, p in parts.items()}
            decoded = decode_and_compare(source.loaded, by_role, source.graphs[0],
                                         gelu=request.options.gelu,
                                         run_precision=first.inputs.run_precision,
                                         threads=request.options.threads, run=run)
    return GraphsExport(request, plan, source, parts, parity, decoded, tuple(run.notes),
                        run.seconds)
