"""`--precision int8|fp8`: the fp32 graph an export made, quantized for its target and written
in its place (docs/quantization.md):

    feeds → plan → calibrate → [sensitivity → auto keep] → lower → verdict → save

Calibration runs on `--calibration-data` (three quarters of its feeds when it holds four or
more; the rest are held out for the verdict), else on generated variants of the run's feed
(their ranges are indicative, and a note says so). The verdict is judged on feeds the
calibration did not see. For TensorRT 7.x (a calibration cache, the graph unchanged), the
graph judged is the simulation of what TensorRT computes with the cache: the same graph with
Q/DQ at the cache's scales and per-channel weights, at opset 13 for ONNX Runtime.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import onnx

from export_gelu.atomic import write_text_atomic
from export_gelu.check.inputs.input_resolver import InputRequest, resolve_inputs
from export_gelu.check.runners.deployed import deployed_feed
from export_gelu.errors import TargetUnmetError
from export_gelu.graph import skeleton
from export_gelu.json_value import JsonObject
from export_gelu.notes import Note
from export_gelu.options import AUTO_KEEP, ExportOptions, quantizing
from export_gelu.output_plan import calibration_cache_file
from export_gelu.parse_check import incompatibilities, model_opset, op_counts
from export_gelu.quantize import (
    CALIBRATION_CACHE,
    DEFAULT_TARGET_SQNR_DB,
    QDQ,
    ModuleSensitivity,
    QuantPlan,
    QuantRoute,
    TensorRange,
    auto_keep,
    calibrate,
    lower,
    method_for,
    plan_quantization,
    quality,
    read_calibration_cache,
    route_for,
    run_graph,
    sensitivity,
)
from export_gelu.quantize.formats import INT8
from export_gelu.quantize.read_qdq import QDQ_OPS
from export_gelu.quantize.routes import refuse_dynamic_cache
from export_gelu.results.export import ExportInputs, Feed, SavedGraph
from export_gelu.results.quantize import AutoKeep, Quantization
from export_gelu.results.request import Request
from export_gelu.run import Run
from export_gelu.steps.graph import save
from export_gelu.steps.quant_verdict import JUDGED_BY, judge_qdq, not_judgeable

#: Generated calibration: this many variants of the run's feed, and this many to judge on.
CALIBRATION_VARIANTS = 8
JUDGED_VARIANTS = 4
GENERATED_NOTE = ("calibrated on generated inputs: activation ranges from made-up data are "
                  "indicative; --calibration-data FILE (real inputs) sets them for use")
SIMULATED = " (TensorRT 7.x: the graph with the calibration cache's scales as Q/DQ, simulated)"


def fp32_request(request: Request[ExportOptions]) -> Request[ExportOptions]:
    """What makes the graph: `request` itself, or in fp32 for `--precision int8|fp8` (the
    graph is quantized after it is made)."""
    if not quantizing(request.options):
        return request
    return dataclasses.replace(request, options=dataclasses.replace(request.options,
                                                                    precision="fp32"))


def quant_summary(q: Quantization) -> JsonObject:
    """A quantized form's row in `--compare-forms` (and what `--gelu auto` chooses by): its
    INT8/FP8 verdict, the worst output SQNR against fp32, products quantized, Q/DQ inside a
    GELU."""
    sqnr = [m.sqnr_db for m in q.measured.values()]
    worst = min(sqnr) if sqnr else float("inf")
    return {"precision": q.route.precision, "route": q.route.kind, "passed": q.passed,
            "sqnr_db": worst if np.isfinite(worst) else None, "quantized": q.quantized,
            "weight_products": q.weight_products, "qdq_inside_gelu": q.gelu_qdq}


def variants(feed: Mapping[str, np.ndarray], count: int, seed: int) -> list[Feed]:
    """`count` feeds like `feed`: floats drawn with its mean and spread, integers within its
    range (token ids stay ids, a mask of ones stays ones), anything else as it is."""
    rng = np.random.default_rng(seed)
    made: list[Feed] = []
    for _ in range(count):
        out = Feed()
        for name, value in feed.items():
            a = np.asarray(value)
            if a.dtype.kind == "f" and a.size:
                spread = float(a.std()) or 1.0
                out[name] = (rng.standard_normal(a.shape) * spread + float(a.mean())
                             ).astype(a.dtype)
            elif a.dtype.kind in "iu" and a.size:
                out[name] = rng.integers(int(a.min()), int(a.max()) + 1, a.shape).astype(a.dtype)
            else:
                out[name] = a.copy()
        made.append(out)
    return made


def _feeds(inputs: ExportInputs, o: ExportOptions) -> tuple[list[Feed], list[Feed], str, bool]:
    """(calibration feeds, judged feeds, where the calibration's came from, real or not), as
    the model takes them (forward() order)."""
    main = inputs.feed
    if o.calibration_data:
        given = resolve_inputs(inputs.loaded, InputRequest(
            inputs_file=Path(o.calibration_data), json_ok=True))
        feeds = [Feed(f) for f in given.feeds]
        if len(feeds) >= 4:
            cut = (3 * len(feeds)) // 4
            return feeds[:cut], feeds[cut:], given.source, True
        return feeds, [main, *variants(main, JUDGED_VARIANTS, 1001)], given.source, True
    return (variants(main, CALIBRATION_VARIANTS, 1),
            [main, *variants(main, JUDGED_VARIANTS, 1001)],
            f"{CALIBRATION_VARIANTS} generated variants of the run's inputs", False)


def _sized_feeds(inputs: ExportInputs) -> tuple[list[Feed], list[str]]:
    """Feeds at the sizes parity takes with `--dynamic` other than the run's own (min, an odd
    size, max: the verdict runs at them too), and their labels; none without ranged dims."""
    plan = inputs.dynamic
    if not (plan.ranged and plan.templates):
        return [], []
    main = {n: tuple(np.asarray(v).shape) for n, v in inputs.feed.items()}
    feeds: list[Feed] = []
    labels: list[str] = []
    for label, sizes in plan.points():
        feed = resolve_inputs(inputs.loaded, InputRequest.at_size(plan.specs(sizes), label)).feed
        if {n: tuple(np.asarray(v).shape) for n, v in feed.items()} != main:
            feeds.append(Feed(feed))
            labels.append(f"{label} ({', '.join(f'{k}={v}' for k, v in sizes.items())})")
    return feeds, labels


def _symbolic_inputs(model: onnx.ModelProto) -> str:
    """The graph inputs with a dim that is not a number, in words ('' when none)."""
    named = [f"{i.name}[{', '.join(d.dim_param or '?' for d in i.type.tensor_type.shape.dim)}]"
             for i in model.graph.input
             if any(not d.HasField("dim_value") for d in i.type.tensor_type.shape.dim)]
    return ", ".join(named)


def _simulation(model: onnx.ModelProto, route: QuantRoute) -> tuple[onnx.ModelProto, QuantRoute]:
    """What ONNX Runtime runs to stand for `route`: the graph and route themselves for Q/DQ;
    for the calibration cache, the graph at opset 13 or newer and a per-channel Q/DQ route."""
    if route.kind == QDQ:
        return model, route
    sim = model
    if model_opset(model) < 13:
        from onnx import version_converter

        try:
            sim = version_converter.convert_version(model, 13)
        except Exception as exc:  # noqa: BLE001 - the converter raises anything
            raise TargetUnmetError(f"--precision {route.precision} on {route.target}: the graph "
                                   f"could not be simulated at opset 13 ({exc})") from None
        metadata = {n.name: n.metadata_props for n in model.graph.node if n.name}
        for node in sim.graph.node:  # the converter drops node metadata: the modules' paths
            if not node.metadata_props and node.name in metadata:
                node.metadata_props.extend(metadata[node.name])
    return sim, dataclasses.replace(route, kind=QDQ, weights="float_q_dq",
                                    weight_per_channel=True, min_opset=13,
                                    zero_point_required=True)


def cache_simulation(model: onnx.ModelProto, cache_text: str) -> onnx.ModelProto:
    """What TensorRT 7.x computes from the fp32 `model` and its calibration cache, as a Q/DQ
    graph ONNX Runtime runs (the graph export judged): each product whose activation the
    cache holds quantized at that scale, its weight per channel; the rest float."""
    _, scales = read_calibration_cache(cache_text)
    route = QuantRoute("", "", "int8", CALIBRATION_CACHE, "none", False, 13, False)
    sim, sim_route = _simulation(model, route)
    plan = plan_quantization(sim, "int8")
    plan = plan.without([p.node for p in plan.points if p.activation not in scales])
    ranges = {name: TensorRange(-s * INT8.qmax, s * INT8.qmax) for name, s in scales.items()
              if s > 0}
    return lower(sim, plan, ranges, sim_route).model


def _gelu_qdq(graph: onnx.ModelProto, plan: QuantPlan) -> int:
    """Q/DQ nodes reading a GELU site's input or inner value (0 by the placement's rule)."""
    return sum(1 for n in graph.graph.node
               if n.op_type in QDQ_OPS and n.input and n.input[0] in plan.gelu_tensors)


def _kept_layers(plan: QuantPlan, kept: Sequence[str]) -> tuple[str, ...]:
    """The product nodes of the kept modules, for the bundle's layer precisions."""
    return tuple(s.node for s in plan.skipped if s.module is not None
                 and any(s.module == k or s.module.startswith(k + ".") for k in kept))


def _write_cache(text: str, graph: Path, o: ExportOptions, route: QuantRoute, run: Run
                 ) -> Path | None:
    """The calibration cache of a TensorRT 7.x INT8 graph: into the bundle (`--bundle`,
    written with it), else beside the graph (planned with the outputs: output_plan); the
    file written, or None (the bundle's)."""
    where = "into the device bundle" if o.bundle else "beside the graph"
    run.add_notes([Note(f"TensorRT {route.trt_version} takes no Q/DQ: the graph stays fp32 "
                        "and TensorRT builds INT8 from a calibration cache, written "
                        f"{where} (trtexec --int8 --calib=FILE)", "quantize-calibration-cache")])
    if o.bundle:
        return None
    out = calibration_cache_file(graph)
    run.say(f"writing {out}")
    write_text_atomic(text, out)
    return out


def quantize_graph(request: Request[ExportOptions], saved: SavedGraph, inputs: ExportInputs,
                   run: Run) -> tuple[SavedGraph, Quantization]:
    """The graph at `saved.path` quantized for its target and written in its place, and what
    quantizing it made and found."""
    o = request.options
    precision = str(o.precision)
    route = route_for(saved.profile, precision)
    model = onnx.load(str(saved.path))
    refuse_dynamic_cache(route, _symbolic_inputs(model))
    calib, held, label, real = _feeds(inputs, o)
    sized, sizes = _sized_feeds(inputs)
    if sized:  # the verdict runs where parity would: the --dynamic sizes
        held = [*held, *sized]
        run.note(f"the {precision} verdict also ran at the dynamic sizes {'; '.join(sizes)}",
                 "quantize-dynamic-sizes")
    if not real:
        run.note(GENERATED_NOTE, "quantize-generated-calibration")
    auto = AUTO_KEEP in o.keep_precision
    keep = () if auto else tuple(o.keep_precision)
    every = plan_quantization(model, precision)  # every module's products, kept or not
    plan = every.without(keep) if keep else every
    method = method_for(precision, o.calibrator)
    run.say(f"calibrating {len(every.activations)} activation(s) on {len(calib)} feed(s) "
            f"({method})")
    graph_calib = [deployed_feed(f, model) for f in calib]
    ranges = calibrate(model, every.activations, graph_calib, method)
    sim, sim_route = _simulation(model, route)
    sim_every = every if sim is model else plan_quantization(sim, precision)
    sim_plan = sim_every.without(keep) if keep else sim_every
    ranking: tuple[ModuleSensitivity, ...] = ()
    auto_result, kept = None, keep
    if auto or keep:
        run.say(f"measuring {len(every.modules)} module(s)' sensitivity")
        ranking = tuple(sensitivity(sim, sim_every, ranges, sim_route, graph_calib))
    if auto:
        target = o.target_sqnr if o.target_sqnr is not None else DEFAULT_TARGET_SQNR_DB
        run.say(f"keeping the most sensitive modules until {target:g} dB")
        mixed = auto_keep(sim, sim_plan, ranges, sim_route, graph_calib, target_db=target,
                          ranking=ranking)
        kept = mixed.kept
        auto_result = AutoKeep(target, mixed.sqnr_db, mixed.kept, mixed.steps)
        run.note(mixed.summary(), "quantize-auto-keep")
        plan, sim_plan = plan.without(kept), sim_plan.without(kept)
    quantized = lower(model, plan, ranges, route)
    judged = quantized.model if sim is model else lower(sim, sim_plan, ranges, sim_route).model
    run.say(f"judging the {precision} graph on {len(held)} feed(s)")
    graph_held = [deployed_feed(f, judged) for f in held]
    measured = quality(run_graph(model if sim is model else sim, graph_held),
                       run_graph(judged, graph_held))
    verdict = None
    not_judged = not_judgeable(inputs.loaded)
    if not not_judged:
        verdict = judge_qdq(inputs.loaded, judged, held, o.threads, unquantized=sim)
    problems = incompatibilities(quantized.model, saved.profile)
    if problems:
        raise TargetUnmetError(f"the {precision} graph does not fit {saved.profile.name}: "
                               f"{'; '.join(problems)} (a bug in export-gelu; please report it)")
    if quantized.model is not model:
        with run.step("save"):
            save(quantized.model, saved.path, run)
    cache_file = None
    if route.kind == CALIBRATION_CACHE and quantized.calibration_cache is not None:
        cache_file = _write_cache(quantized.calibration_cache, saved.path, o, route, run)
    for skipped in quantized.skipped:
        run.note(f"not quantized: {skipped}", "quantize-skipped")
    written = quantized.model
    saved = dataclasses.replace(saved, graph=skeleton(written), opset=model_opset(written),
                                op_counts=dict(op_counts(written)),
                                compatibility={saved.profile.name: problems})
    result = Quantization(
        route, method, label, real, len(calib), len(held), quantized.quantized_products,
        plan.weight_products, _gelu_qdq(judged, plan), tuple(kept),
        _kept_layers(plan, kept), ranking, auto_result, verdict,
        JUDGED_BY + (SIMULATED if sim is not model else ""), not_judged,
        quantized.calibration_cache, measured, cache_file)
    return saved, result
