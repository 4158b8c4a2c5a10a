"""Steps on the ONNX graph: an ONNX input read at the opset it is exported at, the ONNX GELU
passes and the fit to the target, and the static check that the target parses the result."""

from __future__ import annotations

from dataclasses import dataclass

import onnx
import onnx_graphsurgeon as gs

from export_gelu import graph as one_graph
from export_gelu.check.runners.deployed import deployed_feed
from export_gelu.check.runners.trt_runner import check_dynamic
from export_gelu.errors import TargetUnmetError
from export_gelu.exporter.feeds import graph_dims as dyn
from export_gelu.exporter.feeds.dynamic_axes import DynamicAxis
from export_gelu.exporter.loading.onnx_checks import load_onnx_model
from export_gelu.exporter.onnx_export.model_names import apply_output_names
from export_gelu.graph.provenance import name_scopes_from_names
from export_gelu.notes import tagged
from export_gelu.options import ExportOptions
from export_gelu.parse_check import (
    compatibility_table,
    format_targets,
    incompatibilities,
    model_opset,
    op_counts,
)
from export_gelu.passes.compat import fit_to_profile
from export_gelu.passes.compat.opset.upconvert import convert_up, convert_up_for
from export_gelu.passes.gc_pause import gc_paused
from export_gelu.passes.onnx import merge_sites, run_onnx_passes
from export_gelu.passes.onnx.plugin_math import STANDIN_NOTE, plugin_nodes
from export_gelu.passes.sites import GeluSite
from export_gelu.results.export import ExportInputs
from export_gelu.results.request import Request
from export_gelu.run import Run
from export_gelu.targets import TRT_PROFILES, TargetProfile

#: An fp32 ONNX input with --precision fp16: what the precision changes and what it does not.
FP32_ONNX_NOTE = ("the ONNX input is fp32 and stays fp32 (inputs and weights): --precision "
                  "fp16 chose fp16-safe GELU forms (and the plugin's fp16 type); TensorRT "
                  "runs it in fp16 when its builder's fp16 flag is set; ONNX Runtime ran it in "
                  "fp32")
#: The report's `exporter` for an ONNX input.
ONNX_INPUT = "none (ONNX input)"


@dataclass(frozen=True)
class OnnxInput:
    """An ONNX input read for export, and the profile it is fitted to (capped at `--opset`)."""

    model: onnx.ModelProto
    profile: TargetProfile


def onnx_input(request: Request[ExportOptions], inputs: ExportInputs, run: Run) -> OnnxInput:
    """An ONNX input → its graph (dims named, outputs renamed on request), at the opset it is
    exported at; the profile capped there when `--opset` asks for a lower one.

    Without `--opset`: converted up where the target gains from it (native Gelu, its opset
    floor), else as it is. With `--opset N`: converted up to N (exit 3 when that cannot be
    done soundly) or down to N (by the target fit)."""
    o, plan, profile = request.options, inputs.dynamic, request.profile
    model = load_onnx_model(inputs.loaded.path)
    name_scopes_from_names(model.graph)  # a TorchScript export's scoped names, as torch's key
    dyn.name_graph_dims(model, plan.dims)
    run.add_notes(tagged("output-dims", [dyn.name_output_dims(model, plan.ranged)]))
    if plugin_nodes(model) and o.verify:
        run.note(STANDIN_NOTE.format(which="the input (the parity reference)"), "plugin-standin")
    if request.checked.output_names is not None:
        run.add_notes(tagged("output-names", apply_output_names(
            model, request.checked.output_names, forced=True)))
    have = model_opset(model)
    notes: list[str]
    if o.opset is None:
        model, notes = convert_up_for(model, profile, o.gelu, inputs.feed)
    elif o.opset > have:
        model, notes = convert_up(model, o.opset, inputs.feed, f"--opset {o.opset}",
                                  strict=True)
    else:
        notes = [f"--opset {o.opset}: the opset-{have} input converted down to opset "
                 f"{o.opset}"] if o.opset < have else []
    if o.opset is not None:
        profile = profile.at_opset(o.opset)
    run.add_notes(tagged("opset-conversion", notes))
    if o.precision == "fp16" and _float32_inputs(model):
        run.note(FP32_ONNX_NOTE, "onnx-precision-kept")
    return OnnxInput(model, profile)


def _float32_inputs(model: onnx.ModelProto) -> bool:
    """Does the ONNX model take a float32 input?"""
    return any(i.type.tensor_type.elem_type == onnx.TensorProto.FLOAT for i in model.graph.input)


@dataclass(frozen=True)
class Rewritten:
    """The graph's GELU sites as the passes left them, its opset and op counts; `graph`: the
    one graph (export_gelu.graph) the passes edited, for the check after them."""

    graph: gs.Graph
    gelu_sites: list[GeluSite]
    opset: int
    op_counts: dict[str, int]


def onnx_passes(model: onnx.ModelProto, fx_sites: list[GeluSite], profile: TargetProfile,
                options: ExportOptions, run: Run) -> Rewritten:
    """Every GELU of `model` rewritten for the target, then the graph fitted to it (`model`
    is changed in place)."""
    run.say("rewriting GELU sites for the target (ONNX)")
    with gc_paused():  # the one graph: loaded once for the passes and the checks after them
        graph = one_graph.load(model)
        onnx_sites = run_onnx_passes(graph, profile, options.gelu, options.precision or "fp32")[1]
        fit_notes = fit_to_profile(graph, profile)[1]
        one_graph.save(graph, model)
    run.add_notes(tagged("target-fit", fit_notes))
    return Rewritten(graph, merge_sites(fx_sites, onnx_sites), model_opset(model),
                     dict(op_counts(model)))


@dataclass(frozen=True)
class TargetFit:
    """The target's verdict on the graph (its name → [] : it parses as is), and the dynamic
    profile's axes checked against the graph (None: nothing is dynamic)."""

    compatibility: dict[str, list[str]]
    dynamic_profile: list[DynamicAxis] | None


def target_check(model: onnx.ModelProto, rewritten: Rewritten, profile: TargetProfile,
                 inputs: ExportInputs, run: Run) -> TargetFit:
    """The target's static verdict (a failure is export-gelu's bug: exit 3), which TensorRT
    versions parse the graph as is, and the dynamic profile's fit; the one graph is closed
    after (it must not keep the model's weights alive)."""
    try:
        return _target_check(model, rewritten.graph, profile, inputs, run)
    finally:
        one_graph.close(rewritten.graph)


def _target_check(model: onnx.ModelProto, graph: gs.Graph, profile: TargetProfile,
                  inputs: ExportInputs, run: Run) -> TargetFit:
    problems = incompatibilities(model, profile, graph=graph)
    if problems:
        raise TargetUnmetError(f"the produced graph does not fit {profile.name}: "
                               f"{'; '.join(problems)} (a bug in export-gelu; please report it)")
    if profile.runtime == "trt":
        takers = [n for n, r in compatibility_table(model, list(TRT_PROFILES),
                                                    graph=graph).items() if not r]
        run.note(f"TensorRT versions that parse the output as is: {format_targets(takers)}",
                 "trt-takers")
    dplan, axes = inputs.dynamic, None
    if dplan.dims:
        shapes = {n: tuple(a.shape) for n, a in deployed_feed(inputs.feed, model).items()}
        check_dynamic(dplan.axes(), model, shapes)
        axes = list(dplan.axes())
    return TargetFit({profile.name: problems}, axes)


__all__ = ["FP32_ONNX_NOTE", "ONNX_INPUT", "onnx_input", "onnx_passes", "target_check"]
