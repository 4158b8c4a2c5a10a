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
from export_gelu.pipeline.state import VerifyState, need
from export_gelu.tolerances import resolve_tolerances


@stage_io(reads=("model_path",), writes=())
def plan_device_verify(state: VerifyState) -> None:
    """MODEL is a file (the flags' combination, a bundle or DEPLOYED with --inputs, was
    checked by options.validate); the report says what is verified."""
    if not state.model_path.is_file():
        raise BadInputError(f"{state.model_path}: no such file")
    rep = state.report
    rep.target, rep.gelu_form, rep.command = "tensorrt (device)", "", "verify"


@stage_io(reads=("deployed", "feeds", "manifest", "model_path", "options", "output"),
          writes=("deployed", "device_format", "device_module_outputs", "device_outputs",
                  "device_times", "feeds", "inputs_label", "manifest"))
def read_device_run(state: VerifyState) -> None:
    """The bundle (or DEPLOYED and --inputs), the graph the device ran, and what it wrote."""
    o = state.options
    if o.bundle:
        state.manifest, graph = from_bundle(Path(o.bundle), state.model_path, state.output)
        request = InputRequest(bundle=Path(o.bundle))
    else:  # options.validate: DEPLOYED and --inputs are given
        graph, inputs_file = need(state.output, "output"), need(o.inputs_file, "--inputs")
        request = InputRequest(inputs_file=Path(inputs_file), json_ok=True)
    given = resolve_inputs(None, request)  # the device's feeds, as DEPLOYED takes them
    state.feeds, state.inputs_label = given.feeds, given.source
    state.deployed = open_deployed(graph)
    if state.deployed.kind != "onnx":
        raise BadInputError(f"{graph}: with --device-outputs, DEPLOYED is the ONNX graph the "
                            "device built its engine from")
    device_outputs = need(o.device_outputs, "--device-outputs")
    outputs, state.device_format = read_device_outputs(device_outputs)
    marked = set(state.manifest.get("localize", {}).get("outputs", []))
    if marked:  # the marked graph's run (run_on_device.sh localize): its extra tensors aside
        state.device_module_outputs = {n: a for n, a in outputs[0].items() if n in marked}
        outputs = [type(it)((n, a) for n, a in it.items() if n not in marked) for it in outputs]
    check_pairing(outputs, state.deployed.outputs, Path(device_outputs), len(state.feeds))
    state.device_outputs = cast_to_graph(outputs, output_dtypes(graph))
    if o.device_times:
        warmup = state.manifest.get("trtexec", {}).get("warmup_ms", WARMUP_MS)
        state.device_times = read_device_times(o.device_times, warmup)


@stage_io(reads=("deployed", "device", "inputs_label", "manifest", "options", "run_precision"),
          writes=("device", "run_precision", "tolerances"))
def device_inputs(state: VerifyState) -> None:
    """The precision and tolerances (the bundle's, unless --precision/--atol/--rtol say
    otherwise) and the device the reference runs on (--device)."""
    o, rep, dep = state.options, state.report, need(state.deployed, "deployed")
    state.run_precision = o.precision or state.manifest.get("precision") or dep.precision
    recorded = None if o.precision else state.manifest.get("tolerances")
    state.tolerances = resolve_tolerances(state.run_precision, atol=o.atol, rtol=o.rtol,
                                          recorded=recorded)
    state.device = resolve_device(o.device)
    rep.output, rep.inputs, rep.precision = str(dep.path), state.inputs_label, state.run_precision
    rep.precision_note = ("given with --precision" if o.precision else
                          "the bundle's" if state.manifest else dep.precision_why)
    rep.device = state.device.to_json()


@stage_io(reads=("deployed", "device", "device_format", "device_outputs", "device_times", "feeds",
                "loaded", "manifest", "options", "tolerances"),
          writes=("parity",))
def device_check(state: VerifyState) -> None:
    """The reference on the feeds the device ran, against the device's recorded outputs."""
    o, rep, dep = state.options, state.report, need(state.deployed, "deployed")
    feeds = [feed_for(dep, f) for f in state.feeds]
    reference = model_runner(state.loaded, feeds[0], dep.outputs, o.threads,
                             need(state.device, "device").device, onnx_name="reference-onnx")
    device = RecordedRunner(DEVICE_RUNNER, feeds, state.device_outputs,
                            dtype_metadata(dict(feeds[0])))
    state.progress.step(f"running {reference.name} on {len(feeds)} feed(s)")
    try:
        outcome = run_check(CheckJob(reference, [device], feeds,
                                     need(state.tolerances, "tolerances")))
    except (RuntimeError, ValueError, TypeError) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
        raise BadInputError(f"running MODEL on these inputs failed: {first}") from exc
    check_shapes(outcome.verdict, Path(need(o.device_outputs, "--device-outputs")))
    state.parity = rep.parity = outcome.verdict
    _describe_device_run(state)


def _describe_device_run(state: VerifyState) -> None:
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
    outputs_file = Path(need(o.device_outputs, "--device-outputs"))
    rep.notes += tagged("device-tensorrt", device_version_notes(rep, outputs_file, version))
