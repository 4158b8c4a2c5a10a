"""One graph exported: its inputs, the graph made for the target, and what was asked of it
(an engine, the check, a device bundle, GELU input ranges, the generation check).

    inputs → make_graph → [quantize] → [engine] → [check → shapes → localize] → [bundle]
           → [calibration] → [generation]
"""

from __future__ import annotations

from export_gelu.check.runners.deployed import deployed_feed
from export_gelu.options import ExportOptions, quantizing
from export_gelu.results.export import ExportPlan, GraphExport
from export_gelu.results.request import OneGraphSource, Request
from export_gelu.run import Run
from export_gelu.steps.bundle import export_bundle_job, write_device_bundle
from export_gelu.steps.calibrate import calibrate
from export_gelu.steps.check import (
    CheckContext,
    check,
    check_shapes,
    checks_shapes,
    export_tolerances,
)
from export_gelu.steps.engine import build_engine
from export_gelu.steps.generation import decode_and_compare
from export_gelu.steps.graph import make_graph
from export_gelu.steps.inputs import export_inputs
from export_gelu.steps.localize import localize_graph, localizes
from export_gelu.steps.quantize import fp32_request, quantize_graph


def export_graph(request: Request[ExportOptions], plan: ExportPlan, source: OneGraphSource,
                 run: Run, *, generation: bool = False) -> GraphExport:
    """One graph: made, written and checked (`generation`: a with-past graph is decoded
    too; a folder of several decodes once, with all of them)."""
    o = request.options
    graph_request = fp32_request(request)
    with run.step("load", name="inputs"):
        inputs = export_inputs(source, graph_request, run)
    saved = make_graph(graph_request, plan.output, inputs, run)
    quantization = None
    if quantizing(o):  # the engine, the check, the bundle and the report take its graph
        with run.step("quantize"):
            saved, quantization = quantize_graph(request, saved, inputs, run)
    engine = None
    if plan.builds_engine and quantization is None:
        with run.step("trt_build"):
            engine = build_engine(saved, inputs, o, run)
    verdict, divergence = None, None
    if o.verify and quantization is None:  # a quantized graph: the INT8/FP8 verdict instead
        tolerances = export_tolerances(saved.gelu_sites, inputs.run_precision, o)
        ctx = CheckContext(inputs, o, plan.device, engine, tolerances)
        with run.step("verify"):
            verdict = check(ctx, saved, run)
        if checks_shapes(o, inputs, verdict.parity):
            with run.step("verify", name="shapes"):
                verdict = check_shapes(ctx, saved, verdict, run)
        if localizes(verdict.parity, o.localize):
            with run.step("verify", name="localize"):
                feed = deployed_feed(inputs.feed, verdict.graph)
                divergence = localize_graph(inputs.loaded, saved.path, feed, tolerances,
                                            parity=verdict.parity, threads=o.threads,
                                            device=ctx.run_on, run=run)
    bundle = None
    if o.bundle:
        with run.step("bundle"):
            job = export_bundle_job(request.model, saved, inputs, verdict, o, run,
                                    quantization=quantization)
            bundle = write_device_bundle(job, o.bundle, run)
    calibration = None
    if o.inputs_npz and not inputs.is_onnx:
        with run.step("calibration"):
            calibration = calibrate(inputs.loaded, inputs.feeds, inputs.label, inputs.real, run)
    decoded = None
    if generation and o.verify and inputs.loaded.generation is not None:
        with run.step("verify", name="generation"):
            decoded = decode_and_compare(
                inputs.loaded, {"decoder_with_past": saved.path}, inputs.loaded, gelu=o.gelu,
                run_precision=inputs.run_precision, threads=o.threads, run=run)
    return GraphExport(request, plan, source, inputs, saved, engine, verdict, divergence,
                       bundle, calibration, decoded, tuple(run.notes), run.seconds,
                       quantization)

