"""The stages after the check: the device bundle, the GELU input ranges on real data, and
the report written (JSON and Markdown)."""

from __future__ import annotations

from export_gelu.check.calibration import gelu_input_ranges
from export_gelu.check.deployed import deployed_feed
from export_gelu.check.input_resolver import ranges_label
from export_gelu.device.bundle import (
    FLOAT64_ON_TRT,
    BundleRequest,
    device_precision,
    note_bundle,
    reference_outputs,
    write_bundle,
)
from export_gelu.notes import Note
from export_gelu.options import ExportOptions, FormsOptions, VerifyOptions
from export_gelu.pipeline.checking import export_tolerances
from export_gelu.pipeline.localize import bundle_tensors
from export_gelu.pipeline.stage import stage_io
from export_gelu.pipeline.state import ExportState, RunState, need
from export_gelu.report.write import write_reports

#: The state of a command that writes a report (--report, --report-md).
ReportingState = RunState[ExportOptions | VerifyOptions | FormsOptions]


@stage_io(reads=("dynamic", "feeds", "gelu_sites", "graph", "loaded", "model_path", "options",
                "output", "parity", "profile", "reference", "reference_module", "run_precision"),
          writes=())
def bundle(state: ExportState) -> None:
    """output, feed, reference → the device bundle (`--bundle DIR`), noted in the report; it
    records the precision TensorRT computes the graph in and that precision's tolerances,
    which `verify --device-outputs` judges the device's outputs with (a float64 graph: fp32,
    as the parser reads DOUBLE as FLOAT; the check here ran in float64)."""
    o, rep, profile = state.options, state.report, need(state.profile, "profile")
    output, bundle_dir = need(state.output, "output"), need(o.bundle, "--bundle")
    state.progress.step(f"writing the device bundle {bundle_dir}")
    feed = deployed_feed(state.feed, state.graph)
    reference = state.reference
    if reference is None:
        from export_gelu.check.reference import reference_runner

        reference = reference_runner(state.loaded, state.reference_module, state.feed,
                                     state.graph, o.threads)
    name, outputs = reference_outputs(state.parity, lambda: reference, feed)
    precision = device_precision(state.run_precision)
    tol = export_tolerances(state, precision)
    if precision != state.run_precision:
        rep.notes.append(Note(FLOAT64_ON_TRT, "float64-on-tensorrt"))
    islands = (state.parity.islands if state.parity is not None else None) or []
    req = BundleRequest(model_path=state.model_path, graph_path=output,
                        target=profile.name, trt_version=profile.trt_version,
                        precision=precision, feed=feed, reference=outputs,
                        reference_name=name, atol=tol.atol, rtol=tol.rtol,
                        dynamic=state.dynamic.axes() if state.dynamic else (),
                        fp32_layers=[n for i in islands for n in i["nodes"]],
                        module_tensors=bundle_tensors(state, output))
    out = write_bundle(req, bundle_dir)
    note_bundle(rep, out, state.model_path, profile.name, profile.trt_version)


@stage_io(reads=("feeds", "inputs_label", "loaded", "real_inputs"), writes=())
def calibrate(state: ExportState) -> None:
    """loaded, feeds → where each GELU site's inputs lie on the user's real data."""
    state.progress.step("recording GELU input ranges")
    state.report.calibration = gelu_input_ranges(
        state.loaded, state.feeds, ranges_label(state.inputs_label, state.real_inputs))


def written_paths(state: ReportingState) -> list[str]:
    """Every file (and folder) the run wrote: graphs and their data, engine, bundle, reports."""
    rep, o = state.report, state.options
    found: list[str] = []
    for graph in (rep.graphs or {}).values():
        found += [p for p in (graph.get("output"), graph.get("external_data")) if p]
    if not rep.graphs and rep.command == "export":
        found += [p for p in (rep.output, rep.external_data) if p]
    found += [p for p in (rep.trt.get("engine"), rep.trt.get("bundle")) if p]
    found += [str(p) for p in (o.report, o.report_md) if p]
    return list(dict.fromkeys(found))  # the plots are added as they are written


@stage_io(reads=("checked", "options"), writes=())
def write_report(state: ReportingState) -> None:
    """report → `--report` (JSON) and `--report-md` (Markdown with plots), atomically; the
    report lists what the run wrote (`written`)."""
    state.progress.done()
    o = state.options
    state.report.notes.extend(n for n in state.checked.notes if n not in state.report.notes)
    state.report.written = written_paths(state)
    write_reports(state.report, o.report, o.report_md)
