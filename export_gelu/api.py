"""The Python API: export(), inspect_model(); the CLI is a thin layer over these."""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import time
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from export_gelu import graph as one_graph
from export_gelu.check.deployed import deployed_feed as _deployed_feed
from export_gelu.check.parity import ParityResult, compare_runners, default_tolerances, skipped
from export_gelu.check.reference import reference_runner as _reference_runner
from export_gelu.compat import (
    compatibility_table,
    format_targets,
    incompatibilities,
    model_opset,
    op_counts,
)
from export_gelu.errors import BadInputError, TargetUnmetError
from export_gelu.exporter.call_plan import CallPlan, ordered_feed, plan_for
from export_gelu.exporter.capture import capture, cast_args, module_for_precision
from export_gelu.exporter.cast_down import cast_down_on_request
from export_gelu.exporter.dynamic import DynamicPlan, plan_dynamic
from export_gelu.exporter.fallback import export_with_fallback
from export_gelu.exporter.feeds import resolve_feed
from export_gelu.exporter.load import LoadedModel, load_model, load_onnx_model
from export_gelu.exporter.model_dtype import feed_precision
from export_gelu.exporter.model_names import apply_output_names, model_output_names
from export_gelu.exporter.save import (
    check_distinct_outputs,
    check_output_path,
    external_data_threshold,
    save_onnx_streaming,
    write_text_atomic,
)
from export_gelu.exporter.to_onnx import DYNAMO_MIN_OPSET
from export_gelu.exporter.weight_size import check_disk_space, file_bytes, module_weight_bytes
from export_gelu.graph import skeleton
from export_gelu.options import (
    GELU_FORMS,
    PRECISIONS,
    ExportOptions,
    check_form,  # noqa: F401 - its old home: callers import it here
    validate,
)
from export_gelu.passes.compat import (
    fit_module_precision,
    fit_program_precision,
    fit_to_profile,
    prepare_program_for_opset,
)
from export_gelu.passes.fx import run_fx_passes
from export_gelu.passes.gc_pause import gc_paused
from export_gelu.passes.onnx import merge_sites, run_onnx_passes
from export_gelu.passes.sites import GeluSite
from export_gelu.progress import Progress
from export_gelu.report.report import Report
from export_gelu.targets import TRT_PROFILES, TargetProfile

#: Why a big model meant for an opset below 18 is exported at 18 and converted down.
BIG_DOWNCONVERT_NOTE = ("big model: exported with the dynamo exporter at opset {opset}, which "
                        "writes the weights a tensor at a time, then converted down to opset "
                        "{target} (the TorchScript exporter holds a second copy of the weights)")


class StageClock:
    """Wall seconds per pipeline stage (the report's `stage_seconds`): `lap(stage)` charges
    the time since the previous lap, or since the clock started, to `stage`."""

    def __init__(self, stages: dict[str, float] | None = None) -> None:
        self.stages = {} if stages is None else stages
        self._last = time.perf_counter()

    def lap(self, stage: str) -> None:
        now = time.perf_counter()
        self.stages[stage] = self.stages.get(stage, 0.0) + now - self._last
        self._last = now


def default_output(model: Path, target: str) -> Path:
    """`model.pt` → `model.<target>.onnx` beside it."""
    return model.with_name(f"{model.stem}.{target}.onnx")


def _torch_feed(feed: OrderedDict[str, np.ndarray], precision: str) -> tuple[Any, ...]:
    import torch

    return cast_args(tuple(torch.from_numpy(np.ascontiguousarray(a)) for a in feed.values()),
                     precision)


def _export_torch(loaded: LoadedModel, feed: OrderedDict[str, np.ndarray], profile: TargetProfile,
                  opset: int, form: str, precision: str, report: Report,
                  progress: Progress, clock: StageClock | None = None,
                  plan: CallPlan | None = None, output_names: list[str] | None = None,
                  dplan: DynamicPlan | None = None, out: Path | None = None,
                  ) -> tuple[onnx.ModelProto, list[GeluSite]]:
    """`out`: where the output goes; a model whose weights exceed the external-data threshold
    has them written beside it by the exporter and streamed from there (never a 2nd copy)."""
    from export_gelu.exporter import dynamic as dyn
    from export_gelu.exporter.workdir import exporting_weights_to, weights_workdir

    clock = clock or StageClock()
    plan = plan or plan_for(loaded, list(feed))
    dplan = dplan or DynamicPlan()
    module = module_for_precision(loaded, precision)
    report.notes.extend(fit_module_precision(module, precision))
    big = out is not None and module_weight_bytes(module) > external_data_threshold()
    args = _torch_feed(feed, feed_precision(module, precision))
    progress.step("capturing the model with torch.export")
    dynamic_shapes = dplan.torch_dynamic_shapes(list(feed)) if dplan.ranged else None
    program, why_not = capture(loaded, module, args, precision, plan, dynamic_shapes)
    report.notes.extend(fit_program_precision(program, precision))
    clock.lap("capture")
    sites: list[GeluSite] = []
    if program is not None:
        progress.step("finding and canonicalizing GELU sites (fx)")
        sites = run_fx_passes(program, form)
        if loaded.format.value == "TorchScript":
            report.notes.append("TorchScript converted to an ExportedProgram (TS2EPConverter); "
                                "the fx GELU passes ran on it")
        if dplan.ranged and opset < DYNAMO_MIN_OPSET:
            report.notes.append(dyn.DOWNCONVERT_NOTE.format(opset=DYNAMO_MIN_OPSET, target=opset))
            opset = DYNAMO_MIN_OPSET  # fit_to_profile converts the graph down to the target's
        elif big and opset < DYNAMO_MIN_OPSET:
            report.notes.append(BIG_DOWNCONVERT_NOTE.format(opset=DYNAMO_MIN_OPSET, target=opset))
            opset = DYNAMO_MIN_OPSET
        report.notes.extend(prepare_program_for_opset(program, opset))
        clock.lap("fx_passes")
    else:
        report.notes.append(f"fx GELU passes skipped: torch.export capture failed ({why_not}); "
                            "GELU passes ran at the ONNX level only")
        if opset >= DYNAMO_MIN_OPSET:
            opset = DYNAMO_MIN_OPSET - 1
            report.notes.append(f"exported with the TorchScript exporter at opset {opset}")
    progress.step(f"exporting to ONNX (opset {opset})")
    export_module = module if program is None else None
    dynamic_axes = dyn.torchscript_dynamic_axes(dplan) if program is None else None
    if dynamic_axes and loaded.format.value == "TorchScript" and module is loaded.module:
        import torch  # exporting a ScriptModule leaves it (and its deep copies) failing under

        export_module = torch.jit.load(str(loaded.path), map_location="cpu").eval()
        # inference_mode; the reference keeps an untouched one
    with exporting_weights_to(weights_workdir(out) if big and out else None):
        model, report.exporter, notes = export_with_fallback(export_module, args, list(feed),
                                                             opset, program, plan, dynamic_axes)
    report.notes.extend(notes)
    dyn.name_graph_dims(model, dplan.dims)
    report.notes.extend(n for n in [dyn.name_output_dims(model, dplan.ranged)] if n)
    baked = dyn.static_ranged_axes(model, dplan.dims)
    if baked:
        raise TargetUnmetError(f"the {report.exporter} exporter made ranged axes static "
                               f"({', '.join(baked)}): the model computes with that size as a "
                               "Python constant; export an nn.Module or ExportedProgram instead")
    own = model_output_names(loaded, module, program, plan, args)
    report.notes.extend(apply_output_names(model, output_names or own,
                                           forced=output_names is not None, own=own))
    clock.lap("export")
    return model, sites


def _verify_and_time(reference: Any, deployed_path: Path, model: onnx.ModelProto,
                     feed: OrderedDict[str, np.ndarray], precision: str, atol: float | None,
                     rtol: float | None, added_error: float, threads: int, iterations: int,
                     warmup: int, report: Report, progress: Progress,
                     device: str = "cpu") -> None:
    from export_gelu.check.devices import compare_on_providers, ready_runners
    from export_gelu.check.latency import measure_latency
    from export_gelu.passes.onnx.plugin_math import STANDIN_NOTE, plugin_nodes

    if precision == "bf16":
        report.parity = skipped("bf16 graphs are not checked in ONNX Runtime (numpy has no bf16)")
        return
    d_atol, d_rtol = default_tolerances(precision, added_error)
    atol = d_atol if atol is None else atol
    rtol = d_rtol if rtol is None else rtol
    deployed_feed = _deployed_feed(feed, model, precision)
    if plugin_nodes(model):
        report.notes.append(STANDIN_NOTE.format(which="the output"))
    try:
        runs = ready_runners(deployed_path, device, precision, threads)
    except BadInputError as exc:  # the file is written and valid ONNX: say what ORT lacks
        if "NOT_IMPLEMENTED" not in str(exc):
            raise
        report.parity = skipped(f"ONNX Runtime (CPU) has no kernel for an op of the written "
                                f"graph: {str(exc).split('NOT_IMPLEMENTED : ')[-1]}")
        return
    ready = [r for r in runs if r.status == "ready"]
    progress.step(f"checking parity in ONNX Runtime ({', '.join(r.name for r in ready)})")
    report.parity, report.providers = compare_on_providers(reference, runs, deployed_feed, atol,
                                                           rtol)
    if iterations > 0:
        progress.step("timing")
        from export_gelu.check.recorded import RecordedRunner

        # a recorded reference (a big model) was timed while it was live: in turn
        timed_before = reference.latency if isinstance(reference, RecordedRunner) else None
        runners = [*([reference] if timed_before is None else []), *(r.runner for r in ready)]
        with contextlib.ExitStack() as stack:
            for runner in runners:
                stack.enter_context(runner)
            report.latency = measure_latency(runners, deployed_feed, iterations, warmup,
                                             progress)
        if timed_before is not None:
            report.latency = {reference.name: timed_before, **report.latency}


def ort_missing() -> str | None:
    """None when onnxruntime imports; else why not, in words (the run degrades, not crashes)."""
    try:
        import onnxruntime  # noqa: F401
    except ImportError as exc:
        return f"onnxruntime is not installed ({type(exc).__name__})"
    return None


def _onnx_input_at_opset(model: onnx.ModelProto, profile: TargetProfile, opset: int | None,
                         form: str, feed: OrderedDict[str, np.ndarray], rep: Report
                         ) -> tuple[onnx.ModelProto, TargetProfile]:
    """An ONNX input at the opset it is exported at, and the profile capped there.

    Without `--opset`: converted up where the target gains from it (native Gelu, its opset
    floor; `upconvert`), else as it is. With `--opset N`: N has the last word: converted up
    to N (exit 3 when that cannot be done soundly) or down to N (by `fit_to_profile`).
    """
    from export_gelu.passes.compat.upconvert import convert_up, convert_up_for

    have = model_opset(model)
    if opset is None:
        model, notes = convert_up_for(model, profile, form, feed)
        rep.notes.extend(notes)
        return model, profile
    if opset > have:
        model, notes = convert_up(model, opset, feed, f"--opset {opset}", strict=True)
        rep.notes.extend(notes)
    if opset < have:
        rep.notes.append(f"--opset {opset}: the opset-{have} input converted down to opset "
                         f"{opset}")
    return model, profile.at_opset(opset)


def export(model: str | Path, *, target: str = "trt", output: str | Path | None = None,
           gelu: str = "keep", opset: int | None = None, inputs: Sequence[str] = (),
           inputs_npz: str | Path | None = None, precision: str = "fp32",
           engine: str | Path | None = None, report: str | Path | None = None,
           atol: float | None = None, rtol: float | None = None, verify: bool = True,
           allow_pickle: bool = False, model_factory: str | None = None, threads: int = 1,
           iterations: int = 50, warmup: int = 5, require_trt: bool = False,
           dynamic: Sequence[str] = (), device: str | None = None,
           progress: Progress | None = None, bundle: str | Path | None = None,
           output_names: str | Sequence[str] | None = None, imports: Sequence[str] = (),
           cast_down: bool = False, options: ExportOptions | None = None) -> Report:
    """Export `model` for `target`, rewrite its GELUs, verify and time it; return the report.

    `device` ('cpu' | 'cuda', None: cuda where torch sees a GPU and ONNX Runtime has its CUDA
    provider) is where the PyTorch reference and the ONNX Runtime checks run.
    `bundle`: also write a device bundle there (device/bundle.py) for the target's
    TensorRT version, to build and check the engine on a box export-gelu cannot drive.

    Raises ExportGeluError subclasses for bad input (exit 2) or unmet targets (exit 3);
    a parity failure is returned in the report (`report.exit_code == 1`).
    `output_names` (`--output-names a,b`) names the graph's outputs; by default they are the
    model's own (its output object's fields). `imports` (`--import`): modules to import
    before loading, for an ExportedProgram whose inputs or outputs use their types.
    `cast_down` (`--cast-down`): export a float64 model in float32 (exporter/cast_down.py).
    `options` (an ExportOptions, as the CLI builds it) replaces the keyword options above.
    """
    progress = progress or Progress(enabled=False)
    opts = options or ExportOptions(
        target=target, output=output, gelu=gelu, opset=opset, inputs=inputs,
        inputs_npz=inputs_npz, precision=precision, engine=engine, report=report, atol=atol,
        rtol=rtol, verify=verify, allow_pickle=allow_pickle, model_factory=model_factory,
        threads=threads, iterations=iterations, warmup=warmup, require_trt=require_trt,
        dynamic=dynamic, device=device, bundle=bundle, output_names=output_names,
        imports=imports, cast_down=cast_down)
    checked = validate(opts)  # every option checked here, before any work
    target, output, gelu, opset, precision = (opts.target, opts.output, opts.gelu, opts.opset,
                                              opts.precision)
    inputs, inputs_npz, engine, report = opts.inputs, opts.inputs_npz, opts.engine, opts.report
    atol, rtol, verify, threads = opts.atol, opts.rtol, opts.verify, opts.threads
    iterations, warmup, require_trt = opts.iterations, opts.warmup, opts.require_trt
    allow_pickle, model_factory, imports = opts.allow_pickle, opts.model_factory, opts.imports
    device, bundle, cast_down = opts.device, opts.bundle, opts.cast_down
    profile, target_note = checked.profile, checked.target_note
    given_names, flags = checked.output_names, checked.dynamic
    model_path = Path(model)
    out = Path(output) if output else default_output(model_path, target)
    outputs = [(f, Path(p)) for f, p in (("--output", out), ("--report", report),
                                         ("--engine", engine)) if p]
    check_distinct_outputs(outputs)
    for _flag, path in outputs:
        check_output_path(path, [model_path])
    from export_gelu.check.devices import resolve_device

    device_choice = resolve_device(device) if verify or device else None
    if bundle:
        from export_gelu.device.bundle import check_bundle_request

        check_bundle_request(bundle, profile)
    from export_gelu.check.trt_runner import trt_unavailable_reason

    why_no_trt = trt_unavailable_reason()
    wants_trt = profile.runtime == "trt" or bool(engine) or require_trt
    if wants_trt and why_no_trt and require_trt:
        raise TargetUnmetError(f"--require-trt: TensorRT engine build impossible here: "
                               f"{why_no_trt}")

    progress.step(f"loading {model_path}")
    clock = StageClock()
    loaded = load_model(model_path, allow_pickle=allow_pickle, model_factory=model_factory,
                        imports=imports)
    for _flag, path in outputs:
        check_output_path(path, [model_path, *loaded.data_files])
    _check_disk_for(loaded, out)
    dplan, specs = plan_dynamic(loaded, flags, list(inputs), inputs_npz)
    feed = resolve_feed(loaded, specs, inputs_npz)
    plan = plan_for(loaded, list(feed))
    feed = ordered_feed(plan, feed)
    cast, cast_notes = cast_down_on_request(loaded, precision, cast_down)
    if cast:  # the float32 copy is exported; the float64 original stays the reference
        loaded, feed = cast.loaded, cast.fit_feed(feed)
    reference_module = cast.reference if cast else \
        None if loaded.is_onnx else loaded.reference_module()
    rep_notes_inputs = [f"the model is called as model({plan.describe()})"
                        ] if plan.uses_keywords else []
    rep_notes_inputs += [cast.note()] if cast else cast_notes
    run_precision = cast.precision if cast else feed_precision(reference_module, precision)
    if run_precision == "fp64":
        rep_notes_inputs.append("a float64 model: inputs, graph and parity in float64")
    rep = Report(model=str(model_path), target=profile.name, target_note=target_note,
                 model_format=loaded.format.value, precision=precision, gelu_form=gelu,
                 threads=threads, notes=[*loaded.notes, *dplan.notes, *rep_notes_inputs],
                 device=device_choice.to_json() if device_choice else {})
    rep.stage_seconds = clock.stages
    rep.options = opts.to_json()

    if loaded.is_onnx:
        onnx_model = load_onnx_model(loaded.path)
        from export_gelu.exporter.dynamic import name_graph_dims, name_output_dims

        name_graph_dims(onnx_model, dplan.dims)
        rep.notes.extend(n for n in [name_output_dims(onnx_model, dplan.ranged)] if n)
        fx_sites: list[GeluSite] = []
        rep.exporter = "none (ONNX input)"
        from export_gelu.passes.onnx.plugin_math import STANDIN_NOTE, plugin_nodes

        if plugin_nodes(onnx_model) and verify:
            rep.notes.append(STANDIN_NOTE.format(which="the input (the parity reference)"))
        if given_names is not None:
            rep.notes.extend(apply_output_names(onnx_model, given_names, forced=True))
        onnx_model, profile = _onnx_input_at_opset(onnx_model, profile, opset, gelu, feed, rep)
        clock.lap("load")
    else:
        clock.lap("load")
        onnx_model, fx_sites = _export_torch(loaded, feed, profile, opset or profile.opset,
                                             gelu, precision, rep, progress, clock, plan,
                                             given_names, dplan, out)
    progress.step("rewriting GELU sites for the target (ONNX)")
    with gc_paused():  # the one graph: loaded once for the passes and the checks below
        graph = one_graph.load(onnx_model)
        onnx_sites = run_onnx_passes(graph, profile, gelu, precision)[1]
        fit_notes = fit_to_profile(graph, profile)[1]
        one_graph.save(graph, onnx_model)
    rep.notes.extend(fit_notes)
    clock.lap("onnx_passes")
    rep.gelu_sites = merge_sites(fx_sites, onnx_sites)
    rep.opset = model_opset(onnx_model)
    rep.op_counts = dict(op_counts(onnx_model))
    problems = incompatibilities(onnx_model, profile, graph=graph)
    rep.compatibility = {profile.name: problems}
    if problems:
        raise TargetUnmetError(f"the produced graph does not fit {profile.name}: "
                               f"{'; '.join(problems)} (a bug in export-gelu; please report it)")
    if profile.runtime == "trt":
        takers = [n for n, r in compatibility_table(onnx_model, list(TRT_PROFILES),
                                                    graph=graph).items() if not r]
        rep.notes.append(f"TensorRT versions that parse the output as is: "
                         f"{format_targets(takers)}")
    if dplan.dims:
        from export_gelu.check.trt_runner import check_dynamic

        shapes = {n: tuple(a.shape) for n, a in _deployed_feed(feed, onnx_model,
                                                                 precision).items()}
        check_dynamic(dplan.axes(), onnx_model, shapes)
        rep.dynamic = {"dims": dplan.to_json(), "shapes": [],
                       "profile": [dataclasses.asdict(a) for a in dplan.axes()]}

    one_graph.close(graph)  # done with: it must not keep the model's weights alive below
    clock.lap("checks")
    progress.step(f"writing {out}")
    written, streamed = _save(onnx_model, out, progress)
    if streamed is not None:
        rep.weights = streamed.to_json()
    onnx_model = skeleton(onnx_model)  # the weights are on disk now: free the in-memory copy
    rep.output = str(written[0])
    rep.external_data = str(written[1]) if len(written) > 1 else None
    clock.lap("save")

    built = None
    target_blocker = _target_engine_blocker(profile)
    if not wants_trt:
        rep.trt = {"status": "skipped", "reason": f"target {profile.name} is not TensorRT"}
    elif why_no_trt:
        rep.trt = {"status": "skipped", "reason": target_blocker or why_no_trt,
                   "engine_here": False}
    else:
        built = _build_trt(out, profile, precision, feed, onnx_model, engine, dplan.axes(), rep,
                           progress)
        rep.trt["engine_here"] = target_blocker is None
        if target_blocker:
            rep.notes.append(f"no engine of {profile.name} itself here: {target_blocker}")
        clock.lap("trt_build")

    recorded = None
    if verify:
        no_ort = ort_missing()  # degrade: without onnxruntime, say what was not checked
        run_on = device_choice.device if device_choice else "cpu"
        try:
            reference = None if no_ort and loaded.is_onnx else \
                _reference_runner(loaded, reference_module, feed, onnx_model, threads, run_on)
        except BadInputError as exc:  # an input ORT refuses: the output is written, say so
            if not loaded.is_onnx:
                raise
            reference, no_ref = None, str(exc).split(": ", 1)[-1]
        else:
            no_ref = None
        recorded = _recorded_if_big(reference, rep, feed, onnx_model, run_precision, iterations,
                                    warmup, keep_model=bool(dplan.ranged or (
                                        inputs_npz and not loaded.is_onnx)), progress=progress)
        if recorded is not None:  # one model in memory at a time: the reference's goes now
            reference, reference_module = recorded, None
            loaded.module = loaded.exported = None
            if cast:
                cast.reference = None  # the float64 original of a --cast-down export
            gc.collect()
        added = max((s.added_max_error for s in rep.gelu_sites), default=0.0)
        if no_ort:
            rep.parity = skipped(f"parity and latency skipped: {no_ort}; pip install "
                                 "'export-gelu[cpu]' (or 'export-gelu[gpu]' on a CUDA machine)")
        elif no_ref:
            rep.parity = skipped(f"the input file cannot run as the reference ({no_ref}); "
                                 "the written graph, which export-gelu repaired, was not "
                                 "compared with it")
        else:
            _verify_and_time(reference, out, onnx_model, feed, run_precision, atol, rtol, added,
                             threads, iterations, warmup, rep, progress, run_on)
            rep.notes.extend(n for n in [cast and cast.measured_note(rep.parity)] if n)
        if built is not None and reference is not None:
            _check_trt(built, precision, feed, onnx_model, reference, rep, progress, atol, rtol,
                       added, iterations, warmup)
        if dplan.ranged and dplan.templates and not no_ort and rep.parity.status != "skipped":
            from export_gelu.check.shape_parity import parity_at_sizes

            progress.step("checking parity at every size of the --dynamic ranges")
            parity_at_sizes(dplan, loaded, reference_module, out, onnx_model, built, precision,
                            atol, rtol, added, threads, rep)
        clock.lap("verify")
    else:
        rep.parity = skipped("--no-verify")
    if bundle:
        from export_gelu.device.bundle import bundle_after_export

        progress.step(f"writing the device bundle {bundle}")
        bundle_after_export(rep, Path(bundle), model_path, out, profile, precision,
                            _deployed_feed(feed, onnx_model, precision),
                            lambda: recorded if recorded is not None else _reference_runner(
                                loaded, reference_module, feed, onnx_model, threads),
                            atol, rtol, dplan.axes())
        clock.lap("bundle")
    if inputs_npz and not loaded.is_onnx:  # real data: where each GELU site's inputs lie
        from export_gelu.check.calibration import gelu_input_ranges

        progress.step("recording GELU input ranges")
        rep.calibration = gelu_input_ranges(loaded, [feed],
                                            f"real data from {Path(inputs_npz).name}")
        clock.lap("calibration")
    progress.done()
    if report:
        write_text_atomic(rep.dumps(), Path(report))
    return rep


def _recorded_if_big(reference: Any, rep: Report, feed: OrderedDict, model: onnx.ModelProto,
                     precision: str, iterations: int, warmup: int, keep_model: bool,
                     progress: Progress) -> Any:
    """A big model's reference, run on the feed (and timed) and recorded, when the reference
    and the deployed graph do not both fit in memory; None otherwise (or when the reference
    is still needed: parity at several sizes, calibration)."""
    if reference is None or rep.weights is None or keep_model:
        return None
    from export_gelu.check.recorded import IN_TURN_NOTE, both_fit, record_reference

    if both_fit(int(rep.weights["bytes"])):
        return None
    progress.step(f"running the reference ({reference.name}) before loading the output")
    recorded = record_reference(reference, [_deployed_feed(feed, model, precision)],
                                iterations, warmup)
    rep.notes.append(IN_TURN_NOTE.format(reference=reference.name, output="the output"))
    return recorded


def _check_disk_for(loaded: LoadedModel, out: Path) -> None:
    """Exit 2 before any work when the output's disk cannot take the weights (twice for a
    big torch model: the exporter's copy, then the output's)."""
    if loaded.is_onnx:
        needed, what = file_bytes([loaded.path, *loaded.data_files]), "the rewritten model"
    else:
        size = module_weight_bytes(loaded.module) if loaded.module is not None else (
            file_bytes([loaded.path]))  # an ExportedProgram: its file is its weights
        big = size > external_data_threshold()
        needed = 2 * size if big else size
        what = ("the export (weights written once by the exporter, once into the output)"
                if big else "the export")
    check_disk_space(out.parent, needed, what)


def _save(model: onnx.ModelProto, out: Path, progress: Progress) -> tuple[list[Path], Any]:
    """Save atomically, streaming weights left in their file, with a byte counter."""
    from export_gelu.exporter.workdir import release_workdirs
    from export_gelu.onnx_weights import lazy_bytes

    size = lazy_bytes(model)
    counter = progress.byte_counter(size, f"writing {out.name}.data") if size else None
    try:
        return save_onnx_streaming(model, out, validate=onnx.checker.check_model,
                                   on_bytes=counter)
    finally:
        release_workdirs()  # the exporter's copy of a big model's weights is in `out` now


def _target_engine_blocker(profile: TargetProfile) -> str | None:
    """Why no engine of the target's own TensorRT version can be built here (None: it can,
    or the target is not TensorRT)."""
    if profile.runtime != "trt":
        return None
    from export_gelu.trt_parser.capability import local_engine_blocker

    return local_engine_blocker(profile.trt_version)


def _build_trt(onnx_path: Path, profile: TargetProfile, precision: str, feed: OrderedDict,
               model: onnx.ModelProto, engine: Any, dynamic: Sequence[Any], rep: Report,
               progress: Progress) -> Any:
    """Build (and save, with --engine) a TensorRT engine with the installed TensorRT;
    `dynamic`: the DynamicAxis ranges of its optimization profile."""
    from export_gelu.check.trt_runner import (
        build_engine,
        build_engine_loader,
        installed_profile,
    )

    builder = installed_profile()
    shapes = {n: tuple(a.shape) for n, a in _deployed_feed(feed, model, precision).items()}
    progress.step("building the TensorRT engine")
    loader = build_engine_loader(onnx_path, precision, shapes, list(dynamic),
                                 Path(engine) if engine else None, builder)
    built = build_engine(loader, onnx_path)
    version = builder.trt_version if builder else "?"
    rep.trt = {"status": "built", "reason": "", "engine": str(engine) if engine else None,
               "tensorrt": version, "precision_api": builder.precision_api if builder else ""}
    if builder is not None and builder.name != profile.name:
        rep.notes.append(f"engine built with the installed TensorRT ({builder.name}); the "
                         f"{profile.name} fit was checked statically")
    return built


def _check_trt(built: Any, precision: str, feed: OrderedDict, model: onnx.ModelProto,
               reference: Any, rep: Report, progress: Progress, atol: float | None,
               rtol: float | None, added: float, iterations: int, warmup: int) -> None:
    """TensorRT parity against the reference, and TensorRT latency."""
    from export_gelu.check.latency import measure_latency
    from export_gelu.check.trt_runner import trt_runner

    deployed_feed = _deployed_feed(feed, model, precision)
    runner = trt_runner(built)
    d_atol, d_rtol = default_tolerances(precision, added)
    progress.step("checking parity in TensorRT")
    result: ParityResult = compare_runners(reference, runner, deployed_feed,
                                           d_atol if atol is None else atol,
                                           d_rtol if rtol is None else rtol)
    rep.trt["parity"] = result.to_json()
    if result.status == "failed":
        rep.parity = result
    if iterations > 0:
        with runner:
            rep.latency.update(measure_latency([runner], deployed_feed, iterations, warmup))


def inspect_model(model: str | Path, targets: Sequence[str] | None = None,
                  dry_run: bool = True) -> dict[str, Any]:
    """GELU sites and per-target compatibility of an ONNX file, without a GPU.

    For each target (all by default): the reasons it would not parse the file as is, and
    (`dry_run`) whether `export-gelu FILE --target T` would fit it.
    """
    from export_gelu.inspection import inspect_onnx
    from export_gelu.targets import resolve_profile

    for t in targets or ():
        resolve_profile(t)  # an unknown target is bad input (exit 2)
    loaded = load_model(model)
    if not loaded.is_onnx:
        raise BadInputError(f"{model}: inspect takes an ONNX file (export one first)")
    return inspect_onnx(loaded.path, list(targets) if targets else None, dry_run)


__all__ = ["export", "inspect_model", "default_output", "GELU_FORMS", "PRECISIONS"]
