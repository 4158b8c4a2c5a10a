"""The steps of `export-gelu verify MODEL DEPLOYED`: the deployed artifact (an ONNX file run in
ONNX Runtime, or a TensorRT engine) against the original model on the same inputs, through the
one checker; its latency beside the model's; the GELU input ranges."""

from __future__ import annotations

import importlib.util
from collections import Counter
from pathlib import Path

import onnx

from export_gelu.check.calibration import Calibration
from export_gelu.check.checker import CheckJob, run_check
from export_gelu.check.inputs.input_resolver import InputRequest, resolve_inputs
from export_gelu.check.inputs.saved_data import save_polygraphy_inputs, save_polygraphy_outputs
from export_gelu.check.reference.recorded import (
    IN_TURN_NOTE,
    fits_beside_reference,
    record_reference,
)
from export_gelu.check.reference.runner import model_runner
from export_gelu.check.runners.deployed import Deployed, deployed_runner, feed_for, open_deployed
from export_gelu.check.runners.devices import DeviceChoice, ready_runners, resolve_device
from export_gelu.errors import BadInputError
from export_gelu.exporter.model_files.detect import refuse_missing
from export_gelu.notes import Note
from export_gelu.options import VerifyOptions
from export_gelu.parse_check import model_opset, op_counts
from export_gelu.passes.onnx import find_sites
from export_gelu.passes.onnx.plugin_math import STANDIN_NOTE, plugin_nodes
from export_gelu.passes.sites import GeluSite
from export_gelu.quantize.read_qdq import is_qdq_graph
from export_gelu.results.quantize import QdqJudged
from export_gelu.results.request import OneGraphSource, Request
from export_gelu.results.verify import (
    DeployedCheck,
    Described,
    Reference,
    VerifyInputs,
)
from export_gelu.run import Run
from export_gelu.steps.bundle import BundleJob
from export_gelu.steps.calibrate import calibrate
from export_gelu.steps.quant_verdict import judge_deployed
from export_gelu.tolerances import resolve_tolerances


def open_artifact(path: Path, options: VerifyOptions, run: Run, model: Path | None = None
                  ) -> Deployed:
    """DEPLOYED → what it takes and gives, and the precision it runs in. DEPLOYED and MODEL
    (`model`; None: handed over in memory) missing: exit 2 before any progress line."""
    refuse_missing(path)
    if model is not None:
        refuse_missing(model)
    run.say(f"opening {path}")
    deployed = open_deployed(path)
    if options.bundle and deployed.kind != "onnx":
        raise BadInputError("--bundle: DEPLOYED must be the ONNX graph (a bundle carries the "
                            "graph; the device builds its own engine)")
    if deployed.kind == "onnx":
        _require_onnxruntime()
    return deployed


def _require_onnxruntime() -> None:
    """An ONNX DEPLOYED runs in ONNX Runtime: without it, the ImportError errors.py maps to
    exit 3 ("this command needs onnxruntime") now, before MODEL is loaded and run."""
    if importlib.util.find_spec("onnxruntime") is None:
        raise ModuleNotFoundError("No module named 'onnxruntime'", name="onnxruntime")


def _device(requested: str | None, deployed: Deployed) -> DeviceChoice:
    """Where the reference (and ONNX Runtime) runs; an engine runs on the GPU, and the
    reference goes there with it when it can."""
    if deployed.kind != "engine":
        return resolve_device(requested)
    import torch

    device = requested or ("cuda" if torch.cuda.is_available() else "cpu")
    return DeviceChoice(device, device, "TensorRT engine")


def verify_inputs(source: OneGraphSource, deployed: Deployed, options: VerifyOptions
                  ) -> VerifyInputs:
    """The feeds (as the model takes them; `feed_for` maps them onto DEPLOYED), the precision
    and its tolerances, the device."""
    o = options
    given = resolve_inputs(source.loaded, InputRequest(
        specs=tuple(o.inputs), inputs_file=Path(o.inputs_file) if o.inputs_file else None,
        json_ok=True, shape_source=deployed.path if deployed.kind == "onnx" else None))
    precision = o.precision or deployed.precision
    return VerifyInputs(tuple(given.feeds), given.source, given.real, dict(given.generated),
                        precision,
                        "given with --precision" if o.precision else deployed.precision_why,
                        resolve_tolerances(precision, atol=o.atol, rtol=o.rtol),
                        _device(o.device, deployed))


def _plugin_notes(graph: onnx.ModelProto, which: str) -> list[str]:
    return [Note(STANDIN_NOTE.format(which=which), "plugin-standin")] if plugin_nodes(graph) \
        else []


def describe_deployed(deployed: Deployed, source: OneGraphSource, run: Run) -> Described:
    """DEPLOYED's opset, ops and GELU sites (what it actually computes)."""
    described = Described()
    if deployed.kind == "onnx":
        graph = onnx.load(str(deployed.path), load_external_data=False)
        described = Described(model_opset(graph), dict(op_counts(graph)), find_sites(graph))
        run.add_notes(_plugin_notes(graph, "DEPLOYED"))
    if source.kind == "onnx":
        run.add_notes(_plugin_notes(onnx.load(str(source.loaded.path), load_external_data=False),
                                    "MODEL (the reference)"))
    return described


def verify_reference(source: OneGraphSource, deployed: Deployed, inputs: VerifyInputs,
                     request: Request[VerifyOptions], sites: list[GeluSite], run: Run
                     ) -> Reference:
    """The reference runner; a big DEPLOYED is checked with one model in memory at a time:
    the reference runs (and is timed) first, recorded, and freed (the GELU input ranges,
    which need the model, recorded before it goes)."""
    o, loaded = request.options, source.loaded
    dep_feeds = [feed_for(deployed, f) for f in inputs.feeds]
    reference = model_runner(loaded, dep_feeds[0], deployed.outputs, o.threads,
                             inputs.device.device, onnx_name="reference-onnx")
    if deployed.kind != "onnx" or fits_beside_reference(deployed.path):
        return Reference(reference)
    calibration = None
    if o.calibrate and source.kind != "onnx":  # it needs the model: before it goes
        calibration = calibrate_verify(source, inputs, sites, run)
    run.say(f"running {reference.name} before loading DEPLOYED (a big model)")
    recorded = record_reference(reference, dep_feeds, o.iterations, o.warmup)
    loaded.module = loaded.exported = None  # one model in memory at a time
    import gc

    gc.collect()
    run.note(IN_TURN_NOTE.format(reference=recorded.name, output="DEPLOYED"),
             "one-model-at-a-time")
    return Reference(recorded, calibration)


def check_deployed(deployed: Deployed, reference: Reference, inputs: VerifyInputs,
                   options: VerifyOptions, run: Run) -> DeployedCheck:
    """Parity of DEPLOYED (every ONNX Runtime provider for the device, or the engine) against
    the reference on every feed, and latency of both, through the one checker."""
    o = options
    dep_feeds = [feed_for(deployed, f) for f in inputs.feeds]
    runs = ([] if deployed.kind == "engine" else
            ready_runners(deployed.path, inputs.device.device, inputs.run_precision, o.threads))
    runners = ([deployed_runner(deployed, threads=o.threads)] if deployed.kind == "engine"
               else [r.runner for r in runs if r.status == "ready" and r.runner is not None])
    ref = reference.runner
    run.say(f"running {len(dep_feeds)} feed(s) through {ref.name} and {runners[0].name}")
    try:
        outcome = run_check(CheckJob(ref, runners, dep_feeds, inputs.tolerances,
                                     o.iterations, o.warmup, precision=inputs.run_precision),
                            run.progress)
    except (RuntimeError, ValueError, TypeError) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
        raise BadInputError(f"running MODEL and DEPLOYED on these inputs failed: {first}") from exc
    return DeployedCheck(outcome.verdict, outcome.latency, tuple(runs), outcome.by_runner)


def judge_quantized(source: OneGraphSource, deployed: Deployed, inputs: VerifyInputs,
                    options: VerifyOptions, run: Run) -> QdqJudged | None:
    """A Q/DQ DEPLOYED (`is_qdq_graph`) judged by the INT8/FP8 verdict: against PyTorch at the
    graph's own scales (steps/quant_verdict.py), on the run's feeds; None for a float graph
    or an engine. An fp32 tolerance says nothing of it: the report's parity says skipped."""
    if deployed.kind != "onnx":
        return None
    graph = onnx.load(str(deployed.path))
    if not is_qdq_graph(graph):
        return None
    run.say(f"judging the Q/DQ graph against PyTorch at its scales on {len(inputs.feeds)} "
            "feed(s)")
    judged = judge_deployed(source.loaded, graph, inputs.feeds, options.threads)
    if judged.verdict is None:
        run.note(f"DEPLOYED is a {judged.graph.precision} Q/DQ graph: not judged at its scales "
                 f"({judged.not_judged}); parity against MODEL at fp32 tolerances stands",
                 "quantized-not-judged")
    return judged


def save_data(deployed: Deployed, inputs: VerifyInputs, check: DeployedCheck,
              options: VerifyOptions, run: Run) -> None:
    """`--save-inputs` / `--save-outputs`: the feeds and both runners' outputs in polygraphy's
    JSON formats."""
    o = options
    if o.save_inputs:
        save_polygraphy_inputs([feed_for(deployed, f) for f in inputs.feeds], o.save_inputs)
        run.note(f"inputs saved to {o.save_inputs} (polygraphy run --load-inputs)",
                 "saved-inputs")
    if o.save_outputs:
        parity = check.parity
        save_polygraphy_outputs(parity.run_results, o.save_outputs)
        run.note(f"outputs of {' and '.join(parity.runners)} saved to {o.save_outputs} "
                 "(polygraphy run --load-outputs)", "saved-outputs")


def verify_bundle_job(request: Request[VerifyOptions], source: OneGraphSource,
                      deployed: Deployed, inputs: VerifyInputs, check: DeployedCheck,
                      reference: Reference) -> BundleJob:
    """`verify MODEL DEPLOYED.onnx --bundle DIR`: the bundle of a graph verified here, for the
    TensorRT version `--target` names."""
    return BundleJob(request.model, deployed.path, source.loaded, request.profile,
                     feed_for(deployed, inputs.feed), check.parity, lambda: reference.runner,
                     inputs.run_precision, inputs.tolerances)


def calibrate_verify(source: OneGraphSource, inputs: VerifyInputs, sites: list[GeluSite],
                     run: Run) -> Calibration:
    """The GELU input ranges of the model on the feeds, and what they say about the forms
    DEPLOYED computes (`sites`)."""
    calibration = calibrate(source.loaded, inputs.feeds, inputs.label, inputs.real, run)
    run.add_notes(_calibration_notes(calibration, inputs.run_precision))
    run.add_notes(_form_notes(Counter(s.kind for s in calibration.sites),
                              Counter(s.kind for s in sites)))
    return calibration


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
