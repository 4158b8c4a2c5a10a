"""`export-gelu verify MODEL --bundle DIR --device-outputs F`: what a device handed back,
judged against MODEL by the one checker as a local run would be.

    one graph:        read the device run → load → judging → check → describe
                      → [quantization: a Q/DQ graph's INT8/FP8 verdict] → [localize]
    a forms bundle:   read every form's run → load → judging → judge and choose → describe
                      → [-o: the chosen graph]
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from export_gelu.check.runners.deployed import feed_for
from export_gelu.flows.running import command_run
from export_gelu.options import VerifyOptions, recorded_forms
from export_gelu.progress import Progress
from export_gelu.report.build import build_report
from export_gelu.report.report import Report
from export_gelu.report.write import write_report
from export_gelu.results.device import (
    DeviceFormsResult,
    DeviceJudging,
    DeviceRun,
    DeviceVerifyResult,
    FormsRun,
)
from export_gelu.results.request import OneGraphSource, Request
from export_gelu.run import Run
from export_gelu.steps.device import (
    describe_device_run,
    device_check,
    device_judging,
    device_quantized,
    read_device_run,
    require_model_file,
)
from export_gelu.steps.device_forms import (
    describe_forms_run,
    forms_check,
    read_forms_run,
    write_chosen,
)
from export_gelu.steps.load import load_one_graph
from export_gelu.steps.localize import judged, localize_device, quant_localizes

Ran = TypeVar("Ran", DeviceRun, FormsRun)


def _read_and_load(request: Request[VerifyOptions], run: Run,
                   read: Callable[[Request[VerifyOptions]], Ran]
                   ) -> tuple[Ran, OneGraphSource, DeviceJudging]:
    """What both device checks start with: MODEL there, the device's run read (`read`),
    MODEL loaded, and how the device's outputs are judged."""
    require_model_file(request.model)
    with run.step("load", name="device_run"):
        ran = read(request)
    with run.step("load"):
        source = load_one_graph(request, run)
    with run.step("load", name="inputs"):
        judging = device_judging(request.options, ran.manifest, ran.deployed)
    return ran, source, judging


def device_verify(request: Request[VerifyOptions], run: Run) -> DeviceVerifyResult:
    """One graph's device run against MODEL."""
    o = request.options
    device_run, source, judging = _read_and_load(request, run, read_device_run)
    with run.step("verify"):
        parity = device_check(source, device_run, judging, o, run)
        ran = describe_device_run(device_run, o, run)
    with run.step("verify", name="quantization"):
        quantized = device_quantized(source, device_run, o, run)
    divergence = None
    if quant_localizes(quantized, parity, o.localize):
        with run.step("verify", name="localize"):
            deployed = device_run.deployed
            divergence = localize_device(
                source.loaded, deployed.path, feed_for(deployed, device_run.feeds[0]),
                judging.tolerances, device_run.module_outputs,
                device_outputs=device_run.outputs[0], parity=parity, threads=o.threads,
                device=judging.device.device, run=run, quantized=judged(quantized))
    return DeviceVerifyResult(request, device_run, source, judging, parity, ran, divergence,
                              tuple(run.notes), run.seconds, quantized)


def device_forms_verify(request: Request[VerifyOptions], run: Run) -> DeviceFormsResult:
    """A bundle of GELU forms' device runs: each judged against MODEL, one chosen (and
    written with -o)."""
    o = request.options
    forms_run, source, judging = _read_and_load(request, run, read_forms_run)
    with run.step("verify"):
        choice = forms_check(source, forms_run, judging, o, run)
        ran = describe_forms_run(forms_run, choice.table, run)
    written = None
    if o.output:
        with run.step("verify", name="write"):
            written = write_chosen(forms_run, choice.chosen, o.output, run)
    return DeviceFormsResult(request, forms_run, source, judging, choice, ran, written,
                             tuple(run.notes), run.seconds)


def device_report(request: Request[VerifyOptions], progress: Progress | None = None) -> Report:
    """`verify --device-outputs`: the judgement of a device's run (of one graph, or of a
    bundle of GELU forms) and its report, built once and written (all or nothing)."""
    with command_run(request, progress) as run:
        result = (device_forms_verify(request, run) if recorded_forms(request.options)
                  else device_verify(request, run))
        return write_report(build_report(result), request.options, run.progress)
