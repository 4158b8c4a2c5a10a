"""The report, built once from a command's result (`build_report`): every key from the typed
records the steps returned, nothing written into it while the run goes."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from export_gelu.check.devices import ProviderRun
from export_gelu.check.parity import ParityResult, skipped
from export_gelu.check.trt_runner import DEVICE_ROUTE
from export_gelu.device.bundle import device_route
from export_gelu.device.returned import DEVICE_RUNNER
from export_gelu.options import RunOptions, VerifyOptions
from export_gelu.report.report import Report
from export_gelu.results.device import DeviceFormsResult, DeviceJudging, DeviceVerifyResult
from export_gelu.results.export import (
    ExportPlan,
    ExportResult,
    GraphCheck,
    GraphExport,
    GraphsExport,
    ShapeCheck,
)
from export_gelu.results.request import OneGraphSource, Request
from export_gelu.results.verify import VerifyResult
from export_gelu.steps.check import shape_summary
from export_gelu.steps.device import device_latency
from export_gelu.steps.plan import local_engine_blocker_of

#: What a command ends with, the report is built from.
CommandResult = ExportResult | VerifyResult | DeviceVerifyResult | DeviceFormsResult


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
    return _finish(_graph_report(result), result.request.checked.notes,
                   result.request.options)


def _finish(rep: Report, checked_notes: tuple[str, ...], options: RunOptions) -> Report:
    """What every report ends with: the notes checking the options left, and every file the
    run wrote."""
    rep.notes.extend(n for n in checked_notes if n not in rep.notes)
    rep.written = written_paths(rep, options)
    return rep


def written_paths(rep: Report, o: RunOptions) -> list[str]:
    """Every file (and folder) the run wrote: graphs and their data, engine, bundle, reports."""
    found: list[str] = []
    for graph in (rep.graphs or {}).values():
        found += [p for p in (graph.get("output"), graph.get("external_data")) if p]
    if not rep.graphs and rep.command == "export":
        found += [p for p in (rep.output, rep.external_data) if p]
    found += [p for p in (rep.trt.get("engine"), rep.trt.get("bundle")) if p]
    found += [str(p) for p in (getattr(o, "report", None), getattr(o, "report_md", None)) if p]
    return list(dict.fromkeys(found))  # the plots are added as they are written


# -- export -----------------------------------------------------------------------------------

def _planned(result: GraphExport | GraphsExport) -> Report:
    """What the plan says: the target, the device, the TensorRT engine's fate."""
    request, plan = result.request, result.plan
    o = request.options
    rep = Report(model=str(request.model), target=plan.profile.name,
                 target_note=request.checked.target_note, threads=o.threads,
                 options=o.to_json())
    rep.precision, rep.gelu_form = o.precision or "fp32", o.gelu
    rep.device = plan.device.to_json() if plan.device else {}
    if not o.verify:
        rep.parity = skipped("--no-verify")
    rep.trt = _planned_trt(plan)
    rep.stage_seconds = result.seconds
    rep.notes = list(result.notes)
    return rep


def _planned_trt(plan: ExportPlan) -> dict[str, Any]:
    if not plan.wants_engine:
        return {"status": "skipped", "reason": f"target {plan.profile.name} is not TensorRT"}
    if plan.trt_missing:
        return {"status": "skipped", "engine_here": False,
                "reason": local_engine_blocker_of(plan.profile) or plan.trt_missing,
                "device": DEVICE_ROUTE}
    return {"status": "skipped", "reason": "not run"}


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
        rep.dynamic = {"dims": inputs.dynamic.to_json(), "shapes": [],
                       "profile": saved.dynamic_profile}
    rep.weights = saved.weights.to_json() if saved.weights is not None else None
    rep.output = str(saved.path)
    rep.external_data = str(saved.data) if saved.data is not None else None
    engine = result.engine
    if engine is not None:
        rep.trt = {"status": "built", "reason": "",
                   "engine": str(engine.saved) if engine.saved else None,
                   "tensorrt": engine.tensorrt, "precision_api": engine.precision_api,
                   "engine_here": engine.engine_here}
    verdict = result.verdict
    if verdict is not None:
        checked = verdict.checked
        rep.parity, rep.latency = checked.parity, dict(checked.latency)
        rep.providers = export_providers(checked)
        if engine is not None and "tensorrt" in checked.by_runner:
            rep.trt["parity"] = checked.by_runner["tensorrt"].to_json()
        if verdict.shapes:
            for shape in verdict.shapes:
                for name, how in shape.generated.items():
                    rep.generated_inputs.setdefault(name, how)
            rep.dynamic = {**(rep.dynamic or {}), "dims": inputs.dynamic.to_json(),
                           "shapes": [shape_entry(s) for s in verdict.shapes]}
    rep.divergence = result.divergence
    if result.bundle is not None:
        rep.trt["bundle"] = str(result.bundle)
        if rep.trt.get("device"):  # no engine here: the bundle is the device route taken
            rep.trt["device"] = device_route(result.bundle)
    rep.calibration = result.calibration
    rep.generation = result.generation.to_json() if result.generation else None
    return rep


def export_providers(checked: GraphCheck) -> dict[str, Any]:
    """Each ONNX Runtime run asked for, and what became of it; the ready ones' parity (the
    first's status, the others' verdicts in full)."""
    if not checked.providers:
        return {}
    return providers_table(checked.providers, [r.name for r in checked.providers
                                               if r.status == "ready"], checked.by_runner)


def providers_table(runs: tuple[ProviderRun, ...], checked: list[str],
                    by_runner: dict[str, ParityResult]) -> dict[str, Any]:
    """`runs` as the report's `providers`; each of the `checked` runners' parity (the first
    one's status, the others' verdicts in full)."""
    table = {r.name: r.to_json() for r in runs}
    for i, name in enumerate(checked):
        result = by_runner[name]
        table[name]["parity"] = result.status if i == 0 else result.to_json()
    return table


def shape_entry(shape: ShapeCheck) -> dict[str, Any]:
    """Parity at one `--dynamic` size, as the report's `dynamic.shapes` holds it."""
    entry: dict[str, Any] = {"label": shape.label, "sizes": shape.sizes, "inputs": shape.inputs,
                             "generated": shape.generated}
    for name, result in shape.by_runner.items():
        entry[name] = shape_summary(result)
    return entry


def _graphs_report(result: GraphsExport) -> Report:
    """A folder of graphs: each graph's own report under `graphs`, summed up in the keys
    every report has."""
    rep = _planned(result)
    source = result.source
    rep.model_format, rep.task = source.loaded.format.value, source.loaded.task or None
    reports = {}
    for name, part in result.parts.items():
        reports[name] = _graph_report(part, part=True)
        reports[name].stage_seconds = result.parts_seconds
    rep.output = str(result.plan.output)
    rep.graphs = {n: r.to_json() for n, r in reports.items()}
    rep.gelu_sites = [dataclasses.replace(s, module=f"{Path(n).stem}:{s.module or s.name}")
                      for n, r in reports.items() for s in r.gelu_sites]
    if result.parity is not None:
        rep.parity = result.parity
    first = next(iter(reports.values()))
    rep.opset, rep.exporter = first.opset, first.exporter
    rep.compatibility = {k: v for r in reports.values() for k, v in r.compatibility.items()}
    rep.generation = result.generation.to_json() if result.generation else None
    return _finish(rep, result.request.checked.notes, result.request.options)


# -- verify -----------------------------------------------------------------------------------

def _verify_report(result: VerifyResult) -> Report:
    """DEPLOYED against MODEL."""
    request, deployed, inputs = result.request, result.deployed, result.inputs
    o = request.options
    loaded = result.source.loaded
    rep = Report(model=str(request.model), target=deployed.runtime, threads=o.threads,
                 options=o.to_json(), output=str(request.deployed), gelu_form="",
                 command="verify", model_format=loaded.format.value, task=loaded.task or None)
    rep.precision, rep.inputs = inputs.run_precision, inputs.label
    rep.generated_inputs, rep.precision_note = dict(inputs.generated), inputs.precision_note
    rep.device = inputs.device.to_json()
    described = result.described
    if deployed.kind == "onnx":
        rep.opset, rep.op_counts = described.opset, described.op_counts
        rep.gelu_sites = list(described.gelu_sites)
        rep.trt = {"status": "skipped", "reason": "DEPLOYED is an ONNX file (run in ONNX Runtime)"}
    else:
        rep.trt = {"status": "loaded", "reason": "", "engine": str(deployed.path)}
    checked = result.check
    rep.parity, rep.latency = checked.parity, dict(checked.latency)
    if checked.providers:
        rep.providers = providers_table(checked.providers, list(checked.by_runner),
                                        checked.by_runner)
    rep.divergence = result.divergence
    if result.bundle is not None:
        rep.trt["bundle"] = str(result.bundle)
    rep.calibration = result.calibration
    rep.notes, rep.stage_seconds = list(result.notes), result.seconds
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
                 threads=o.threads, options=o.to_json(), gelu_form="", command="verify",
                 model_format=loaded.format.value, task=loaded.task or None)
    rep.output, rep.inputs, rep.precision = str(deployed_path), label, judging.run_precision
    rep.precision_note, rep.device = judging.precision_note, judging.device.to_json()
    return rep


def _device_trt(options: VerifyOptions, manifest: dict[str, Any], outputs_format: str,
                ran: str | None) -> dict[str, Any]:
    version = manifest.get("tensorrt", "")
    trt = {"status": "device", "reason": "", "tensorrt": version or None,
           "target": manifest.get("target"), "outputs_file": str(options.device_outputs),
           "outputs_format": outputs_format,
           "times_file": str(options.device_times) if options.device_times else None}
    if ran is not None:
        trt["device_tensorrt"] = ran
    return trt


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
    rep.notes, rep.stage_seconds = list(result.notes), result.seconds
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
    rep.trt = _device_trt(o, forms_run.manifest, "trtexec", result.ran)
    rep.trt["times_file"] = None
    if chosen is not None and chosen.latency is not None:
        rep.latency[DEVICE_RUNNER] = chosen.latency
    if result.written is not None:
        rep.output = str(result.written)
    rep.notes, rep.stage_seconds = list(result.notes), result.seconds
    return rep
