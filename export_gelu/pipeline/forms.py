"""`--compare-forms` and `--gelu auto`: the model loaded once, its graph made once per GELU
form by the same stages export runs (`MAKE_GRAPH`: same passes, same exporters; `--target
onnx` gives the fused `Gelu` op, a primitives target such as trt8.6 the expanded formula),
then every graph checked and timed together by the one checker."""

from __future__ import annotations

import contextlib
import dataclasses
import tempfile
from pathlib import Path

import onnx

from export_gelu.check.calibration import gelu_input_ranges
from export_gelu.check.checker import CheckJob, run_check
from export_gelu.check.compare_forms import (
    FormRow,
    FormsComparison,
    choose_form,
    fingerprint,
    graph_ops,
)
from export_gelu.check.deployed import feed_for, open_deployed
from export_gelu.check.devices import ready_runners, resolve_device
from export_gelu.check.input_resolver import InputRequest, ranges_label, resolve_inputs
from export_gelu.check.reference import model_runner
from export_gelu.errors import BadInputError, ExportGeluError
from export_gelu.exporter.capture.program_copy import copy_program
from export_gelu.options import COMPARED_FORMS, ExportOptions, FormsOptions, validate
from export_gelu.pipeline.export_command import EXPORT, MAKE_GRAPH
from export_gelu.pipeline.sources import export_inputs
from export_gelu.pipeline.stage import Stage, run_stages, stage_io
from export_gelu.pipeline.state import AnyState, ExportState, FormsState, need, sub_state
from export_gelu.targets import TargetProfile
from export_gelu.tolerances import Tolerances, resolve_tolerances

#: Compare-forms notes that hold for every comparison.
ORT_FUSES_NOTE = ("ONNX Runtime's own optimizer may fuse an expanded GELU at load time "
                  "(docs/onnxruntime.md); latencies are of the optimized sessions")
NO_PLUGIN_NOTE = "plugin form not compared: ONNX Runtime cannot run CustomGeluPluginDynamic"


def bundle_forms(profile: TargetProfile) -> tuple[str, ...]:
    """The forms a device bundle holds for a TensorRT target: those `--compare-forms`
    measures, and the plugin where that version's parser can create it."""
    return (*COMPARED_FORMS, *(("plugin",) if profile.plugin_usable else ()))


def form_options(o: FormsOptions, target: str, form: str, out: Path) -> ExportOptions:
    """The export options of one form's graph (no check, no report: the comparison's)."""
    return ExportOptions(target=target, output=str(out), gelu=form, inputs=o.inputs,
                         inputs_npz=o.inputs_npz, precision=o.precision, verify=False,
                         allow_pickle=o.allow_pickle, model_factory=o.model_factory,
                         threads=o.threads, imports=o.imports)


def form_state(state: AnyState, options: ExportOptions) -> ExportState:
    """A state for one form's graph over the already loaded model: its own copy of an
    ExportedProgram (the fx passes rewrite it in place), the same feed."""
    loaded = need(state.loaded, "loaded")
    if loaded.exported is not None:
        loaded = dataclasses.replace(loaded, exported=copy_program(loaded.exported),
                                     notes=list(loaded.notes))
    sub = sub_state(state, options, validate(options), loaded=loaded,
                    output=Path(options.output) if options.output else None)
    sub.profile = sub.checked.profile
    return sub


@stage_io(reads=("options",), writes=("device",))
def plan_forms(state: FormsState) -> None:
    """options → the folder for the graphs, the device; the report says what is compared."""
    o = state.options
    state.device = resolve_device(o.device)
    rep = state.report
    rep.target, rep.command = ", ".join(o.targets), "compare-forms"
    if o.precision is not None:  # (None is refused by each form's export, exit 2)
        rep.precision = o.precision


@stage_io(reads=("loaded", "model_path", "options"),
          writes=("feeds", "inputs_label", "real_inputs"))
def forms_inputs(state: FormsState) -> None:
    """loaded → the feed every form is checked and timed on."""
    import torch

    if state.is_onnx:
        raise BadInputError(f"{state.model_path}: comparing GELU forms needs the PyTorch model "
                            "(forms are applied while exporting it)")
    o = state.options
    given = resolve_inputs(state.loaded, InputRequest(
        specs=tuple(o.inputs), inputs_file=Path(o.inputs_npz) if o.inputs_npz else None))
    state.feeds, state.inputs_label, state.real_inputs = given.feeds, given.source, given.real
    state.report.inputs, state.report.generated_inputs = given.source, given.generated
    torch.set_num_threads(o.threads)


def _make_graph(state: FormsState, target: str, form: str, folder: Path
                ) -> FormRow | ExportState:
    """One form's graph, made by the export stages; the row, or the error it ended in."""
    out = folder / f"{state.model_path.stem}.{form}.{target}.onnx"
    sub = form_state(state, form_options(state.options, target, form, out))
    try:
        run_stages((Stage("inputs", export_inputs), *MAKE_GRAPH), sub)
    except ExportGeluError as exc:
        return FormRow(form, target, error=str(exc))
    return sub


def compare(state: FormsState, folder: Path) -> FormsComparison:
    """Every form on every target: the graphs (identical ones measured once), checked and
    timed together."""
    o = state.options
    where = ("onnxruntime (CPU EP)" if need(state.device, "device").device == "cpu"
             else "onnxruntime (CUDA EP)")
    result = FormsComparison(str(state.model_path), where, o.threads, o.iterations)
    seen: dict[str, FormRow] = {}
    jobs = [(t, f) for t in o.targets for f in o.forms]
    for i, (target, form) in enumerate(jobs):
        state.progress.step(f"exporting form {i + 1}/{len(jobs)}: {form} for {target}")
        sub = _make_graph(state, target, form, folder)
        if isinstance(sub, FormRow):
            result.rows.append(sub)
            continue
        graph = onnx.load(str(sub.output), load_external_data=False)
        key = f"{target}:{fingerprint(graph)}"
        if key in seen:
            seen[key].same_as.append(form)
            continue
        ops, layout = graph_ops(graph)
        seen[key] = FormRow(form, target, graph=ops, layout=layout, opset=sub.report.opset,
                            exporter=sub.report.exporter, path=str(sub.output))
        result.rows.append(seen[key])
    measure(state, result)
    return result


def measure(state: FormsState, result: FormsComparison) -> None:
    """Each graph's end-to-end error against the model and the latency of all of them with
    the model's, one interleaved run: the one checker at zero tolerance."""
    o, device = state.options, need(state.device, "device").device
    rows = [r for r in result.rows if r.path]
    if not rows:
        raise BadInputError("no GELU form could be exported: "
                            + "; ".join(f"{r.form}@{r.target}: {r.error}" for r in result.rows))
    paths = [need(r.path, "a form's graph") for r in rows]
    deployed = [open_deployed(p) for p in paths]
    feed = feed_for(deployed[0], state.feed)
    runners = []
    for row, path in zip(rows, paths):  # (a form was exported: its precision was checked)
        run = next(r for r in ready_runners(path, device, need(o.precision, "precision"),
                                            o.threads) if r.status == "ready")
        run.runner.name = row.key
        runners.append(run.runner)
    reference = model_runner(state.loaded, feed, deployed[0].outputs, o.threads, device)
    state.progress.step("checking every form against PyTorch and timing them (interleaved)")
    outcome = run_check(CheckJob(reference, runners, [feed], Tolerances(0.0, 0.0),
                                 o.iterations, o.warmup,
                                 {r.key: feed_for(d, state.feed) for r, d in zip(rows, deployed)}),
                        state.progress)
    result.reference = outcome.latency.pop(reference.name)
    for row in rows:
        parity = outcome.by_runner[row.key]
        if parity.outputs:
            row.outputs = dict(parity.outputs)
            row.max_abs = max(e.max_abs for e in row.outputs.values())
            row.mean_abs = sum(e.mean_abs for e in row.outputs.values()) / len(row.outputs)
        else:
            row.error = parity.reason
        row.latency = outcome.latency[row.key]
        row.path = row.path if o.workdir is not None else None
    _ratios_and_notes(result, rows)


def _ratios_and_notes(result: FormsComparison, rows: list[FormRow]) -> None:
    fastest = need(result.fastest(), "the fastest form")  # rows were measured
    assert fastest.latency is not None  # fastest() picks among the measured rows
    for r in result.measured:
        assert r.latency is not None  # measured rows carry their latency
        r.ratio = r.latency.median_ms / fastest.latency.median_ms
    exporters = {r.target: f"{r.target}: opset {r.opset}, {r.exporter} exporter" for r in rows}
    if len(exporters) > 1:
        result.notes.append("targets differ beyond GELU (" + "; ".join(exporters.values())
                            + "): other ops can differ between their graphs too")
    result.notes += [ORT_FUSES_NOTE, NO_PLUGIN_NOTE]


@stage_io(reads=("device", "feeds", "loaded", "model_path", "options"), writes=("forms",))
def compare_forms_stage(state: FormsState) -> None:
    """The comparison, its graphs in `--workdir` or a temporary folder."""
    with contextlib.ExitStack() as stack:
        folder = (Path(state.options.workdir) if state.options.workdir is not None else
                  Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="gelu-forms-"))))
        state.forms = state.report.forms = compare(state, folder)


@stage_io(reads=("feeds", "inputs_label", "loaded", "real_inputs"), writes=())
def calibrate_forms(state: FormsState) -> None:
    """The GELU input ranges on the feed the forms were compared on."""
    label = ranges_label(state.inputs_label, state.real_inputs)
    state.report.calibration = gelu_input_ranges(state.loaded, state.feeds, label)


def auto_options(options: ExportOptions) -> FormsOptions:
    """`--gelu auto`: the comparison it measures first, on the export's own target."""
    return FormsOptions(targets=(options.target,), inputs=options.inputs,
                        inputs_npz=options.inputs_npz, precision=options.precision,
                        allow_pickle=options.allow_pickle, model_factory=options.model_factory,
                        imports=options.imports, threads=options.threads,
                        iterations=options.iterations, warmup=options.warmup,
                        device=options.device, task=options.task)


def best_form_export(compared: FormsState, options: ExportOptions) -> ExportState:
    """`--gelu auto`: the export with the fastest form whose measured error stays within
    `options.atol` (default: the precision's), on the model `compared` already loaded; the
    report says what was picked and why."""
    comparison = need(compared.forms, "the forms compared")
    limit = (resolve_tolerances(need(options.precision, "precision")).atol
             if options.atol is None else options.atol)
    chosen, comparison.choice = choose_form(comparison, limit)
    chosen_options = dataclasses.replace(options, gelu=chosen.form, atol=limit, report=None,
                                         report_md=None)
    state = form_state(compared, chosen_options)
    run_stages(EXPORT, state)
    rep = state.report
    rep.gelu_form, rep.forms = f"auto → {chosen.form}", comparison
    rep.options = {**options.to_json(), "gelu": "auto"}  # what was asked, not what was chosen
    return state
