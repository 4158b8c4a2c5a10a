"""Stages from a torch model to an ONNX graph: capture (torch.export), the fx GELU passes,
and the export itself at the target's opset (dynamo from 18, TorchScript below)."""

from __future__ import annotations

from typing import Any

import numpy as np

from export_gelu.errors import TargetUnmetError
from export_gelu.exporter import dynamic as dyn
from export_gelu.exporter.capture import capture as capture_program
from export_gelu.exporter.capture import cast_args, module_for_precision
from export_gelu.exporter.fallback import export_with_fallback
from export_gelu.exporter.model_dtype import feed_precision
from export_gelu.exporter.model_names import apply_output_names, model_output_names
from export_gelu.exporter.saving.save import external_data_threshold
from export_gelu.exporter.saving.weight_size import module_weight_bytes
from export_gelu.exporter.saving.workdir import exporting_weights_to, weights_workdir
from export_gelu.exporter.to_onnx import DYNAMO_MIN_OPSET, prepare_program_for_opset
from export_gelu.notes import Note, tagged
from export_gelu.passes.compat import (
    fit_module_precision,
    fit_program_precision,
)
from export_gelu.passes.fx import run_fx_passes
from export_gelu.pipeline.stage import stage_io
from export_gelu.pipeline.state import RunState

#: Why a big model meant for an opset below 18 is exported at 18 and converted down.
BIG_DOWNCONVERT_NOTE = ("big model: exported with the dynamo exporter at opset {opset}, which "
                        "writes the weights a tensor at a time, then converted down to opset "
                        "{target} (the TorchScript exporter holds a second copy of the weights)")


def torch_args(state: RunState, module: Any) -> tuple[Any, ...]:
    """The main feed as torch tensors, floats in the precision `module` computes in."""
    import torch

    precision = feed_precision(module, state.options.precision)
    return cast_args(tuple(torch.from_numpy(np.ascontiguousarray(a))
                           for a in state.feed.values()), precision)


@stage_io(reads=("call_plan", "dynamic", "feeds", "loaded", "module", "options", "profile",
                "program"),
          writes=("big", "module", "opset", "program"))
def capture(state: RunState) -> None:
    """loaded, feed → module (cast for fp16/bf16), program (None when capture fails)."""
    o, rep = state.options, state.report
    state.opset = o.opset or state.profile.opset
    state.module = module_for_precision(state.loaded, o.precision)
    rep.notes.extend(tagged("precision-fit", fit_module_precision(state.module, o.precision)))
    state.big = module_weight_bytes(state.module) > external_data_threshold()
    state.progress.step("capturing the model with torch.export")
    dplan = state.dynamic
    state.program, why_not = capture_program(state.loaded, state.module,
                                             torch_args(state, state.module), o.precision,
                                             state.call_plan, dplan if dplan.ranged else None)
    # (with ranged dims, capture adds the axes torch ties to them to the plan)
    rep.notes.extend(tagged("precision-fit", fit_program_precision(state.program, o.precision)))
    if state.program is None:
        rep.notes.append(Note(f"fx GELU passes skipped: torch.export capture failed ({why_not}); "
                              "GELU passes ran at the ONNX level only", "fx-passes-skipped"))


@stage_io(reads=("big", "dynamic", "loaded", "opset", "options", "program"),
          writes=("fx_sites", "opset"))
def fx_passes(state: RunState) -> None:
    """program → its GELUs canonicalized and lowered to the kind asked (fx_sites); the opset
    the exporter works at (dynamo's floor where only it can keep the dims or the weights)."""
    rep = state.report
    state.progress.step("finding and canonicalizing GELU sites (fx)")
    state.fx_sites = run_fx_passes(state.program, state.options.gelu)
    if state.loaded.format.value == "TorchScript":
        rep.notes.append(Note("TorchScript converted to an ExportedProgram (TS2EPConverter); "
                              "the fx GELU passes ran on it", "torchscript-converted"))
    if state.opset < DYNAMO_MIN_OPSET and (state.dynamic.ranged or state.big):
        note = dyn.DOWNCONVERT_NOTE if state.dynamic.ranged else BIG_DOWNCONVERT_NOTE
        rep.notes.append(Note(note.format(opset=DYNAMO_MIN_OPSET, target=state.opset),
                              "dynamo-opset-then-down"))
        state.opset = DYNAMO_MIN_OPSET  # fit_to_profile converts the graph down to the target's
    rep.notes.extend(tagged("attention-lowered",
                            prepare_program_for_opset(state.program, state.opset)))


def _module_to_export(state: RunState) -> Any:
    """What the TorchScript exporter takes when capture failed (None: export the program)."""
    if state.program is not None:
        return None
    loaded = state.loaded
    if (state.dynamic.ranged and loaded.format.value == "TorchScript"
            and state.module is loaded.module):
        from export_gelu.exporter.load import load_script_module  # exporting a ScriptModule

        return load_script_module(loaded.path, loaded.trusted).eval()
        # leaves it (and its deep copies) failing under inference_mode; the reference keeps
        # an untouched one (loaded, and checked, again)
    return state.module


@stage_io(reads=("big", "call_plan", "checked", "dynamic", "feeds", "loaded", "module", "opset",
                "options", "output", "program"),
          writes=("graph", "opset"))
def export(state: RunState) -> None:
    """program (or the module) → graph, named as the model names its outputs."""
    rep, dplan = state.report, state.dynamic
    if state.program is None and state.opset >= DYNAMO_MIN_OPSET:
        state.opset = DYNAMO_MIN_OPSET - 1
        rep.notes.append(Note(f"exported with the TorchScript exporter at opset {state.opset}",
                              "torchscript-exporter"))
    state.progress.step(f"exporting to ONNX (opset {state.opset})")
    args = torch_args(state, state.module)
    axes = dyn.torchscript_dynamic_axes(dplan) if state.program is None else None
    with exporting_weights_to(weights_workdir(state.output) if state.big else None):
        model, rep.exporter, notes = export_with_fallback(
            _module_to_export(state), args, list(state.feed), state.opset,
            program=state.program, plan=state.call_plan, dynamic_axes=axes)
    rep.notes.extend(tagged("exporter-fallback", notes))
    dyn.name_graph_dims(model, dplan.dims)
    rep.notes.extend(tagged("output-dims", [dyn.name_output_dims(model, dplan.ranged)]))
    baked = dyn.static_ranged_axes(model, dplan.dims)
    if baked:
        raise TargetUnmetError(f"the {rep.exporter} exporter made ranged axes static "
                               f"({', '.join(baked)}): the model computes with that size as a "
                               "Python constant; export an nn.Module or ExportedProgram instead")
    own = model_output_names(state.loaded, state.module, state.program, state.call_plan, args)
    given = state.checked.output_names
    rep.notes.extend(tagged("output-names", apply_output_names(
        model, given or own, forced=given is not None, own=own)))
    state.graph = model
