"""`--compare-forms` and `--gelu auto`: the model loaded once, its graph made once per GELU
form by the same steps export runs (`make_graph`: same passes, same exporters; `--target
onnx` gives the fused `Gelu` op, a primitives target such as trt8.6 the expanded formula),
then every graph checked and timed together by the one checker."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import onnx

from export_gelu.check.checker import CheckJob, run_check
from export_gelu.check.compare_forms import FormRow, FormsComparison, fingerprint, graph_ops
from export_gelu.check.inputs.input_resolver import InputRequest, resolve_inputs
from export_gelu.check.reference.runner import model_runner
from export_gelu.check.runners.deployed import feed_for, open_deployed
from export_gelu.check.runners.devices import DeviceChoice, ready_runners
from export_gelu.errors import BadInputError, ExportGeluError
from export_gelu.exporter.capture.program_copy import copy_program
from export_gelu.exporter.capture.shared_capture import SharedCaptures
from export_gelu.exporter.loading.loaded import LoadedModel
from export_gelu.json_value import JsonObject
from export_gelu.options import COMPARED_FORMS, ExportOptions, FormsOptions, quantizing, validate
from export_gelu.results.forms import FormsInputs
from export_gelu.results.request import OneGraphSource, Request, one_graph_source
from export_gelu.run import Run
from export_gelu.steps.graph import make_graph
from export_gelu.steps.inputs import export_inputs
from export_gelu.steps.quantize import fp32_request, quant_summary, quantize_graph
from export_gelu.targets import TargetProfile
from export_gelu.tolerances import Tolerances

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
                         threads=o.threads, imports=o.imports,
                         calibration_data=o.calibration_data, calibrator=o.calibrator,
                         keep_precision=o.keep_precision, target_sqnr=o.target_sqnr)


def auto_options(options: ExportOptions) -> FormsOptions:
    """`--gelu auto`: the comparison it measures first, on the export's own target."""
    return FormsOptions(targets=(options.target,), inputs=options.inputs,
                        inputs_npz=options.inputs_npz, precision=options.precision,
                        allow_pickle=options.allow_pickle, model_factory=options.model_factory,
                        imports=options.imports, threads=options.threads,
                        iterations=options.iterations, warmup=options.warmup,
                        device=options.device, task=options.task,
                        calibration_data=options.calibration_data,
                        calibrator=options.calibrator, keep_precision=options.keep_precision,
                        target_sqnr=options.target_sqnr)


def form_request(model: Path, loaded: LoadedModel, options: ExportOptions,
                 captures: SharedCaptures | None = None) -> Request[ExportOptions]:
    """One form's export over the already loaded model: its options checked, its own copy of
    an ExportedProgram (the fx passes rewrite it in place), and the captures the forms of one
    comparison share (`captures`, shared_capture.py)."""
    if loaded.exported is not None:
        loaded = dataclasses.replace(loaded, exported=copy_program(loaded.exported),
                                     notes=list(loaded.notes))
    if captures is not None:
        loaded = dataclasses.replace(loaded, captures=captures)
    return Request(options, validate(options), model, in_memory=loaded)


def forms_inputs(source: OneGraphSource, request: Request[FormsOptions]) -> FormsInputs:
    """The feed every form is checked and timed on (a PyTorch model's: forms are applied
    while exporting it)."""
    import torch

    if source.kind == "onnx":
        raise BadInputError(f"{request.model}: comparing GELU forms needs the PyTorch model "
                            "(forms are applied while exporting it)")
    o = request.options
    given = resolve_inputs(source.loaded, InputRequest(
        specs=tuple(o.inputs), inputs_file=Path(o.inputs_npz) if o.inputs_npz else None))
    torch.set_num_threads(o.threads)
    return FormsInputs(tuple(given.feeds), given.source, given.real, dict(given.generated))


def _make_form_graph(request: Request[ExportOptions], out: Path, run: Run) -> FormRow | None:
    """One form's graph, made by the export's steps (all or nothing); None when it was
    written, else the row saying the error it ended in."""
    loaded = request.in_memory
    assert loaded is not None  # (form_request hands the loaded model over)
    source = one_graph_source(loaded)
    quantized = None
    try:
        with run.transaction():
            graph_request = fp32_request(request)
            inputs = export_inputs(source, graph_request, run)
            saved = make_graph(graph_request, out, inputs, run)
            if quantizing(request.options):  # judged by the INT8/FP8 verdict, as export does
                saved, quantization = quantize_graph(request, saved, inputs, run)
                quantized = quant_summary(quantization)
    except ExportGeluError as exc:
        return FormRow(request.options.gelu, request.options.target, error=str(exc))
    return FormRow(request.options.gelu, request.options.target, opset=saved.opset,
                   exporter=saved.exporter, path=str(saved.path), quantized=quantized)


def compare(request: Request[FormsOptions], source: OneGraphSource, inputs: FormsInputs,
            device: DeviceChoice, folder: Path, run: Run, *, captures: SharedCaptures
            ) -> FormsComparison:
    """Every form on every target: the graphs (identical ones measured once, in `folder`;
    the model captured once where `captures` can share it), checked and timed together."""
    o = request.options
    where = "onnxruntime (CPU EP)" if device.device == "cpu" else "onnxruntime (CUDA EP)"
    result = FormsComparison(str(request.model), where, o.threads, o.iterations)
    _make_graphs(request, source, folder, result, run, captures=captures)
    _measure(request, source, inputs, device, result, run)
    quantized = [r for r in result.rows if r.quantized is not None]
    if quantized:  # the error column is against fp32 PyTorch; the verdict is at the scales
        result.notes.append(f"{o.precision} forms, each judged against PyTorch at its graph's "
                            "scales (SQNR against fp32): " + "; ".join(
                                f"{r.label} @ {r.target}: {_verdict_words(r.quantized)}"
                                for r in quantized if r.quantized is not None))
    return result


def _make_graphs(request: Request[FormsOptions], source: OneGraphSource, folder: Path,
                 result: FormsComparison, run: Run, *, captures: SharedCaptures) -> None:
    """Each form's graph on each target, written in `folder`, a row each (the identical
    graphs of a target: one row)."""
    o = request.options
    seen: dict[str, FormRow] = {}
    jobs = [(t, f) for t in o.targets for f in o.forms]
    for i, (target, form) in enumerate(jobs):
        run.say(f"exporting form {i + 1}/{len(jobs)}: {form} for {target}")
        out = folder / f"{request.model.stem}.{form}.{target}.onnx"
        asked = form_request(request.model, source.loaded, form_options(o, target, form, out),
                             captures)
        made = _make_form_graph(asked, out, run.part())
        if made is None or made.path is None:
            result.rows.append(made or FormRow(form, target, error="not written"))
            continue
        graph = onnx.load(made.path, load_external_data=False)
        key = f"{target}:{fingerprint(graph)}"
        if key in seen:
            seen[key].same_as.append(form)
            continue
        ops, layout = graph_ops(graph)
        seen[key] = FormRow(form, target, graph=ops, layout=layout, opset=made.opset,
                            exporter=made.exporter, path=made.path, quantized=made.quantized)
        result.rows.append(seen[key])


def _verdict_words(q: JsonObject) -> str:
    passed = q.get("passed")
    state = "not judged" if passed is None else "passed" if passed else "FAILED"
    sqnr = q.get("sqnr_db")
    return (f"{state}, {'inf' if sqnr is None else f'{sqnr:.1f}'} dB, "
            f"{q.get('quantized')} of {q.get('weight_products')} products, Q/DQ inside a GELU "
            f"{q.get('qdq_inside_gelu')}")


def _measure(request: Request[FormsOptions], source: OneGraphSource, inputs: FormsInputs,
            device: DeviceChoice, result: FormsComparison, run: Run) -> None:
    """Each graph's end-to-end error against the model and the latency of all of them with
    the model's, one interleaved run: the one checker at zero tolerance."""
    o = request.options
    rows = [r for r in result.rows if r.path]
    if not rows:
        raise BadInputError("no GELU form could be exported: "
                            + "; ".join(f"{r.form}@{r.target}: {r.error}" for r in result.rows))
    paths = [r.path for r in rows if r.path]
    deployed = [open_deployed(p) for p in paths]
    feed = feed_for(deployed[0], inputs.feed)
    runners = []
    for row, path in zip(rows, paths):  # (a form was exported: its precision was checked)
        precision = "fp32" if quantizing(o) else o.precision or "fp32"  # Q/DQ: float I/O
        ready = next(r.runner for r in ready_runners(path, device.device, precision, o.threads)
                     if r.status == "ready" and r.runner is not None)
        ready.name = row.key
        runners.append(ready)
    reference = model_runner(source.loaded, feed, deployed[0].outputs, o.threads,
                             device.device)
    run.say("checking every form against PyTorch and timing them (interleaved)")
    outcome = run_check(CheckJob(reference, runners, [feed], Tolerances(0.0, 0.0),
                                 o.iterations, o.warmup,
                                 {r.key: feed_for(d, inputs.feed) for r, d in zip(rows, deployed)}),
                        run.progress)
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
    fastest = result.fastest()
    assert fastest is not None and fastest.latency is not None  # rows were measured
    for r in result.measured:
        assert r.latency is not None  # measured rows carry their latency
        r.ratio = r.latency.median_ms / fastest.latency.median_ms
    exporters = {r.target: f"{r.target}: opset {r.opset}, {r.exporter} exporter" for r in rows}
    if len(exporters) > 1:
        result.notes.append("targets differ beyond GELU (" + "; ".join(exporters.values())
                            + "): other ops can differ between their graphs too")
    result.notes += [ORT_FUSES_NOTE, NO_PLUGIN_NOTE]
