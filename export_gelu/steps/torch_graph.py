"""From a torch model to an ONNX graph: capture (torch.export), the fx GELU passes, and the
export itself at the target's opset (dynamo from 18, TorchScript below)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import onnx

from export_gelu.errors import TargetUnmetError
from export_gelu.exporter.capture.capture import capture as capture_program
from export_gelu.exporter.capture.capture import module_for_precision
from export_gelu.exporter.capture.fallback import export_with_fallback
from export_gelu.exporter.feeds import graph_dims as dyn
from export_gelu.exporter.loading.model_dtype import feed_precision
from export_gelu.exporter.onnx_export.model_names import apply_output_names, model_output_names
from export_gelu.exporter.onnx_export.to_onnx import DYNAMO_MIN_OPSET, prepare_program_for_opset
from export_gelu.exporter.precision_cast import cast_args
from export_gelu.exporter.saving.save import external_data_threshold
from export_gelu.exporter.saving.weight_size import module_weight_bytes
from export_gelu.exporter.saving.workdir import exporting_weights_to, weights_workdir
from export_gelu.notes import tagged
from export_gelu.options import ExportOptions
from export_gelu.passes.compat import fit_module_precision, fit_program_precision
from export_gelu.passes.fx import run_fx_passes
from export_gelu.passes.sites import GeluSite
from export_gelu.results.export import ExportInputs
from export_gelu.results.request import Request
from export_gelu.run import Run

if TYPE_CHECKING:
    import torch

#: Why a big model meant for an opset below 18 is exported at 18 and converted down.
BIG_DOWNCONVERT_NOTE = ("big model: exported with the dynamo exporter at opset {opset}, which "
                        "writes the weights a tensor at a time, then converted down to opset "
                        "{target} (the TorchScript exporter holds a second copy of the weights)")


@dataclass(frozen=True)
class Captured:
    """The module exported (cast for fp16/bf16), its ExportedProgram (None: capture failed),
    and whether its weights go to external data."""

    module: torch.nn.Module
    program: torch.export.ExportedProgram | None
    big: bool


@dataclass(frozen=True)
class TorchGraph:
    """The exported graph, the fx passes' GELU sites, and the exporter that wrote it."""

    model: onnx.ModelProto
    fx_sites: list[GeluSite]
    exporter: str


def _torch_args(inputs: ExportInputs, module: torch.nn.Module | None, precision: str
               ) -> tuple[torch.Tensor, ...]:
    """The main feed as torch tensors, floats in the precision `module` computes in."""
    import torch

    return cast_args(tuple(torch.from_numpy(np.ascontiguousarray(a))
                           for a in inputs.feed.values()), feed_precision(module, precision))


def capture(inputs: ExportInputs, precision: str, run: Run) -> Captured:
    """The module cast for the precision, captured with torch.export (with ranged dims,
    capture adds the axes torch ties to them to the plan)."""
    loaded = inputs.loaded
    module = module_for_precision(loaded, precision)
    run.add_notes(tagged("precision-fit", fit_module_precision(module, precision)))
    big = module_weight_bytes(module) > external_data_threshold()
    dplan = inputs.dynamic
    program, why_not = capture_program(loaded, module, _torch_args(inputs, module, precision),
                                       precision, inputs.call_plan,
                                       dplan if dplan.ranged else None, say=run.say)
    run.add_notes(tagged("precision-fit", fit_program_precision(program, precision)))
    if program is None:
        run.note(f"fx GELU passes skipped: torch.export capture failed ({why_not}); GELU "
                 "passes ran at the ONNX level only", "fx-passes-skipped")
    return Captured(module, program, big)


def fx_passes(captured: Captured, inputs: ExportInputs, gelu: str, opset: int, run: Run
              ) -> tuple[list[GeluSite], int]:
    """The program's GELUs canonicalized and lowered to the kind asked (its sites), and the
    opset the exporter works at (dynamo's floor where only it keeps the dims or the
    weights)."""
    program = captured.program
    assert program is not None  # (the flow runs the fx passes on a captured program only)
    run.say("finding and canonicalizing GELU sites (fx)")
    sites = run_fx_passes(program, gelu)
    if inputs.loaded.format.value == "TorchScript":
        run.note("TorchScript converted to an ExportedProgram (TS2EPConverter); the fx GELU "
                 "passes ran on it", "torchscript-converted")
    ranged = inputs.dynamic.ranged
    if opset < DYNAMO_MIN_OPSET and (ranged or captured.big):
        note = dyn.DOWNCONVERT_NOTE if ranged else BIG_DOWNCONVERT_NOTE
        run.note(note.format(opset=DYNAMO_MIN_OPSET, target=opset), "dynamo-opset-then-down")
        opset = DYNAMO_MIN_OPSET  # fit_to_profile converts the graph down to it
    run.add_notes(tagged("attention-lowered", prepare_program_for_opset(program, opset)))
    return sites, opset


def _module_to_export(captured: Captured, inputs: ExportInputs) -> torch.nn.Module | None:
    """What the TorchScript exporter takes when capture failed (None: export the program)."""
    if captured.program is not None:
        return None
    loaded = inputs.loaded
    if (inputs.dynamic.ranged and loaded.format.value == "TorchScript"
            and captured.module is loaded.module):
        from export_gelu.exporter.loading.torch_files import (
            load_script_module,  # exporting a ScriptModule
        )

        return load_script_module(loaded.path, loaded.trusted).eval()
        # leaves it (and its deep copies) failing under inference_mode; the reference keeps
        # an untouched one (loaded, and checked, again)
    return captured.module


@dataclass(frozen=True)
class Exported:
    """The graph torch wrote, and by which exporter."""

    model: onnx.ModelProto
    exporter: str


def export(captured: Captured, inputs: ExportInputs, request: Request[ExportOptions], *,
           opset: int, output: Path, run: Run) -> Exported:
    """The program (or the module) as an ONNX graph at `opset`, named as the model names its
    outputs (or `--output-names`)."""
    dplan, program = inputs.dynamic, captured.program
    if program is None and opset >= DYNAMO_MIN_OPSET:
        opset = DYNAMO_MIN_OPSET - 1
        run.note(f"exported with the TorchScript exporter at opset {opset}",
                 "torchscript-exporter")
    run.say(f"exporting to ONNX (opset {opset})")
    args = _torch_args(inputs, captured.module, request.options.precision or "fp32")
    axes = dyn.torchscript_dynamic_axes(dplan) if program is None else None
    with exporting_weights_to(weights_workdir(output) if captured.big else None):
        model, exporter, notes = export_with_fallback(
            _module_to_export(captured, inputs), args, list(inputs.feed), opset,
            program=program, plan=inputs.call_plan, dynamic_axes=axes)
    run.add_notes(tagged("exporter-fallback", notes))
    dyn.name_graph_dims(model, dplan.dims)
    run.add_notes(tagged("output-dims", [dyn.name_output_dims(model, dplan.ranged)]))
    baked = dyn.static_ranged_axes(model, dplan.dims)
    if baked:
        raise TargetUnmetError(f"the {exporter} exporter made ranged axes static "
                               f"({', '.join(baked)}): the model computes with that size as a "
                               "Python constant; export an nn.Module or ExportedProgram instead")
    own = model_output_names(inputs.loaded, captured.module, program, inputs.call_plan, args)
    given = request.checked.output_names
    run.add_notes(tagged("output-names", apply_output_names(
        model, given or own, forced=given is not None, own=own)))
    return Exported(model, exporter)


def from_torch(request: Request[ExportOptions], inputs: ExportInputs, output: Path, run: Run
               ) -> TorchGraph:
    """capture → fx passes (on a captured program) → export, each timed as its own step."""
    o = request.options
    opset = o.opset or request.profile.opset
    with run.step("capture"):
        captured = capture(inputs, o.precision or "fp32", run)
    sites: list[GeluSite] = []
    if captured.program is not None:
        with run.step("fx_passes"):
            sites, opset = fx_passes(captured, inputs, o.gelu, opset, run)
    with run.step("export"):
        exported = export(captured, inputs, request, opset=opset, output=output, run=run)
    return TorchGraph(exported.model, sites, exported.exporter)
