"""An export's check: the written graph against the reference through the one checker
(`check.checker.run_check`), on every runner that can run it here (ONNX Runtime's providers,
a TensorRT engine built here); an fp16 graph's overflow sites kept in fp32 and checked again
(steps/islands.py); parity at each `--dynamic` size."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING

import onnx

from export_gelu.check.checker import CheckJob, run_check
from export_gelu.check.inputs.input_resolver import InputRequest, resolve_inputs
from export_gelu.check.reference.recorded import IN_TURN_NOTE, record_reference
from export_gelu.check.reference.runner import reference_runner
from export_gelu.check.runners.deployed import deployed_feed
from export_gelu.check.runners.devices import DeviceChoice, ProviderRun, ready_runners
from export_gelu.check.runners.ort_runner import ort_runner
from export_gelu.check.runners.trt_runner import trt_runner
from export_gelu.check.verdict.parity import ParityResult, skipped
from export_gelu.errors import BadInputError
from export_gelu.notes import tagged
from export_gelu.options import RunOptions
from export_gelu.passes.onnx.plugin_math import STANDIN_NOTE, plugin_nodes
from export_gelu.passes.sites import GeluSite
from export_gelu.results.export import (
    Engine,
    ExportInputs,
    Feed,
    GraphCheck,
    SavedGraph,
    ShapeCheck,
    Verdict,
)
from export_gelu.run import Run
from export_gelu.steps.islands import finds_islands, fix_overflow
from export_gelu.tolerances import Tolerances, resolve_tolerances

#: Why a bf16 graph is not run in ONNX Runtime, for parity and for the generation check.
BF16_NOT_RUN = "bf16 graphs are not checked in ONNX Runtime (numpy has no bf16)"

if TYPE_CHECKING:
    from polygraphy.backend.base import BaseRunner


def ort_missing() -> str | None:
    """None when onnxruntime imports; else why not, in words (the run degrades, not crashes)."""
    try:
        import onnxruntime  # noqa: F401
    except ImportError as exc:
        return f"onnxruntime is not installed ({type(exc).__name__})"
    return None


def export_tolerances(sites: list[GeluSite], precision: str, options: RunOptions) -> Tolerances:
    """An export's tolerances: by `precision`, widened by the GELU forms' added error
    (`sites`), unless `--atol`/`--rtol` say otherwise."""
    added = max((s.added_max_error for s in sites), default=0.0)
    return resolve_tolerances(precision, added_error=added, atol=options.atol, rtol=options.rtol)


@dataclass(frozen=True)
class CheckContext:
    """What the check of one written graph needs besides the graph: the inputs (feed, models,
    precision), the options, the device, the engine built here (None: none), the tolerances."""

    inputs: ExportInputs
    options: RunOptions
    device: DeviceChoice | None
    engine: Engine | None
    tolerances: Tolerances

    @property
    def run_on(self) -> str:
        return self.device.device if self.device else "cpu"


def _reference(ctx: CheckContext, feed: Feed, graph: onnx.ModelProto) -> BaseRunner:
    return reference_runner(ctx.inputs.loaded, ctx.inputs.held.reference, feed, graph,
                            ctx.options.threads, ctx.run_on)


def _record_if_big(ctx: CheckContext, saved: SavedGraph, reference: BaseRunner | None,
                   run: Run) -> BaseRunner | None:
    """A big model's reference run (and timed) first and recorded; the models are freed then,
    so verification holds the weights once (one model in memory at a time). Not when the
    reference is needed again (parity at several shapes, calibration)."""
    inputs, o = ctx.inputs, ctx.options
    keep = bool(inputs.dynamic.ranged or (getattr(o, "inputs_npz", None) and not inputs.is_onnx))
    if reference is None or saved.weights is None or keep:
        return reference
    run.say(f"running the reference ({reference.name}) before loading the output")
    feed = deployed_feed(inputs.feed, saved.graph)
    recorded = record_reference(reference, [feed], o.iterations, o.warmup)
    run.note(IN_TURN_NOTE.format(reference=recorded.name, output="the output"),
             "one-model-at-a-time")
    inputs.held.free()
    return recorded


def _ort_runs(ctx: CheckContext, saved: SavedGraph) -> list[ProviderRun] | str:
    """The ONNX Runtime runners for the output, or why the graph cannot run in it here."""
    try:
        return ready_runners(saved.path, ctx.run_on, ctx.inputs.run_precision,
                             ctx.options.threads)
    except BadInputError as exc:  # the file is written and valid ONNX: say what ORT lacks
        lacking = no_kernel(exc)
        if lacking is None:
            raise
        return lacking


def no_kernel(exc: BaseException) -> str | None:
    """Why a written graph does not run, when ONNX Runtime (CPU) has no kernel for one of its
    ops (NOT_IMPLEMENTED); None for any other failure."""
    if "NOT_IMPLEMENTED" not in str(exc):
        return None
    return ("ONNX Runtime (CPU) has no kernel for an op of the written graph: "
            f"{str(exc).split('NOT_IMPLEMENTED : ')[-1]}")


def _check_graph(ctx: CheckContext, saved: SavedGraph, graph: onnx.ModelProto,
                reference: BaseRunner | None, run: Run) -> GraphCheck:
    """Parity (and latency) of the written graph (`graph`: as it is now) in ONNX Runtime and
    in the engine built here, against the reference, through the one checker."""
    o, inputs = ctx.options, ctx.inputs
    feed = deployed_feed(inputs.feed, graph)
    if plugin_nodes(graph):
        run.note(STANDIN_NOTE.format(which="the output"), "plugin-standin")
    runs = [] if inputs.run_precision == "bf16" else _ort_runs(ctx, saved)
    if isinstance(runs, str):
        return GraphCheck(skipped(runs))
    runners = [r.runner for r in runs if r.status == "ready" and r.runner is not None]
    if ctx.engine is not None:
        runners.append(trt_runner(ctx.engine.engine))
    if not runners:
        return GraphCheck(skipped(BF16_NOT_RUN))
    run.say(f"checking parity ({', '.join(r.name for r in runners)})")
    outcome = run_check(CheckJob(reference, runners, [feed], ctx.tolerances, o.iterations,
                                 o.warmup, precision=inputs.run_precision), run.progress)
    if inputs.cast:
        run.add_notes(tagged("cast-down-error", [inputs.cast.measured_note(outcome.verdict)]))
    return GraphCheck(outcome.verdict, outcome.latency, tuple(runs), outcome.by_runner)


def check(ctx: CheckContext, saved: SavedGraph, run: Run) -> Verdict:
    """The written graph against the reference (or why that was skipped); an fp16 graph's
    overflow sites kept in fp32 and checked again."""
    inputs = ctx.inputs
    no_ort = ort_missing()  # degrade: without onnxruntime, say what was not checked
    no_ref, reference = None, None
    if not (no_ort and inputs.is_onnx):
        try:
            reference = _reference(ctx, inputs.feed, saved.graph)
        except BadInputError as exc:  # an input ORT refuses: the output is written, say so
            if not inputs.is_onnx:
                raise
            no_ref = str(exc).split(": ", 1)[-1]
    reference = _record_if_big(ctx, saved, reference, run)
    if no_ort:
        return Verdict(GraphCheck(skipped(
            f"parity and latency skipped: {no_ort}; pip install 'export-gelu[cpu]' (or "
            "'export-gelu[gpu]' on a CUDA machine)")), saved.graph, reference)
    if no_ref:
        return Verdict(GraphCheck(skipped(
            f"the input file cannot run as the reference ({no_ref}); the written graph, which "
            "export-gelu repaired, was not compared with it")), saved.graph, reference)
    checked = _check_graph(ctx, saved, saved.graph, reference, run)
    graph = saved.graph
    if finds_islands(saved, inputs.run_precision, checked.parity, engine=ctx.engine):
        fixed = fix_overflow(saved.path, inputs.feed, run)
        if fixed is not None:
            graph = fixed.graph
            run.say(f"verifying again with {len(fixed.islands)} fp32 island(s)")
            again = _check_graph(ctx, saved, graph, reference, run)
            if again.parity.status == "skipped":  # (the earlier numbers stand beside it)
                again = GraphCheck(again.parity, checked.latency, checked.providers,
                                   checked.by_runner)
            again.parity.islands = list(fixed.islands)
            run.note(fixed.note(checked.parity), "fp16-islands")
            checked = again
    return Verdict(checked, graph, reference)


def checks_shapes(options: RunOptions, inputs: ExportInputs, parity: ParityResult) -> bool:
    """Parity at the `--dynamic` sizes applies: ranged dims and a main check that ran."""
    plan = inputs.dynamic
    return bool(plan.ranged and plan.templates and not ort_missing()
                and parity.status != "skipped")


def check_shapes(ctx: CheckContext, saved: SavedGraph, verdict: Verdict, run: Run) -> Verdict:
    """Parity at MIN, OPT, an odd size and MAX of the `--dynamic` ranges: ONNX Runtime (and
    the engine) against a fresh reference at each, on inputs made by role
    (exporter/inputs/generated.py); a failure at any size fails the run, naming the size and
    the generated inputs."""
    plan, inputs = ctx.inputs.dynamic, ctx.inputs
    run.say("checking parity at every size of the --dynamic ranges")
    shapes: list[ShapeCheck] = []
    failed: list[tuple[str, ParityResult]] = []
    for label, sizes in plan.points():
        given = resolve_inputs(inputs.loaded, InputRequest.at_size(plan.specs(sizes), label))
        feed, made = given.feed, given.generated
        dep_feed = deployed_feed(feed, verdict.graph)
        runners = [ort_runner(saved.path, threads=ctx.options.threads, name="onnxruntime")]
        if ctx.engine is not None:
            runners.append(trt_runner(ctx.engine.engine))
        outcome = run_check(CheckJob(_reference(ctx, feed, verdict.graph), runners, [dep_feed],
                                     ctx.tolerances))
        for name, result in outcome.by_runner.items():
            if result.status == "failed":
                where = f"{name} at {label} ({_sizes_text(sizes)})"
                failed.append((where + (f", on generated {', '.join(made)}" if made else ""),
                               result))
        shapes.append(ShapeCheck(label, dict(sizes), {n: list(a.shape) for n, a in
                                                      dep_feed.items()}, dict(made),
                                 dict(outcome.by_runner)))
    checked = verdict.checked
    if failed and checked.parity.status != "failed":
        where, result = failed[0]
        checked = GraphCheck(dataclasses.replace(result, reason=f"{where}: {result.reason}"),
                             checked.latency, checked.providers, checked.by_runner)
    return Verdict(checked, verdict.graph, verdict.reference, tuple(shapes))


def _sizes_text(sizes: dict[str, int]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sizes.items())
