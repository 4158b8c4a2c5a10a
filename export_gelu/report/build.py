"""The report, built once from a command's result (`build_report`): every key from the typed
records the steps returned, nothing written into it while the run goes."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from export_gelu.check.runners.devices import ProviderRun
from export_gelu.check.runners.trt_runner import DEVICE_ROUTE
from export_gelu.check.verdict.parity import ParityResult, skipped
from export_gelu.device.bundle import device_route
from export_gelu.device.returned import DEVICE_RUNNER
from export_gelu.exporter.feeds.dynamic_plan import DynamicPlan
from export_gelu.notes import Note
from export_gelu.options import RunOptions, VerifyOptions
from export_gelu.report.quantization import judged_qdq, quant_section
from export_gelu.report.report import Report
from export_gelu.report.sections import (
    Dim,
    DynamicSection,
    ProviderEntry,
    ProviderOption,
    RecordedOptions,
    ShapeEntry,
    ShapeVerdict,
    TrtBuilt,
    TrtDevice,
    TrtLoaded,
    TrtNotHere,
    TrtSkipped,
    not_tensorrt,
)
from export_gelu.results.device import DeviceFormsResult, DeviceJudging, DeviceVerifyResult
from export_gelu.results.export import (
    ExportPlan,
    ExportResult,
    GraphCheck,
    GraphExport,
    GraphsExport,
    ShapeCheck,
)
from export_gelu.results.forms import AutoResult, FormsResult
from export_gelu.results.request import OneGraphSource, Request
from export_gelu.results.verify import VerifyResult
from export_gelu.steps.device import device_latency
from export_gelu.steps.plan import local_engine_blocker_of

#: What a command ends with, the report is built from.
CommandResult = (ExportResult | VerifyResult | DeviceVerifyResult | DeviceFormsResult
                 | FormsResult | AutoResult)


def build_report(result: CommandResult) -> Report:
    """The report of `result`."""
    if isinstance(result, GraphsExport):
        return _graphs_report(result)
    if isinstance(result, VerifyResult):
        return _finish(_verify_report(result), result.request.checked.notes,
                       result.request.options)
    if isinstance(result, DeviceVerifyResult):
        return _finish(_device_report(result), result.request.checked.notes,
                       result.request.options)
    if isinstance(result, DeviceFormsResult):
        return _finish(_device_forms_report(result), result.request.checked.notes,
                       result.request.options)
    if isinstance(result, FormsResult):
        return _finish(_forms_report(result), result.request.checked.notes,
                       result.request.options)
    if isinstance(result, AutoResult):
        return _finish(_auto_report(result), result.export.request.checked.notes,
                       result.asked)
    return _finish(_graph_report(result), result.request.checked.notes,
                   result.request.options)


def _finish(rep: Report, checked_notes: tuple[str, ...], options: RunOptions) -> Report:
    """What every report ends with: the notes checking the options left, and every file the
    run wrote."""
    rep.notes.extend(notes_of(n for n in checked_notes if n not in rep.notes))
    rep.written = written_paths(rep, options)
    return rep


def written_paths(rep: Report, o: RunOptions) -> list[str]:
    """Every file (and folder) the run wrote: graphs and their data, engine, bundle, reports."""
    found: list[str] = []
    for graph in (rep.graphs or {}).values():
        found += [p for p in (graph.output, graph.external_data) if p]
    if not rep.graphs and rep.command == "export":
        found += [p for p in (rep.output, rep.external_data) if p]
    for quantized in [rep.quantization, *(g.quantization for g in (rep.graphs or {}).values())]:
        if quantized is not None and quantized.calibration_cache:
            found.append(quantized.calibration_cache)
    engine = rep.trt.engine if isinstance(rep.trt, (TrtBuilt, TrtLoaded)) else None
    bundle = None if isinstance(rep.trt, TrtDevice) else rep.trt.bundle
    found += [p for p in (engine, bundle) if p]
    found += [str(p) for p in (getattr(o, "report", None), getattr(o, "report_md", None)) if p]
    return list(dict.fromkeys(found))  # the plots are added as they are written


# -- export -----------------------------------------------------------------------------------

def _planned(result: GraphExport | GraphsExport) -> Report:
    """What the plan says: the target, the device, the TensorRT engine's fate."""
    request, plan = result.request, result.plan
    o = request.options
    rep = Report(model=str(request.model), target=plan.profile.name,
                 target_note=request.checked.target_note, threads=o.threads,
                 options=RecordedOptions(o))
    rep.precision, rep.gelu_form = o.precision or "fp32", o.gelu
    rep.device = plan.device
    if not o.verify:
        rep.parity = skipped("--no-verify")
    rep.trt = _planned_trt(plan)
    rep.stage_seconds = result.seconds
    rep.notes = notes_of(result.notes)
    return rep


def notes_of(notes: Iterable[str]) -> list[Note]:
    """Notes as the report keeps them: each with its code (an uncoded one as unclassified)."""
    return [n if isinstance(n, Note) else Note(n) for n in notes]


def _planned_trt(plan: ExportPlan) -> TrtSkipped | TrtNotHere:
    if not plan.wants_engine:
        return TrtSkipped(not_tensorrt(plan.profile.name))
    if plan.trt_missing:
        return TrtNotHere(local_engine_blocker_of(plan.profile) or plan.trt_missing,
                          DEVICE_ROUTE)
    return TrtSkipped("not run")


def _graph_report(result: GraphExport, *, part: bool = False) -> Report:
    """One graph's export (`part`: one graph of a folder's several, whose load the folder's
    report describes)."""
    rep = _planned(result)
    inputs, saved = result.inputs, result.saved
    if not part:
        loaded = result.source.loaded
        rep.model_format, rep.task = loaded.format.value, loaded.task or None
    rep.inputs, rep.generated_inputs = inputs.label, dict(inputs.generated)
    if inputs.run_precision == "fp64":
        rep.precision = "fp64"  # what the graph is in, not the fp32 --precision defaults to
    rep.exporter, rep.gelu_sites = saved.exporter, list(saved.gelu_sites)
    rep.opset, rep.op_counts, rep.compatibility = saved.opset, saved.op_counts, saved.compatibility
    if saved.dynamic_profile is not None:
        rep.dynamic = DynamicSection(dims_of(inputs.dynamic), [], list(saved.dynamic_profile))
    rep.weights = saved.weights
    rep.output = str(saved.path)
    rep.external_data = str(saved.data) if saved.data is not None else None
    engine = result.engine
    if engine is not None:
        rep.trt = TrtBuilt(str(engine.saved) if engine.saved else None, engine.tensorrt,
                           engine.precision_api, engine.engine_here)
    verdict = result.verdict
    if verdict is not None:
        checked = verdict.checked
        rep.parity, rep.latency = checked.parity, dict(checked.latency)
        rep.providers = export_providers(checked)
        if isinstance(rep.trt, TrtBuilt) and "tensorrt" in checked.by_runner:
            rep.trt.parity = checked.by_runner["tensorrt"]
        if verdict.shapes:
            for shape in verdict.shapes:
                for name, how in shape.generated.items():
                    rep.generated_inputs.setdefault(name, how)
            rep.dynamic = DynamicSection(dims_of(inputs.dynamic),
                                         [shape_entry(s) for s in verdict.shapes],
                                         rep.dynamic.profile if rep.dynamic else [])
    rep.divergence = result.divergence
    if result.bundle is not None:
        _bundled(rep, result.bundle)
    rep.calibration = result.calibration
    rep.generation = result.generation
    if result.quantization is not None:
        rep.quantization = quant_section(result.quantization)
        rep.parity = skipped(f"{rep.precision} graph: judged by the {rep.precision} verdict "
                             "(quantization)")
    return rep


def _bundled(rep: Report, bundle: Path) -> None:
    """The report names the bundle written; where no engine can be built here, the bundle is
    the device route taken."""
    trt = rep.trt
    if isinstance(trt, TrtNotHere):
        trt.device = device_route(bundle)
    if not isinstance(trt, TrtDevice):
        trt.bundle = str(bundle)


def _bundled_forms(rep: Report, bundle: Path) -> None:
    """The report names the forms bundle written (the device chooses among its forms)."""
    if not isinstance(rep.trt, TrtDevice):
        rep.trt.bundle = str(bundle)


def dims_of(plan: DynamicPlan) -> list[Dim]:
    """The dynamic dims as the report gives them."""
    return [Dim(d.name, d.min, d.opt, d.max, [f"{i}:{a}" for i, a in d.axes])
            for d in plan.dims]


def export_providers(checked: GraphCheck) -> dict[str, ProviderEntry]:
    """Each ONNX Runtime run asked for, and what became of it; the ready ones' parity (the
    first's status, the others' verdicts in full)."""
    if not checked.providers:
        return {}
    return providers_table(checked.providers, [r.name for r in checked.providers
                                               if r.status == "ready"], checked.by_runner)


def providers_table(runs: tuple[ProviderRun, ...], checked: list[str],
                    by_runner: dict[str, ParityResult]) -> dict[str, ProviderEntry]:
    """`runs` as the report's `providers`; each of the `checked` runners' parity (the first
    one's status, the others' verdicts in full)."""
    table = {r.name: ProviderEntry([p if isinstance(p, str) else ProviderOption(p[0], p[1])
                                    for p in r.providers], list(r.active), r.status, r.reason)
             for r in runs}
    for i, name in enumerate(checked):
        result = by_runner[name]
        table[name].parity = result.status if i == 0 else result
    return table


def shape_entry(shape: ShapeCheck) -> ShapeEntry:
    """Parity at one `--dynamic` size, as the report's `dynamic.shapes` holds it."""
    verdicts = {name: _shape_verdict(result) for name, result in shape.by_runner.items()}
    return ShapeEntry(shape.label, shape.sizes, shape.inputs, shape.generated,
                      verdicts.get("onnxruntime"), verdicts.get("tensorrt"))


def _shape_verdict(result: ParityResult) -> ShapeVerdict:
    worst = max((o.max_abs for o in result.outputs.values()), default=float("nan"))
    scale = max((o.ref_scale for o in result.outputs.values()), default=float("nan"))
    return ShapeVerdict(result, worst, scale)


def _graphs_report(result: GraphsExport) -> Report:
    """A folder of graphs: each graph's own report under `graphs`, summed up in the keys
    every report has."""
    rep = _planned(result)
    source = result.source
    rep.model_format, rep.task = source.loaded.format.value, source.loaded.task or None
    reports = {}
    for name, part in result.parts.items():
        reports[name] = _graph_report(part, part=True)
    rep.output = str(result.plan.output)
    rep.graphs = reports
    rep.gelu_sites = [dataclasses.replace(s, module=f"{Path(n).stem}:{s.module or s.name}")
                      for n, r in reports.items() for s in r.gelu_sites]
    if result.parity is not None:
        rep.parity = result.parity
    first = next(iter(reports.values()))
    rep.opset, rep.exporter = first.opset, first.exporter
    rep.compatibility = {k: v for r in reports.values() for k, v in r.compatibility.items()}
    rep.generation = result.generation
    return _finish(rep, result.request.checked.notes, result.request.options)


# -- verify -----------------------------------------------------------------------------------

def _verify_report(result: VerifyResult) -> Report:
    """DEPLOYED against MODEL."""
    request, deployed, inputs = result.request, result.deployed, result.inputs
    o = request.options
    loaded = result.source.loaded
    rep = Report(model=str(request.model), target=deployed.runtime, threads=o.threads,
                 options=RecordedOptions(o), output=str(request.deployed), gelu_form="",
                 command="verify", model_format=loaded.format.value, task=loaded.task or None)
    rep.precision, rep.inputs = inputs.run_precision, inputs.label
    rep.generated_inputs, rep.precision_note = dict(inputs.generated), inputs.precision_note
    rep.device = inputs.device
    described = result.described
    if deployed.kind == "onnx":
        rep.opset, rep.op_counts = described.opset, described.op_counts
        rep.gelu_sites = list(described.gelu_sites)
        rep.trt = TrtSkipped("DEPLOYED is an ONNX file (run in ONNX Runtime)")
    else:
        rep.trt = TrtLoaded(str(deployed.path))
    checked = result.check
    rep.parity, rep.latency = checked.parity, dict(checked.latency)
    if checked.providers:
        rep.providers = providers_table(checked.providers, list(checked.by_runner),
                                        checked.by_runner)
    rep.divergence = result.divergence
    if result.bundle is not None:
        _bundled(rep, result.bundle)
    rep.calibration = result.calibration
    rep.notes, rep.stage_seconds = notes_of(result.notes), result.seconds
    if result.quantization is not None:
        judged_qdq(rep, result.quantization)
    return rep


# -- verify --device-outputs ------------------------------------------------------------------

def _device_base(request: Request[VerifyOptions], source: OneGraphSource,
                 judging: DeviceJudging, manifest: dict[str, Any], deployed_path: Path,
                 label: str) -> Report:
    """What a device run's report says of MODEL, the graph and how it is judged."""
    o = request.options
    loaded = source.loaded
    version = str(manifest.get("tensorrt", "") or "")
    rep = Report(model=str(request.model),
                 target=f"tensorrt {version} (device)" if version else "tensorrt (device)",
                 threads=o.threads, options=RecordedOptions(o), gelu_form="", command="verify",
                 model_format=loaded.format.value, task=loaded.task or None)
    rep.output, rep.inputs, rep.precision = str(deployed_path), label, judging.run_precision
    rep.precision_note, rep.device = judging.precision_note, judging.device
    return rep


def _device_trt(options: VerifyOptions, manifest: dict[str, Any], outputs_format: str,
                ran: str | None, *, times: bool = True) -> TrtDevice:
    version = manifest.get("tensorrt", "")
    return TrtDevice(version or None, manifest.get("target"), str(options.device_outputs),
                     outputs_format,
                     str(options.device_times) if options.device_times and times else None,
                     device_tensorrt=ran)


def _device_report(result: DeviceVerifyResult) -> Report:
    """One graph's device run."""
    device_run, o = result.device_run, result.request.options
    rep = _device_base(result.request, result.source, result.judging, device_run.manifest,
                       device_run.deployed.path, device_run.label)
    rep.parity = result.parity
    rep.trt = _device_trt(o, device_run.manifest, device_run.outputs_format, result.ran)
    if device_run.times is not None:
        rep.latency[DEVICE_RUNNER] = device_latency(device_run.times)
    rep.divergence = result.divergence
    rep.notes, rep.stage_seconds = notes_of(result.notes), result.seconds
    if result.quantization is not None:
        judged_qdq(rep, result.quantization)
    return rep


def _device_forms_report(result: DeviceFormsResult) -> Report:
    """A bundle of GELU forms' device runs: the table, the form chosen."""
    forms_run, choice, o = result.forms_run, result.choice, result.request.options
    rep = _device_base(result.request, result.source, result.judging, forms_run.manifest,
                       forms_run.deployed.path, forms_run.label)
    chosen = choice.chosen
    rep.parity, rep.forms = choice.parity, choice.table
    if chosen is not None:
        rep.output = str(forms_run.forms[chosen.form].graph)
    rep.gelu_form = f"device choice → {chosen.form}" if chosen else "device choice: none"
    rep.trt = _device_trt(o, forms_run.manifest, "trtexec", result.ran, times=False)
    if chosen is not None and chosen.latency is not None:
        rep.latency[DEVICE_RUNNER] = chosen.latency
    if result.written is not None:
        rep.output = str(result.written)
    rep.notes, rep.stage_seconds = notes_of(result.notes), result.seconds
    return rep


# -- --compare-forms, --gelu auto -------------------------------------------------------------

def _forms_report(result: FormsResult) -> Report:
    """The forms' table, the GELU input ranges, the forms bundle written for a device."""
    o = result.request.options
    loaded = result.source.loaded
    rep = Report(model=str(result.request.model), target=", ".join(o.targets), threads=o.threads,
                 options=RecordedOptions(o), command="compare-forms",
                 model_format=loaded.format.value, task=loaded.task or None)
    if o.precision is not None:  # (None is refused by each form's export, exit 2)
        rep.precision = o.precision
    rep.inputs, rep.generated_inputs = result.inputs.label, dict(result.inputs.generated)
    rep.forms, rep.calibration = result.comparison, result.calibration
    if result.bundle is not None:
        _bundled_forms(rep, result.bundle.path)
    rep.notes, rep.stage_seconds = notes_of(result.notes), result.seconds
    return rep


def _auto_report(result: AutoResult) -> Report:
    """The export of the form `--gelu auto` chose, with the forms' table."""
    rep = _graph_report(result.export)
    rep.gelu_form = f"auto → {result.export.request.options.gelu}"
    rep.forms = result.compared.comparison
    rep.options = RecordedOptions(result.asked)  # what was asked ("auto"), not the choice
    if result.bundle is not None:
        _bundled_forms(rep, result.bundle.path)
    rep.notes += notes_of(n for n in result.export.request.checked.notes if n not in rep.notes)
    rep.notes += notes_of(result.notes)
    return rep
