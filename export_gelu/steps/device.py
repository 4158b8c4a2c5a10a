"""The steps of `export-gelu verify MODEL --bundle DIR --device-outputs outputs.json
[--device-times times.json]`: what a device produced, judged against the model by the one
checker, with the verdict, per-output errors, exit codes and report of a local run (the
device's recorded outputs stand in for a runner)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import onnx

from export_gelu.check.checker import CheckJob, run_check
from export_gelu.check.inputs.input_resolver import InputRequest, resolve_inputs
from export_gelu.check.latency import Latency, summarize
from export_gelu.check.reference.recorded import RecordedRunner
from export_gelu.check.reference.runner import model_runner
from export_gelu.check.runners.deployed import Deployed, feed_for, open_deployed
from export_gelu.check.runners.devices import resolve_device
from export_gelu.check.runners.torch_runner import dtype_metadata
from export_gelu.check.verdict.parity import ParityResult
from export_gelu.device.outputs import read_device_outputs, read_device_times
from export_gelu.device.returned import (
    DEVICE_RUNNER,
    cast_to_graph,
    check_pairing,
    check_shapes,
    device_tensorrt,
    from_bundle,
    output_dtypes,
)
from export_gelu.device.script import WARMUP_MS
from export_gelu.errors import BadInputError
from export_gelu.options import VerifyOptions
from export_gelu.quantize import CALIBRATION_CACHE, QDQ
from export_gelu.quantize.read_qdq import is_qdq_graph
from export_gelu.results.device import DeviceJudging, DeviceRun
from export_gelu.results.quantize import QdqJudged
from export_gelu.results.request import OneGraphSource, Request
from export_gelu.run import Run
from export_gelu.steps.quant_verdict import judge_deployed
from export_gelu.steps.quantize import cache_simulation
from export_gelu.tolerances import resolve_tolerances

#: The largest calibration cache read back (a line per tensor: far below this).
CACHE_BYTES = 64 << 20
#: trtexec's precision in what it prints.
TRTEXEC_ROUNDING = ("trtexec prints values with 6 significant digits: up to 5e-6 relative "
                    "rounding, far below any default rtol")


def require_model_file(model: Path) -> None:
    """MODEL is a file (the flags' combination, a bundle or DEPLOYED with --inputs, was
    checked by options.validate)."""
    if not model.is_file():
        raise BadInputError(f"{model}: no such file")


def read_device_run(request: Request[VerifyOptions]) -> DeviceRun:
    """The bundle (or DEPLOYED and --inputs), the graph the device ran, and what it wrote."""
    o = request.options
    manifest: dict[str, Any] = {}
    if o.bundle:
        manifest, graph = from_bundle(Path(o.bundle), request.model, request.deployed)
        asked = InputRequest(bundle=Path(o.bundle))
    else:  # options.validate: DEPLOYED and --inputs are given
        assert request.deployed is not None and o.inputs_file is not None
        graph = request.deployed
        asked = InputRequest(inputs_file=Path(o.inputs_file), json_ok=True)
    given = resolve_inputs(None, asked)  # the device's feeds, as DEPLOYED takes them
    deployed = open_deployed(graph)
    if deployed.kind != "onnx":
        raise BadInputError(f"{graph}: with --device-outputs, DEPLOYED is the ONNX graph the "
                            "device built its engine from")
    assert o.device_outputs is not None  # (a device verify)
    outputs, fmt = read_device_outputs(o.device_outputs)
    marked = set(manifest.get("localize", {}).get("outputs", []))
    module_outputs = {}
    if marked:  # the marked graph's run (run_on_device.sh localize): its extra tensors aside
        module_outputs = {n: a for n, a in outputs[0].items() if n in marked}
        outputs = [type(it)((n, a) for n, a in it.items() if n not in marked) for it in outputs]
    check_pairing(outputs, deployed.outputs, Path(o.device_outputs), len(given.feeds))
    times = None
    if o.device_times:
        warmup = manifest.get("trtexec", {}).get("warmup_ms", WARMUP_MS)
        times = read_device_times(o.device_times, warmup)
    return DeviceRun(manifest, deployed, tuple(given.feeds), given.source, fmt,
                     cast_to_graph(outputs, output_dtypes(graph)), module_outputs, times)


def device_judging(options: VerifyOptions, manifest: dict[str, Any], deployed: Deployed
                   ) -> DeviceJudging:
    """The precision and tolerances (the bundle's, unless --precision/--atol/--rtol say
    otherwise) and the device the reference runs on (--device)."""
    o = options
    precision = o.precision or manifest.get("precision") or deployed.precision
    recorded = None if o.precision else manifest.get("tolerances")
    tolerances = resolve_tolerances(precision, atol=o.atol, rtol=o.rtol, recorded=recorded)
    note = ("given with --precision" if o.precision else
            "the bundle's" if manifest else deployed.precision_why)
    return DeviceJudging(precision, note, tolerances, resolve_device(o.device))


def device_check(source: OneGraphSource, device_run: DeviceRun, judging: DeviceJudging,
                 options: VerifyOptions, run: Run) -> ParityResult:
    """The reference on the feeds the device ran, against the device's recorded outputs."""
    deployed = device_run.deployed
    feeds = [feed_for(deployed, f) for f in device_run.feeds]
    reference = model_runner(source.loaded, feeds[0], deployed.outputs, options.threads,
                             judging.device.device, onnx_name="reference-onnx")
    device = RecordedRunner(DEVICE_RUNNER, feeds, device_run.outputs,
                            dtype_metadata(dict(feeds[0])))
    run.say(f"running {reference.name} on {len(feeds)} feed(s)")
    try:
        outcome = run_check(CheckJob(reference, [device], feeds, judging.tolerances))
    except (RuntimeError, ValueError, TypeError) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
        raise BadInputError(f"running MODEL on these inputs failed: {first}") from exc
    assert options.device_outputs is not None  # (a device verify)
    check_shapes(outcome.verdict, Path(options.device_outputs))
    return outcome.verdict


def device_quantized(source: OneGraphSource, device_run: DeviceRun, options: VerifyOptions,
                     run: Run) -> QdqJudged | None:
    """A Q/DQ graph's device outputs judged by the INT8/FP8 verdict: against PyTorch at the
    graph's own scales on the feeds the device ran (steps/quant_verdict.py). A TensorRT 7.x
    INT8 bundle (an fp32 graph and its calibration cache) is judged the same way, against
    the graph export judged: its cache's scales as Q/DQ (`cache_simulation`). None for a
    float graph."""
    deployed = device_run.deployed
    graph = onnx.load(str(deployed.path))
    route = QDQ
    if not is_qdq_graph(graph):
        cache = _bundle_cache(device_run.manifest, options)
        if cache is None:
            return None
        run.say("rebuilding what TensorRT computes from the bundle's graph and calibration "
                "cache (Q/DQ at the cache's scales)")
        graph, route = cache_simulation(graph, cache), CALIBRATION_CACHE
    feeds = [feed_for(deployed, f) for f in device_run.feeds]
    run.say(f"judging the device's outputs against PyTorch at the graph's scales on "
            f"{len(feeds)} feed(s)")
    judged = judge_deployed(source.loaded, graph, feeds, options.threads,
                            got=list(device_run.outputs))
    return dataclasses.replace(judged, graph=dataclasses.replace(judged.graph, route=route))


def _bundle_cache(manifest: dict[str, Any], options: VerifyOptions) -> str | None:
    """The TensorRT 7.x calibration cache of an INT8 bundle (its fp32 graph is built with
    it), unchanged since the bundle was written; None for a float bundle."""
    entry = manifest.get("calibration_cache")
    if manifest.get("precision") != "int8" or not isinstance(entry, dict) or not options.bundle:
        return None
    return bundle_cache_text(Path(options.bundle), entry, "calibration_cache.file")


def bundle_cache_text(bundle: Path, entry: dict[str, Any], field: str) -> str:
    """The text of the calibration cache the manifest's `entry` (file, sha256) names: inside
    the bundle, unchanged since it was written (else exit 2 naming `field`), read within
    CACHE_BYTES."""
    from export_gelu.device.returned import bundle_folder, checked_file

    rel = checked_file(bundle, entry.get("file"), entry.get("sha256"), field)
    return bundle_folder(bundle).read_bytes(rel, max_bytes=CACHE_BYTES).decode(
        "utf-8", errors="replace")


def device_latency(times: tuple[list[float], int]) -> Latency:
    """The device's GPU compute times (ms per inference, warm-ups dropped) as a latency."""
    samples, dropped = times
    return summarize([t / 1e3 for t in samples], dropped,
                     "trtexec computeMs (GPU compute per inference)")


def describe_device_run(device_run: DeviceRun, options: VerifyOptions, run: Run) -> str | None:
    """What the notes say of a device run: trtexec's rounding, warm-ups dropped, the bundle
    read, the TensorRT that ran it (returned: trtexec.log's version, None: not said)."""
    from export_gelu.device.returned import version_notes
    from export_gelu.notes import tagged

    if device_run.outputs_format == "trtexec":
        run.note(TRTEXEC_ROUNDING, "trtexec-rounding")
    if device_run.times is not None and device_run.times[1]:
        run.note(f"{device_run.times[1]} warm-up inference(s) dropped from "
                 f"{options.device_times} (trtexec before 8.6 exports them too)",
                 "warmups-dropped")
    manifest = device_run.manifest
    if manifest:
        run.note(f"bundle for {manifest.get('target')} (TensorRT {manifest.get('tensorrt')}); "
                 f"outputs read from {device_run.outputs_format} JSON", "bundle-read")
    assert options.device_outputs is not None  # (a device verify)
    outputs = Path(options.device_outputs)
    ran = device_tensorrt(outputs)
    if ran is not None:
        run.add_notes(tagged("device-tensorrt", version_notes(outputs, ran, device_run.version)))
    return ran
