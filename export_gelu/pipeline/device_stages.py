"""The stages of `export-gelu verify MODEL --bundle DIR --device-outputs outputs.json
[--device-times times.json]`: what a device produced, judged against the model by the one
checker, with the verdict, per-output errors, exit codes and report of a local run (the
device's recorded outputs stand in for a runner)."""

from __future__ import annotations

from pathlib import Path

from export_gelu.check.checker import CheckJob, run_check
from export_gelu.check.deployed import feed_for, open_deployed
from export_gelu.check.devices import resolve_device
from export_gelu.check.input_resolver import InputRequest, resolve_inputs
from export_gelu.check.latency import summarize
from export_gelu.check.recorded import RecordedRunner
from export_gelu.check.reference import model_runner
from export_gelu.check.torch_runner import dtype_metadata
from export_gelu.device.outputs import read_device_outputs, read_device_times
from export_gelu.device.returned import (
    DEVICE_RUNNER,
    cast_to_graph,
    check_pairing,
    check_shapes,
    device_version_notes,
    from_bundle,
    output_dtypes,
)
from export_gelu.device.script import WARMUP_MS
from export_gelu.errors import BadInputError
from export_gelu.notes import Note, tagged
from export_gelu.pipeline.stage import stage_io
from export_gelu.pipeline.state import RunState
from export_gelu.report.report import Report
from export_gelu.tolerances import resolve_tolerances


@stage_io(reads=("model_path", "options", "output"), writes=())
def plan_device_verify(state: RunState) -> None:
    """options → the combination checked (a bundle, or DEPLOYED with --inputs), the outputs
    checked against MODEL; an empty report."""
    o = state.options
    if not state.model_path.is_file():
        raise BadInputError(f"{state.model_path}: no such file")
    if o.bundle and o.inputs_file:
        raise BadInputError("--inputs: the bundle holds the inputs the device ran; give one or "
                            "the other")
    if not o.bundle and (state.output is None or not o.inputs_file):
        raise BadInputError("--device-outputs without --bundle needs DEPLOYED (the ONNX graph "
                            "the device ran) and --inputs (the inputs it ran on)")
    state.report = Report(model=str(state.model_path), target="tensorrt (device)",
                          gelu_form="", threads=o.threads, command="verify",
                          options=o.to_json())
    state.report.stage_seconds = state.clock.stages


@stage_io(reads=("deployed", "feeds", "manifest", "model_path", "options", "output"),
          writes=("deployed", "device_format", "device_module_outputs", "device_outputs",
                  "device_times", "feeds", "inputs_label", "manifest"))
def read_device_run(state: RunState) -> None:
    """The bundle (or DEPLOYED and --inputs), the graph the device ran, and what it wrote."""
    o = state.options
    if o.bundle:
        state.manifest, graph = from_bundle(Path(o.bundle), state.model_path, state.output)
        request = InputRequest(bundle=Path(o.bundle))
    else:
        graph = state.output
        request = InputRequest(inputs_file=Path(o.inputs_file), json_ok=True)
    given = resolve_inputs(None, request)  # the device's feeds, as DEPLOYED takes them
    state.feeds, state.inputs_label = given.feeds, given.source
    state.deployed = open_deployed(graph)
    if state.deployed.kind != "onnx":
        raise BadInputError(f"{graph}: with --device-outputs, DEPLOYED is the ONNX graph the "
                            "device built its engine from")
    outputs, state.device_format = read_device_outputs(o.device_outputs)
    marked = set(state.manifest.get("localize", {}).get("outputs", []))
    if marked:  # the marked graph's run (run_on_device.sh localize): its extra tensors aside
        state.device_module_outputs = {n: a for n, a in outputs[0].items() if n in marked}
        outputs = [type(it)((n, a) for n, a in it.items() if n not in marked) for it in outputs]
    check_pairing(outputs, state.deployed.outputs, Path(o.device_outputs), len(state.feeds))
    state.device_outputs = cast_to_graph(outputs, output_dtypes(graph))
    if o.device_times:
        warmup = state.manifest.get("trtexec", {}).get("warmup_ms", WARMUP_MS)
        state.device_times = read_device_times(o.device_times, warmup)


@stage_io(reads=("deployed", "device", "inputs_label", "manifest", "options", "run_precision"),
          writes=("device", "run_precision", "tolerances"))
def device_inputs(state: RunState) -> None:
    """The precision and tolerances (the bundle's, unless --precision/--atol/--rtol say
    otherwise) and the device the reference runs on (--device)."""
    o, rep, dep = state.options, state.report, state.deployed
    state.run_precision = o.precision or state.manifest.get("precision") or dep.precision
    recorded = None if o.precision else state.manifest.get("tolerances")
    state.tolerances = resolve_tolerances(state.run_precision, atol=o.atol, rtol=o.rtol,
                                          recorded=recorded)
    state.device = resolve_device(o.device)
    rep.output, rep.inputs, rep.precision = str(dep.path), state.inputs_label, state.run_precision
    rep.precision_note = ("given with --precision" if o.precision else
                          "the bundle's" if state.manifest else dep.precision_why)
    rep.device = state.device.to_json()


@stage_io(reads=("deployed", "device", "device_format", "device_outputs", "device_times",
                "feeds", "loaded", "manifest", "options", "tolerances"),
          writes=())
def device_check(state: RunState) -> None:
    """The reference on the feeds the device ran, against the device's recorded outputs."""
    o, rep, dep = state.options, state.report, state.deployed
    feeds = [feed_for(dep, f) for f in state.feeds]
    reference = model_runner(state.loaded, feeds[0], dep.outputs, o.threads,
                             state.device.device, onnx_name="reference-onnx")
    device = RecordedRunner(DEVICE_RUNNER, feeds, state.device_outputs,
                            dtype_metadata(dict(feeds[0])))
    state.progress.step(f"running {reference.name} on {len(feeds)} feed(s)")
    try:
        outcome = run_check(CheckJob(reference, [device], feeds, state.tolerances))
    except (RuntimeError, ValueError, TypeError) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
        raise BadInputError(f"running MODEL on these inputs failed: {first}") from exc
    check_shapes(outcome.verdict, Path(o.device_outputs))
    rep.parity = outcome.verdict
    _describe_device_run(state)


def _describe_device_run(state: RunState) -> None:
    o, rep, manifest = state.options, state.report, state.manifest
    version = manifest.get("tensorrt", "")
    rep.target = f"tensorrt {version} (device)" if version else "tensorrt (device)"
    rep.trt = {"status": "device", "reason": "", "tensorrt": version or None,
               "target": manifest.get("target"), "outputs_file": str(o.device_outputs),
               "outputs_format": state.device_format,
               "times_file": str(o.device_times) if o.device_times else None}
    if state.device_format == "trtexec":
        rep.notes.append(Note("trtexec prints values with 6 significant digits: up to 5e-6 "
                              "relative rounding, far below any default rtol", "trtexec-rounding"))
    if state.device_times is not None:
        samples, dropped = state.device_times
        rep.latency[DEVICE_RUNNER] = summarize([t / 1e3 for t in samples], dropped,
                                               "trtexec computeMs (GPU compute per inference)")
        if dropped:
            rep.notes.append(Note(f"{dropped} warm-up inference(s) dropped from {o.device_times} "
                                  "(trtexec before 8.6 exports them too)", "warmups-dropped"))
    if manifest:
        rep.notes.append(Note(f"bundle for {manifest.get('target')} (TensorRT "
                              f"{manifest.get('tensorrt')}); outputs read from "
                              f"{state.device_format} JSON", "bundle-read"))
    rep.notes += tagged("device-tensorrt", device_version_notes(rep, Path(o.device_outputs),
                                                                version))
