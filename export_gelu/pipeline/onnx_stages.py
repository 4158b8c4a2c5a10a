"""Stages on the ONNX graph: an ONNX input read at the opset it is exported at, the ONNX
GELU passes and the fit to the target, and the static check that the target parses the
result."""

from __future__ import annotations

import dataclasses

import onnx

from export_gelu import graph as one_graph
from export_gelu.check.deployed import deployed_feed
from export_gelu.check.trt_runner import check_dynamic
from export_gelu.errors import TargetUnmetError
from export_gelu.exporter.feeds import dynamic as dyn
from export_gelu.exporter.loading.load import load_onnx_model
from export_gelu.exporter.onnx_export.model_names import apply_output_names
from export_gelu.graph.provenance import name_scopes_from_names
from export_gelu.notes import Note, tagged
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
from export_gelu.pipeline.stage import stage_io
from export_gelu.pipeline.state import ExportState, need
from export_gelu.targets import TRT_PROFILES


@stage_io(reads=("checked", "dynamic", "feeds", "loaded", "options", "profile"),
          writes=("graph", "profile"))
def onnx_input(state: ExportState) -> None:
    """An ONNX input → graph (dims named, outputs renamed on request), at the opset it is
    exported at; the profile capped there when `--opset` asks for a lower one.

    Without `--opset`: converted up where the target gains from it (native Gelu, its opset
    floor), else as it is. With `--opset N`: converted up to N (exit 3 when that cannot be
    done soundly) or down to N (by the target fit)."""
    o, rep = state.options, state.report
    plan, profile = need(state.dynamic, "dynamic"), need(state.profile, "profile")
    model = load_onnx_model(need(state.loaded, "loaded").path)
    name_scopes_from_names(model.graph)  # a TorchScript export's scoped names, as torch's key
    dyn.name_graph_dims(model, plan.dims)
    rep.notes.extend(tagged("output-dims", [dyn.name_output_dims(model, plan.ranged)]))
    rep.exporter = "none (ONNX input)"
    if plugin_nodes(model) and o.verify:
        rep.notes.append(Note(STANDIN_NOTE.format(which="the input (the parity reference)"),
                              "plugin-standin"))
    if state.checked.output_names is not None:
        rep.notes.extend(tagged("output-names", apply_output_names(
            model, state.checked.output_names, forced=True)))
    have = model_opset(model)
    if o.opset is None:
        model, notes = convert_up_for(model, profile, o.gelu, state.feed)
    elif o.opset > have:
        model, notes = convert_up(model, o.opset, state.feed, f"--opset {o.opset}", strict=True)
    else:
        notes = [f"--opset {o.opset}: the opset-{have} input converted down to opset "
                 f"{o.opset}"] if o.opset < have else []
    if o.opset is not None:
        state.profile = profile.at_opset(o.opset)
    rep.notes.extend(tagged("opset-conversion", notes))
    if o.precision == "fp16" and _float32_inputs(model):
        rep.notes.append(Note(FP32_ONNX_NOTE, "onnx-precision-kept"))
    state.graph = model


#: An fp32 ONNX input with --precision fp16: what the precision changes and what it does not.
FP32_ONNX_NOTE = ("the ONNX input is fp32 and stays fp32 (inputs and weights): --precision "
                  "fp16 chose fp16-safe GELU forms (and the plugin's fp16 type); TensorRT "
                  "runs it in fp16 when its builder's fp16 flag is set; ONNX Runtime ran it in "
                  "fp32")


def _float32_inputs(model: onnx.ModelProto) -> bool:
    """Does the ONNX model take a float32 input?"""
    return any(i.type.tensor_type.elem_type == onnx.TensorProto.FLOAT for i in model.graph.input)


@stage_io(reads=("fx_sites", "graph", "options", "profile"), writes=("gelu_sites", "gs_graph"))
def onnx_passes(state: ExportState) -> None:
    """graph → every GELU rewritten for the target (gelu_sites), then the graph fitted to
    it."""
    rep, model, profile = state.report, need(state.graph, "graph"), need(state.profile, "profile")
    state.progress.step("rewriting GELU sites for the target (ONNX)")
    with gc_paused():  # the one graph: loaded once for the passes and the checks after them
        graph = state.gs_graph = one_graph.load(model)
        onnx_sites = run_onnx_passes(graph, profile, state.options.gelu,
                                     need(state.options.precision, "precision"))[1]
        fit_notes = fit_to_profile(graph, profile)[1]
        one_graph.save(graph, model)
    rep.notes.extend(tagged("target-fit", fit_notes))
    state.gelu_sites = rep.gelu_sites = merge_sites(state.fx_sites, onnx_sites)
    rep.opset = model_opset(model)
    rep.op_counts = dict(op_counts(model))


@stage_io(reads=("dynamic", "feeds", "graph", "gs_graph", "profile"), writes=("gs_graph",))
def target_check(state: ExportState) -> None:
    """graph → the target's static verdict (a failure is export-gelu's bug: exit 3), which
    TensorRT versions parse it as is, and the dynamic profile's fit."""
    try:
        _target_check(state)
    finally:  # done with it: the graph must not keep the model's weights alive after this
        one_graph.close(need(state.gs_graph, "gs_graph"))
        state.gs_graph = None


def _target_check(state: ExportState) -> None:
    rep, profile, model = state.report, need(state.profile, "profile"), need(state.graph, "graph")
    problems = incompatibilities(model, profile, graph=state.gs_graph)
    rep.compatibility = {profile.name: problems}
    if problems:
        raise TargetUnmetError(f"the produced graph does not fit {profile.name}: "
                               f"{'; '.join(problems)} (a bug in export-gelu; please report it)")
    if profile.runtime == "trt":
        takers = [n for n, r in compatibility_table(model, list(TRT_PROFILES),
                                                    graph=state.gs_graph).items() if not r]
        rep.notes.append(Note(f"TensorRT versions that parse the output as is: "
                              f"{format_targets(takers)}", "trt-takers"))
    dplan = need(state.dynamic, "dynamic")
    if dplan.dims:
        shapes = {n: tuple(a.shape) for n, a in deployed_feed(state.feed, model).items()}
        check_dynamic(dplan.axes(), model, shapes)
        rep.dynamic = {"dims": dplan.to_json(), "shapes": [],
                       "profile": [dataclasses.asdict(a) for a in dplan.axes()]}
