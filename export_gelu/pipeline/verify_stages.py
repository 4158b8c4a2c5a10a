"""The stages of `export-gelu verify MODEL DEPLOYED`: the deployed artifact (an ONNX file run
in ONNX Runtime, or a TensorRT engine) against the original model on the same inputs, through
the one checker; its latency beside the model's; the GELU input ranges."""

from __future__ import annotations

import gc
from collections import Counter
from pathlib import Path

import onnx

from export_gelu.check.calibration import Calibration, gelu_input_ranges
from export_gelu.check.checker import CheckJob, run_check
from export_gelu.check.deployed import deployed_runner, feed_for, open_deployed
from export_gelu.check.devices import DeviceChoice, ready_runners, resolve_device
from export_gelu.check.input_resolver import InputRequest, ranges_label, resolve_inputs
from export_gelu.check.recorded import IN_TURN_NOTE, fits_beside_reference, record_reference
from export_gelu.check.reference import model_runner
from export_gelu.check.saved_data import save_polygraphy_inputs, save_polygraphy_outputs
from export_gelu.device.bundle import (
    BundleRequest,
    note_bundle,
    reference_outputs,
    write_bundle,
)
from export_gelu.errors import BadInputError
from export_gelu.exporter.model_files.detect import refuse_missing
from export_gelu.notes import Note
from export_gelu.parse_check import model_opset, op_counts
from export_gelu.passes.onnx import find_sites
from export_gelu.passes.onnx.plugin_math import STANDIN_NOTE, plugin_nodes
from export_gelu.pipeline.localize import bundle_tensors
from export_gelu.pipeline.stage import stage_io
from export_gelu.pipeline.state import VerifyState, need
from export_gelu.tolerances import resolve_tolerances


@stage_io(reads=("checked", "output"), writes=("profile",))
def plan_verify(state: VerifyState) -> None:
    """options (their paths checked by output_plan) → the bundle's target; the report says
    what is verified."""
    state.profile = state.checked.profile  # --target: the TensorRT version of --bundle
    rep = state.report
    rep.output, rep.gelu_form, rep.command = str(state.output), "", "verify"


@stage_io(reads=("loaded", "model_path", "options", "output"), writes=("deployed",))
def open_artifact(state: VerifyState) -> None:
    """DEPLOYED → what it takes and gives, and the precision it runs in."""
    refuse_missing(need(state.output, "output"))  # both said before any progress line
    if state.loaded is None:
        refuse_missing(state.model_path)
    state.progress.step(f"opening {state.output}")
    dep = state.deployed = open_deployed(need(state.output, "output"))
    if state.options.bundle and dep.kind != "onnx":
        raise BadInputError("--bundle: DEPLOYED must be the ONNX graph (a bundle carries the "
                            "graph; the device builds its own engine)")
    state.report.target = dep.runtime


def _device(state: VerifyState) -> DeviceChoice:
    """Where the reference (and ONNX Runtime) runs; an engine runs on the GPU, and the
    reference goes there with it when it can."""
    requested = state.options.device
    if state.deployed is None or state.deployed.kind != "engine":
        return resolve_device(requested)
    import torch

    device = requested or ("cuda" if torch.cuda.is_available() else "cpu")
    return DeviceChoice(device, device, "TensorRT engine")


@stage_io(reads=("deployed", "device", "loaded", "options", "run_precision"),
          writes=("device", "feeds", "inputs_label", "real_inputs", "run_precision", "tolerances"))
def verify_inputs(state: VerifyState) -> None:
    """loaded, deployed → feeds (as the model and as DEPLOYED takes them), the precision and
    its tolerances, the device."""
    o, rep, dep = state.options, state.report, need(state.deployed, "deployed")
    given = resolve_inputs(state.loaded, InputRequest(
        specs=tuple(o.inputs), inputs_file=Path(o.inputs_file) if o.inputs_file else None,
        json_ok=True, shape_source=dep.path if dep.kind == "onnx" else None))
    state.feeds, state.inputs_label, state.real_inputs = given.feeds, given.source, given.real
    state.run_precision = o.precision or dep.precision
    state.tolerances = resolve_tolerances(state.run_precision, atol=o.atol, rtol=o.rtol)
    state.device = _device(state)
    rep.precision, rep.inputs = state.run_precision, given.source
    rep.generated_inputs = given.generated
    rep.precision_note = "given with --precision" if o.precision else dep.precision_why
    rep.device = state.device.to_json()


@stage_io(reads=("deployed", "loaded"), writes=("gelu_sites",))
def describe_deployed(state: VerifyState) -> None:
    """The deployed graph's opset, ops and GELU sites (what it actually computes)."""
    rep, dep = state.report, need(state.deployed, "deployed")
    if dep.kind == "onnx":
        graph = onnx.load(str(dep.path), load_external_data=False)
        rep.opset = model_opset(graph)
        rep.op_counts = dict(op_counts(graph))
        state.gelu_sites = rep.gelu_sites = find_sites(graph)
        rep.trt = {"status": "skipped", "reason": "DEPLOYED is an ONNX file (run in ONNX Runtime)"}
        rep.notes += _plugin_notes(graph, "DEPLOYED")
    else:
        rep.trt = {"status": "loaded", "reason": "", "engine": str(dep.path)}
    if state.loaded is not None and state.loaded.is_onnx:
        rep.notes += _plugin_notes(onnx.load(str(state.loaded.path), load_external_data=False),
                                   "MODEL (the reference)")


def _plugin_notes(graph: onnx.ModelProto, which: str) -> list[str]:
    return [Note(STANDIN_NOTE.format(which=which), "plugin-standin")] if plugin_nodes(graph) \
        else []


@stage_io(reads=("deployed", "device", "feeds", "gelu_sites", "inputs_label", "loaded", "options",
                "real_inputs", "reference", "run_precision"),
          writes=("calibrated", "loaded", "reference"))
def verify_reference(state: VerifyState) -> None:
    """The reference runner; a big DEPLOYED is checked with one model in memory at a time:
    the reference runs (and is timed) first, recorded, and freed."""
    o, rep, dep = state.options, state.report, need(state.deployed, "deployed")
    loaded, device = need(state.loaded, "loaded"), need(state.device, "device")
    dep_feeds = [feed_for(dep, f) for f in state.feeds]
    state.reference = model_runner(loaded, dep_feeds[0], dep.outputs, o.threads,
                                   device.device, onnx_name="reference-onnx")
    if dep.kind == "onnx" and not fits_beside_reference(dep.path):
        if o.calibrate and not state.is_onnx:  # it needs the model: before it goes
            record_ranges(state)
        state.progress.step(f"running {state.reference.name} before loading DEPLOYED "
                            "(a big model)")
        state.reference = record_reference(state.reference, dep_feeds, o.iterations, o.warmup)
        assert state.loaded is not None  # the reference above runs it
        state.loaded.module = state.loaded.exported = None  # one model in memory at a time
        gc.collect()
        rep.notes.append(Note(IN_TURN_NOTE.format(reference=state.reference.name,
                                                  output="DEPLOYED"), "one-model-at-a-time"))


@stage_io(reads=("deployed", "device", "feeds", "options", "reference", "run_precision",
                "tolerances"),
          writes=("parity",))
def verify_check(state: VerifyState) -> None:
    """Parity of DEPLOYED (every ONNX Runtime provider for the device, or the engine) against
    the reference on every feed, and latency of both, through the one checker."""
    o, rep, dep = state.options, state.report, need(state.deployed, "deployed")
    reference = need(state.reference, "reference")
    dep_feeds = [feed_for(dep, f) for f in state.feeds]
    runs = ([] if dep.kind == "engine" else
            ready_runners(dep.path, need(state.device, "device").device, state.run_precision,
                          o.threads))
    runners = ([deployed_runner(dep, threads=o.threads)] if dep.kind == "engine"
               else [r.runner for r in runs if r.status == "ready"])
    state.progress.step(f"running {len(dep_feeds)} feed(s) through {reference.name} and "
                        f"{runners[0].name}")
    try:
        outcome = run_check(CheckJob(reference, runners, dep_feeds,
                                     need(state.tolerances, "tolerances"),
                                     o.iterations, o.warmup, precision=state.run_precision),
                            state.progress)
    except (RuntimeError, ValueError, TypeError) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
        raise BadInputError(f"running MODEL and DEPLOYED on these inputs failed: {first}") from exc
    state.parity = rep.parity = outcome.verdict
    rep.latency = outcome.latency
    if runs:
        table = {r.name: r.to_json() for r in runs}
        for i, (name, result) in enumerate(outcome.by_runner.items()):
            table[name]["parity"] = result.status if i == 0 else result.to_json()
        rep.providers = table


@stage_io(reads=("deployed", "feeds", "options", "parity"), writes=())
def save_data(state: VerifyState) -> None:
    """`--save-inputs` / `--save-outputs`: the feeds and both runners' outputs in polygraphy's
    JSON formats."""
    o, rep = state.options, state.report
    dep = need(state.deployed, "deployed")
    dep_feeds = [feed_for(dep, f) for f in state.feeds]
    if o.save_inputs:
        save_polygraphy_inputs(dep_feeds, o.save_inputs)
        rep.notes.append(Note(f"inputs saved to {o.save_inputs} (polygraphy run --load-inputs)",
                              "saved-inputs"))
    if o.save_outputs:
        parity = need(state.parity, "parity")
        save_polygraphy_outputs(parity.run_results, o.save_outputs)
        rep.notes.append(Note(f"outputs of {' and '.join(parity.runners)} saved to "
                              f"{o.save_outputs} (polygraphy run --load-outputs)",
                              "saved-outputs"))


@stage_io(reads=("deployed", "feeds", "loaded", "model_path", "options", "parity", "profile",
                "reference", "run_precision", "tolerances"),
          writes=())
def verify_bundle(state: VerifyState) -> None:
    """`verify MODEL DEPLOYED.onnx --bundle DIR`: the bundle of a graph verified here."""
    o, rep, profile = state.options, state.report, need(state.profile, "profile")
    dep, tol = need(state.deployed, "deployed"), need(state.tolerances, "tolerances")
    bundle_dir = need(o.bundle, "--bundle")
    state.progress.step(f"writing the device bundle {bundle_dir}")
    feed = feed_for(dep, state.feed)
    name, outputs = reference_outputs(state.parity, lambda: state.reference, feed)
    req = BundleRequest(model_path=state.model_path, graph_path=dep.path,
                        target=profile.name, trt_version=profile.trt_version,
                        precision=state.run_precision, feed=feed, reference=outputs,
                        reference_name=name, atol=tol.atol, rtol=tol.rtol,
                        module_tensors=bundle_tensors(state, dep.path))
    out = write_bundle(req, bundle_dir)
    note_bundle(rep, out, state.model_path, profile.name, profile.trt_version)


def calibrates(state: VerifyState) -> bool:
    return bool(state.options.calibrate) and state.is_torch and not state.calibrated


@stage_io(reads=("feeds", "gelu_sites", "inputs_label", "loaded", "real_inputs", "run_precision"),
          writes=("calibrated",))
def calibrate_verify(state: VerifyState) -> None:
    """GELU input ranges of the model on the feeds, and what they say about the forms."""
    record_ranges(state)


def record_ranges(state: VerifyState) -> None:
    """The calibration stage's work (also done by the reference stage for a big model, before
    the model is freed): the ranges and their notes into the report; `calibrated`."""
    rep = state.report
    state.progress.step("recording GELU input ranges")
    label = ranges_label(state.inputs_label, state.real_inputs)
    rep.calibration = gelu_input_ranges(state.loaded, state.feeds, label)
    rep.notes += _calibration_notes(rep.calibration, state.run_precision)
    rep.notes += _form_notes(Counter(s.kind for s in rep.calibration.sites),
                             Counter(s.kind for s in state.gelu_sites))
    state.calibrated = True


def _calibration_notes(calibration: Calibration, precision: str) -> list[str]:
    return [Note(f"GELU {s.module or s.name} sees |x| > 40 ({s.share_abs_gt_40:.2%} of values): "
                 "a Pow-based tanh form overflows fp16 there (x³ > 65504)", "fp16-overflow-risk")
            for s in calibration.sites if s.share_abs_gt_40 > 0 and precision == "fp16"]


def _form_notes(model_kinds: Counter[str], deployed_kinds: Counter[str]) -> list[str]:
    if not model_kinds or not deployed_kinds or model_kinds == deployed_kinds:
        return []
    deployed = ", ".join(f"{n} {k}" for k, n in deployed_kinds.items())
    model = ", ".join(f"{n} {k}" for k, n in model_kinds.items())
    return [Note(f"the deployed graph's GELUs ({deployed}) differ from the model's ({model}): "
                 "a changed form adds error (tanh up to 4.73e-4, sigmoid up to 2.03e-2 per site)",
                 "gelu-forms-differ")]
