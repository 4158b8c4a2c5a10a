"""Stages from a torch model to an ONNX graph: capture (torch.export), the fx GELU passes,
and the export itself at the target's opset (dynamo from 18, TorchScript below)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from export_gelu.errors import TargetUnmetError
from export_gelu.exporter.capture.capture import capture as capture_program
from export_gelu.exporter.capture.capture import cast_args, module_for_precision
from export_gelu.exporter.capture.fallback import export_with_fallback
from export_gelu.exporter.feeds import dynamic as dyn
from export_gelu.exporter.loading.model_dtype import feed_precision
from export_gelu.exporter.onnx_export.model_names import apply_output_names, model_output_names
from export_gelu.exporter.onnx_export.to_onnx import DYNAMO_MIN_OPSET, prepare_program_for_opset
from export_gelu.exporter.saving.save import external_data_threshold
from export_gelu.exporter.saving.weight_size import module_weight_bytes
from export_gelu.exporter.saving.workdir import exporting_weights_to, weights_workdir
from export_gelu.notes import Note, tagged
from export_gelu.passes.compat import (
    fit_module_precision,
    fit_program_precision,
)
from export_gelu.passes.fx import run_fx_passes
from export_gelu.pipeline.stage import stage_io
from export_gelu.pipeline.state import ExportState, need

if TYPE_CHECKING:
    import torch

#: Why a big model meant for an opset below 18 is exported at 18 and converted down.
BIG_DOWNCONVERT_NOTE = ("big model: exported with the dynamo exporter at opset {opset}, which "
                        "writes the weights a tensor at a time, then converted down to opset "
                        "{target} (the TorchScript exporter holds a second copy of the weights)")


def torch_args(state: ExportState, module: torch.nn.Module | None) -> tuple[torch.Tensor, ...]:
    """The main feed as torch tensors, floats in the precision `module` computes in."""
    import torch

    precision = feed_precision(module, need(state.options.precision, "precision"))
    return cast_args(tuple(torch.from_numpy(np.ascontiguousarray(a))
                           for a in state.feed.values()), precision)


@stage_io(reads=("call_plan", "dynamic", "feeds", "loaded", "options", "profile", "program"),
          writes=("big", "module", "opset", "program"))
def capture(state: ExportState) -> None:
    """loaded, feed → module (cast for fp16/bf16), program (None when capture fails)."""
    o, rep = state.options, state.report
    loaded, precision = need(state.loaded, "loaded"), need(o.precision, "precision")
    state.opset = o.opset or need(state.profile, "profile").opset
    module = state.module = module_for_precision(loaded, precision)
    rep.notes.extend(tagged("precision-fit", fit_module_precision(module, precision)))
    state.big = module_weight_bytes(module) > external_data_threshold()
    state.progress.step("capturing the model with torch.export")
    dplan = need(state.dynamic, "dynamic")
    state.program, why_not = capture_program(loaded, module, torch_args(state, module),
                                             precision, state.call_plan,
                                             dplan if dplan.ranged else None)
    # (with ranged dims, capture adds the axes torch ties to them to the plan)
    rep.notes.extend(tagged("precision-fit", fit_program_precision(state.program, precision)))
    if state.program is None:
        rep.notes.append(Note(f"fx GELU passes skipped: torch.export capture failed ({why_not}); "
                              "GELU passes ran at the ONNX level only", "fx-passes-skipped"))


@stage_io(reads=("big", "dynamic", "loaded", "opset", "options", "program"),
          writes=("fx_sites", "opset"))
def fx_passes(state: ExportState) -> None:
    """program → its GELUs canonicalized and lowered to the kind asked (fx_sites); the opset
    the exporter works at (dynamo's floor where only it can keep the dims or the weights)."""
    rep, opset = state.report, need(state.opset, "opset")
    ranged = need(state.dynamic, "dynamic").ranged
    state.progress.step("finding and canonicalizing GELU sites (fx)")
    state.fx_sites = run_fx_passes(state.program, state.options.gelu)
    if need(state.loaded, "loaded").format.value == "TorchScript":
        rep.notes.append(Note("TorchScript converted to an ExportedProgram (TS2EPConverter); "
                              "the fx GELU passes ran on it", "torchscript-converted"))
    if opset < DYNAMO_MIN_OPSET and (ranged or state.big):
        note = dyn.DOWNCONVERT_NOTE if ranged else BIG_DOWNCONVERT_NOTE
        rep.notes.append(Note(note.format(opset=DYNAMO_MIN_OPSET, target=opset),
                              "dynamo-opset-then-down"))
        opset = state.opset = DYNAMO_MIN_OPSET  # fit_to_profile converts the graph down to it
    rep.notes.extend(tagged("attention-lowered", prepare_program_for_opset(state.program, opset)))


def _module_to_export(state: ExportState) -> torch.nn.Module | None:
    """What the TorchScript exporter takes when capture failed (None: export the program)."""
    if state.program is not None:
        return None
    loaded = need(state.loaded, "loaded")
    if (need(state.dynamic, "dynamic").ranged and loaded.format.value == "TorchScript"
            and state.module is loaded.module):
        from export_gelu.exporter.loading.load import load_script_module  # exporting a ScriptModule

        return load_script_module(loaded.path, loaded.trusted).eval()
        # leaves it (and its deep copies) failing under inference_mode; the reference keeps
        # an untouched one (loaded, and checked, again)
    return state.module


@stage_io(reads=("big", "call_plan", "checked", "dynamic", "feeds", "loaded", "module", "opset",
                "options", "output", "program"),
          writes=("graph", "opset"))
def export(state: ExportState) -> None:
    """program (or the module) → graph, named as the model names its outputs."""
    rep, dplan, opset = state.report, need(state.dynamic, "dynamic"), need(state.opset, "opset")
    if state.program is None and opset >= DYNAMO_MIN_OPSET:
        opset = state.opset = DYNAMO_MIN_OPSET - 1
        rep.notes.append(Note(f"exported with the TorchScript exporter at opset {opset}",
                              "torchscript-exporter"))
    state.progress.step(f"exporting to ONNX (opset {opset})")
    args = torch_args(state, state.module)
    axes = dyn.torchscript_dynamic_axes(dplan) if state.program is None else None
    with exporting_weights_to(weights_workdir(need(state.output, "output")) if state.big
                              else None):
        model, exporter, notes = export_with_fallback(
            _module_to_export(state), args, list(state.feed), opset,
            program=state.program, plan=state.call_plan, dynamic_axes=axes)
    rep.exporter = exporter
    rep.notes.extend(tagged("exporter-fallback", notes))
    dyn.name_graph_dims(model, dplan.dims)
    rep.notes.extend(tagged("output-dims", [dyn.name_output_dims(model, dplan.ranged)]))
    baked = dyn.static_ranged_axes(model, dplan.dims)
    if baked:
        raise TargetUnmetError(f"the {exporter} exporter made ranged axes static "
                               f"({', '.join(baked)}): the model computes with that size as a "
                               "Python constant; export an nn.Module or ExportedProgram instead")
    own = model_output_names(state.loaded, state.module, state.program, state.call_plan, args)
    given = state.checked.output_names
    rep.notes.extend(tagged("output-names", apply_output_names(
        model, given or own, forced=given is not None, own=own)))
    state.graph = model
