"""`export-gelu verify MODEL DEPLOYED`: DEPLOYED (an ONNX file or a TensorRT engine) against
MODEL on the same inputs, through the one checker, with what else was asked (where it first
diverges, the data saved, a device bundle, GELU input ranges).

    open → load → inputs → describe → reference → check → [quantization] → [localize]
         → [save data] → [bundle] → [calibration]

A Q/DQ DEPLOYED is judged by the INT8/FP8 verdict (PyTorch at the graph's own scales), and
its first divergence is looked for against that same reference.
"""

from __future__ import annotations

from export_gelu.check.runners.deployed import feed_for
from export_gelu.flows.running import command_run
from export_gelu.options import VerifyOptions
from export_gelu.progress import Progress
from export_gelu.report.build import build_report
from export_gelu.report.report import Report
from export_gelu.report.write import write_report
from export_gelu.results.request import Request
from export_gelu.results.verify import VerifyResult
from export_gelu.run import Run
from export_gelu.steps.bundle import write_device_bundle
from export_gelu.steps.load import load_one_graph
from export_gelu.steps.localize import (
    engine_not_localized,
    judged,
    localize_graph,
    quant_localizes,
)
from export_gelu.steps.verify import (
    calibrate_verify,
    check_deployed,
    describe_deployed,
    judge_quantized,
    open_artifact,
    save_data,
    verify_bundle_job,
    verify_inputs,
    verify_reference,
)


def verify(request: Request[VerifyOptions], run: Run) -> VerifyResult:
    """DEPLOYED checked against MODEL, as `request` asks."""
    o, path = request.options, request.deployed
    assert path is not None  # (verify's request names DEPLOYED)
    with run.step("load", name="open"):
        deployed = open_artifact(path, o, run,
                                 None if request.in_memory is not None else request.model)
    with run.step("load"):
        source = load_one_graph(request, run)
    with run.step("load", name="inputs"):
        inputs = verify_inputs(source, deployed, o)
    with run.step("load", name="describe"):
        described = describe_deployed(deployed, source, run)
    with run.step("verify", name="reference"):
        reference = verify_reference(source, deployed, inputs, request, described.gelu_sites,
                                     run)
    with run.step("verify"):
        checked = check_deployed(deployed, reference, inputs, o, run)
    with run.step("verify", name="quantization"):
        quantized = judge_quantized(source, deployed, inputs, o, run)
    divergence = None
    if quant_localizes(quantized, checked.parity, o.localize):
        with run.step("verify", name="localize"):
            divergence = (engine_not_localized() if deployed.kind != "onnx" else
                          localize_graph(source.loaded, deployed.path,
                                         feed_for(deployed, inputs.feed), inputs.tolerances,
                                         parity=checked.parity, threads=o.threads,
                                         device=inputs.device.device, run=run,
                                         quantized=judged(quantized)))
    if o.save_inputs or o.save_outputs:
        with run.step("verify", name="save_data"):
            save_data(deployed, inputs, checked, o, run)
    bundle = None
    if o.bundle:
        with run.step("bundle"):
            job = verify_bundle_job(request, source, deployed, inputs, checked, reference)
            bundle = write_device_bundle(job, o.bundle, run)
    calibration = reference.calibration
    if o.calibrate and source.kind != "onnx" and calibration is None:
        with run.step("calibration"):
            calibration = calibrate_verify(source, inputs, described.gelu_sites, run)
    return VerifyResult(request, deployed, source, inputs, described, checked, divergence,
                        bundle, calibration, tuple(run.notes), run.seconds, quantized)


def verify_report(request: Request[VerifyOptions], progress: Progress | None = None) -> Report:
    """`export-gelu verify`: the check and its report, built once from the result and written
    (all or nothing)."""
    with command_run(request, progress) as run:
        return write_report(build_report(verify(request, run)), request.options, run.progress)
