"""`--compare-forms` and `--gelu auto`: the model loaded once, a graph made per GELU form (by
the export's own steps), every graph checked against the model and timed in one interleaved
run; `--gelu auto` then exports the fastest form within the tolerance, on the same loaded
model.

    --compare-forms:  load → inputs → forms → [forms bundle] → [calibration]
    --gelu auto:      the comparison, then the export flow with the form chosen
                      → [forms bundle]
"""

from __future__ import annotations

import contextlib
import dataclasses
import tempfile
from pathlib import Path

from export_gelu.check.compare_forms import choose_form
from export_gelu.check.runners.devices import resolve_device
from export_gelu.exporter.capture.shared_capture import SharedCaptures
from export_gelu.flows.export import export
from export_gelu.flows.forms_bundle import (
    forms_base_options,
    forms_bundle_notes,
    write_device_forms,
)
from export_gelu.flows.running import command_run
from export_gelu.options import ExportOptions, FormsOptions
from export_gelu.progress import Progress
from export_gelu.report.build import build_report
from export_gelu.report.report import Report
from export_gelu.report.write import write_report
from export_gelu.results.export import GraphExport
from export_gelu.results.forms import AutoResult, FormsResult
from export_gelu.results.request import Request
from export_gelu.run import Run
from export_gelu.steps.calibrate import calibrate
from export_gelu.steps.forms import auto_options, compare, form_request, forms_inputs
from export_gelu.steps.load import load_one_graph
from export_gelu.steps.request import prepare
from export_gelu.tolerances import resolve_tolerances


def compare_forms(request: Request[FormsOptions], run: Run, *, calibration: bool = True,
                  captures: SharedCaptures | None = None) -> FormsResult:
    """Every form on every target, measured; with `--bundle`, every form bundled for the
    device too; the GELU input ranges on the feed (`calibration`). One capture of the model
    serves every graph where it can (`captures`: kept by a caller that exports again)."""
    captures = captures if captures is not None else SharedCaptures()
    o = request.options
    device = resolve_device(o.device)
    with run.step("load"):
        source = load_one_graph(request, run)
    with run.step("load", name="inputs"):
        inputs = forms_inputs(source, request)
    with run.step("forms"), contextlib.ExitStack() as stack:
        folder = (Path(o.workdir) if o.workdir is not None else
                  Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="gelu-forms-"))))
        comparison = compare(request, source, inputs, device, folder, run, captures=captures)
    bundle = None
    if o.bundle:
        with run.step("bundle"):
            bundle = write_device_forms(request.model, source.loaded, forms_base_options(o),
                                        o.bundle, run, captures=captures)
            notes = forms_bundle_notes(bundle, request.model)
            run.add_notes(notes)
            comparison.notes += [str(n) for n in notes]
    ranges = None
    if calibration:
        with run.step("calibration"):
            ranges = calibrate(source.loaded, inputs.feeds, inputs.label, inputs.real)
    return FormsResult(request, source, inputs, comparison, bundle, ranges, tuple(run.notes),
                       run.seconds)


def forms_report(request: Request[FormsOptions], progress: Progress | None = None) -> Report:
    """`export-gelu MODEL --compare-forms`: the comparison as a report (table, GELU input
    ranges, notes), built once and written (all or nothing)."""
    with command_run(request, progress) as run:
        return write_report(build_report(compare_forms(request, run)), request.options,
                            run.progress)


def gelu_auto(request: Request[ExportOptions], progress: Progress | None = None) -> AutoResult:
    """`--gelu auto`: measure every form on the target, then export with the fastest one
    whose end-to-end error stays within `--atol` (default: the precision's); the model is
    loaded once for both."""
    options = request.options
    captures = SharedCaptures()  # the comparison's capture serves the export and bundle too
    compared = compare_forms(prepare(auto_options(options), request.model), Run(progress),
                             calibration=False, captures=captures)
    comparison = compared.comparison
    limit = (resolve_tolerances(options.precision or "fp32").atol if options.atol is None
             else options.atol)
    chosen, comparison.choice = choose_form(comparison, limit)
    chosen_options = dataclasses.replace(options, gelu=chosen.form, atol=limit, report=None,
                                         report_md=None, bundle=None)
    run = Run(progress)
    made = export(form_request(request.model, compared.source.loaded, chosen_options,
                               captures), run)
    assert isinstance(made, GraphExport)  # (the comparison loaded one graph)
    bundle, notes = None, []
    if options.bundle:  # every form, for the device to time: verify --device-outputs chooses
        bundle = write_device_forms(request.model, compared.source.loaded, options,
                                    options.bundle, run, captures=captures)
        notes = forms_bundle_notes(bundle, request.model)
    return AutoResult(options, compared, made, bundle, tuple(notes))


def auto_report(request: Request[ExportOptions], progress: Progress | None = None) -> Report:
    """`export-gelu MODEL --gelu auto`: the export of the form chosen, its report (with the
    forms' table) built once and written (all or nothing)."""
    with command_run(request, progress) as run:
        return write_report(build_report(gelu_auto(request, run.progress)), request.options,
                            run.progress)
