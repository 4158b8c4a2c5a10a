"""The stages after the check: the device bundle, the GELU input ranges on real data, and
the report written (JSON and Markdown)."""

from __future__ import annotations

from export_gelu.check.calibration import gelu_input_ranges
from export_gelu.check.deployed import deployed_feed
from export_gelu.check.input_resolver import ranges_label
from export_gelu.device.bundle import BundleRequest, note_bundle, reference_outputs, write_bundle
from export_gelu.pipeline.localize import bundle_tensors
from export_gelu.pipeline.stage import stage_io
from export_gelu.pipeline.state import RunState
from export_gelu.report.write import write_reports
from export_gelu.tolerances import resolve_tolerances


@stage_io(reads=("dynamic", "feeds", "graph", "loaded", "model_path", "options", "output",
                "profile", "reference", "reference_module"),
          writes=())
def bundle(state: RunState) -> None:
    """output, feed, reference → the device bundle (`--bundle DIR`), noted in the report."""
    o, rep, profile = state.options, state.report, state.profile
    state.progress.step(f"writing the device bundle {o.bundle}")
    feed = deployed_feed(state.feed, state.graph)
    reference = state.reference
    if reference is None:
        from export_gelu.check.reference import reference_runner

        reference = reference_runner(state.loaded, state.reference_module, state.feed,
                                     state.graph, o.threads)
    name, outputs = reference_outputs(rep, lambda: reference, feed)
    added = max((s.added_max_error for s in rep.gelu_sites), default=0.0)
    tol = resolve_tolerances(o.precision, added_error=added, atol=o.atol, rtol=o.rtol)
    req = BundleRequest(model_path=state.model_path, graph_path=state.output,
                        target=profile.name, trt_version=profile.trt_version,
                        precision=o.precision, feed=feed, reference=outputs,
                        reference_name=name, atol=tol.atol, rtol=tol.rtol,
                        dynamic=state.dynamic.axes() if state.dynamic else (),
                        fp32_layers=[n for i in rep.parity.islands or [] for n in i["nodes"]],
                        module_tensors=bundle_tensors(state, state.output))
    out = write_bundle(req, o.bundle)
    note_bundle(rep, out, state.model_path, profile.name, profile.trt_version)


@stage_io(reads=("feeds", "inputs_label", "loaded", "real_inputs"), writes=())
def calibrate(state: RunState) -> None:
    """loaded, feeds → where each GELU site's inputs lie on the user's real data."""
    state.progress.step("recording GELU input ranges")
    state.report.calibration = gelu_input_ranges(
        state.loaded, state.feeds, ranges_label(state.inputs_label, state.real_inputs))


def written_paths(state: RunState) -> list[str]:
    """Every file (and folder) the run wrote: graphs and their data, engine, bundle, reports."""
    rep, o = state.report, state.options
    found: list[str] = []
    for graph in (rep.graphs or {}).values():
        found += [p for p in (graph.get("output"), graph.get("external_data")) if p]
    if not rep.graphs and rep.command == "export":
        found += [p for p in (rep.output, rep.external_data) if p]
    found += [p for p in (rep.trt.get("engine"), rep.trt.get("bundle")) if p]
    report_md = getattr(o, "report_md", None)
    found += [str(p) for p in (getattr(o, "report", None), report_md) if p]
    return list(dict.fromkeys(found))  # the plots are added as they are written


@stage_io(reads=("checked", "options"), writes=())
def write_report(state: RunState) -> None:
    """report → `--report` (JSON) and `--report-md` (Markdown with plots), atomically; the
    report lists what the run wrote (`written`)."""
    state.progress.done()
    o = state.options
    state.report.notes.extend(n for n in state.checked.notes if n not in state.report.notes)
    state.report.written = written_paths(state)
    write_reports(state.report, getattr(o, "report", None), getattr(o, "report_md", None))
