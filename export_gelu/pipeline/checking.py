"""The check stages: the deployed graph against the reference, through the one checker
(`check.checker.run_check`), on every runner that can run it here (ONNX Runtime's providers,
a TensorRT engine built here), at the main feed and at each `--dynamic` shape."""

from __future__ import annotations

import gc
from typing import TYPE_CHECKING, Any

from export_gelu.check.checker import CheckJob, CheckOutcome, run_check
from export_gelu.check.deployed import deployed_feed
from export_gelu.check.devices import ProviderRun, ready_runners
from export_gelu.check.input_resolver import InputRequest, resolve_inputs
from export_gelu.check.ort_runner import ort_runner
from export_gelu.check.parity import ParityResult, skipped
from export_gelu.check.recorded import IN_TURN_NOTE, record_reference
from export_gelu.check.reference import reference_runner
from export_gelu.check.trt_runner import trt_runner
from export_gelu.errors import BadInputError
from export_gelu.notes import Note, tagged
from export_gelu.passes.onnx.plugin_math import STANDIN_NOTE, plugin_nodes
from export_gelu.pipeline.islands import finds_islands, fix_overflow
from export_gelu.pipeline.stage import stage_io
from export_gelu.pipeline.state import AnyState, ExportState, Feed, need
from export_gelu.tolerances import Tolerances, resolve_tolerances

if TYPE_CHECKING:
    from polygraphy.backend.base import BaseRunner


def ort_missing() -> str | None:
    """None when onnxruntime imports; else why not, in words (the run degrades, not crashes)."""
    try:
        import onnxruntime  # noqa: F401
    except ImportError as exc:
        return f"onnxruntime is not installed ({type(exc).__name__})"
    return None


def export_tolerances(state: AnyState, precision: str | None = None) -> Tolerances:
    """The export's tolerances: by precision (the run's, unless `precision` names another),
    widened by the GELU forms' added error."""
    added = max((s.added_max_error for s in state.gelu_sites), default=0.0)
    o = state.options
    return resolve_tolerances(precision or state.run_precision, added_error=added,
                              atol=o.atol, rtol=o.rtol)


def _reference(state: ExportState, feed: Feed) -> BaseRunner:
    run_on = state.device.device if state.device else "cpu"
    return reference_runner(state.loaded, state.reference_module, feed, state.graph,
                            state.options.threads, run_on)


def _record_if_big(state: ExportState) -> None:
    """A big model's reference run (and timed) first and recorded; the model is freed then,
    so verification holds the weights once (one model in memory at a time). Not when the
    reference is needed again (parity at several shapes, calibration)."""
    o, rep = state.options, state.report
    keep = bool(need(state.dynamic, "dynamic").ranged or (o.inputs_npz and not state.is_onnx))
    if state.reference is None or state.weights is None or keep:
        return
    state.progress.step(f"running the reference ({state.reference.name}) before loading the "
                        "output")
    feed = deployed_feed(state.feed, state.graph)
    state.reference = record_reference(state.reference, [feed], o.iterations, o.warmup)
    rep.notes.append(Note(IN_TURN_NOTE.format(reference=state.reference.name,
                                              output="the output"), "one-model-at-a-time"))
    state.reference_module = None
    assert state.loaded is not None  # the reference was made from it
    state.loaded.module = state.loaded.exported = None
    state.module = state.program = None  # the exported module and its captured program
    if state.cast:
        state.cast.reference = None  # the float64 original of a --cast-down export
    gc.collect()


def _providers_table(runs: list[ProviderRun], outcome: CheckOutcome) -> dict[str, Any]:
    table = {r.name: r.to_json() for r in runs}
    ready = [r for r in runs if r.status == "ready"]
    for i, run in enumerate(ready):
        result = outcome.by_runner[run.name]
        table[run.name]["parity"] = result.status if i == 0 else result.to_json()
    return table


def _ort_runs(state: ExportState) -> list[ProviderRun] | str:
    """The ONNX Runtime runners for the output, or why the graph cannot run in it here."""
    run_on = state.device.device if state.device else "cpu"
    try:
        return ready_runners(need(state.output, "output"), run_on, state.run_precision,
                             state.options.threads)
    except BadInputError as exc:  # the file is written and valid ONNX: say what ORT lacks
        if "NOT_IMPLEMENTED" not in str(exc):
            raise
        return (f"ONNX Runtime (CPU) has no kernel for an op of the written graph: "
                f"{str(exc).split('NOT_IMPLEMENTED : ')[-1]}")


def _check_graph(state: ExportState) -> None:
    """Parity (and latency) of the output in ONNX Runtime and in a TensorRT engine built
    here, against the reference, through the one checker."""
    o, rep, graph = state.options, state.report, need(state.graph, "graph")
    feed = deployed_feed(state.feed, graph)
    if plugin_nodes(graph):
        rep.notes.append(Note(STANDIN_NOTE.format(which="the output"), "plugin-standin"))
    runs = [] if state.run_precision == "bf16" else _ort_runs(state)
    if isinstance(runs, str):
        state.parity = rep.parity = skipped(runs)
        return
    ready = [r for r in runs if r.status == "ready"]
    runners = [r.runner for r in ready]
    if state.engine is not None:
        runners.append(trt_runner(state.engine))
    if not runners:
        state.parity = rep.parity = skipped("bf16 graphs are not checked in ONNX Runtime "
                                            "(numpy has no bf16)")
        return
    state.progress.step(f"checking parity ({', '.join(r.name for r in runners)})")
    outcome = run_check(CheckJob(state.reference, runners, [feed], export_tolerances(state),
                                 o.iterations, o.warmup, precision=state.run_precision),
                        state.progress)
    state.parity = rep.parity = outcome.verdict
    rep.latency = outcome.latency
    rep.providers = _providers_table(runs, outcome) if runs else {}
    if state.engine is not None:
        rep.trt["parity"] = outcome.by_runner["tensorrt"].to_json()
    if state.cast:
        rep.notes.extend(tagged("cast-down-error", [state.cast.measured_note(state.parity)]))


@stage_io(reads=("cast", "device", "dynamic", "engine", "feeds", "gelu_sites", "graph", "loaded",
                "options", "output", "parity", "reference", "reference_module", "run_precision",
                "weights"),
          writes=("cast", "graph", "loaded", "module", "parity", "program", "reference",
                 "reference_module"))
def check(state: ExportState) -> None:
    """output → parity and latency against the reference (or why they were skipped)."""
    rep = state.report
    no_ort = ort_missing()  # degrade: without onnxruntime, say what was not checked
    no_ref = None
    if not (no_ort and state.is_onnx):
        try:
            state.reference = _reference(state, state.feed)
        except BadInputError as exc:  # an input ORT refuses: the output is written, say so
            if not state.is_onnx:
                raise
            no_ref = str(exc).split(": ", 1)[-1]
    _record_if_big(state)
    if no_ort:
        state.parity = rep.parity = skipped(
            f"parity and latency skipped: {no_ort}; pip install 'export-gelu[cpu]' (or "
            "'export-gelu[gpu]' on a CUDA machine)")
    elif no_ref:
        state.parity = rep.parity = skipped(
            f"the input file cannot run as the reference ({no_ref}); the written graph, which "
            "export-gelu repaired, was not compared with it")
    else:
        _check_graph(state)
        if finds_islands(state):
            fix_overflow(state, _check_graph)


def checks_shapes(state: ExportState) -> bool:
    """Parity at the `--dynamic` sizes applies: ranged dims and a main check that ran."""
    plan, parity = state.dynamic, state.parity
    return bool(state.options.verify and plan is not None and plan.ranged and plan.templates
                and not ort_missing() and parity is not None and parity.status != "skipped")


@stage_io(reads=("device", "dynamic", "engine", "gelu_sites", "graph", "loaded", "options",
                "output", "parity", "reference_module", "run_precision"),
          writes=("parity",))
def check_shapes(state: ExportState) -> None:
    """Parity at MIN, OPT, an odd size and MAX of the `--dynamic` ranges: ONNX Runtime (and
    the engine) against a fresh reference at each, on inputs made by role
    (exporter/inputs/generated.py); one entry per shape in `dynamic.shapes`, saying which
    inputs were made and how (`generated`); a failure at any shape fails the run, naming the
    shape and the generated inputs."""
    rep, plan = state.report, need(state.dynamic, "dynamic")
    state.progress.step("checking parity at every size of the --dynamic ranges")
    tol = export_tolerances(state)
    shapes, failed = [], []
    assert state.loaded is not None and state.output is not None  # the export made them
    for label, sizes in plan.points():
        given = resolve_inputs(state.loaded, InputRequest.at_size(plan.specs(sizes), label))
        feed, made = given.feed, given.generated
        dep_feed = deployed_feed(feed, state.graph)
        for name, how in made.items():
            rep.generated_inputs.setdefault(name, how)
        runners = [ort_runner(state.output, threads=state.options.threads, name="onnxruntime")]
        if state.engine is not None:
            runners.append(trt_runner(state.engine))
        outcome = run_check(CheckJob(_reference(state, feed), runners, [dep_feed], tol))
        entry: dict[str, Any] = {"label": label, "sizes": sizes,
                                 "inputs": {n: list(a.shape) for n, a in dep_feed.items()},
                                 "generated": made}
        for name, result in outcome.by_runner.items():
            entry[name] = _shape_summary(result)
            if result.status == "failed":
                where = f"{name} at {label} ({_sizes_text(sizes)})"
                failed.append((where + (f", on generated {', '.join(made)}" if made else ""),
                               result))
        shapes.append(entry)
    rep.dynamic = {**(rep.dynamic or {}), "dims": plan.to_json(), "shapes": shapes}
    if failed and need(state.parity, "parity").status != "failed":
        where, result = failed[0]
        result.reason = f"{where}: {result.reason}"
        state.parity = rep.parity = result


def _shape_summary(result: ParityResult) -> dict[str, Any]:
    worst = max((o.max_abs for o in result.outputs.values()), default=float("nan"))
    scale = max((o.ref_scale for o in result.outputs.values()), default=float("nan"))
    return {**result.to_json(), "max_abs": worst, "ref_scale": scale}


def _sizes_text(sizes: dict[str, int]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sizes.items())
