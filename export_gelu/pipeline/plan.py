"""Before any work: where the run writes (its paths were checked by output_plan), which device
checks it, and whether the engine it was asked for can be built here. Nothing is written and
nothing loaded."""

from __future__ import annotations

from export_gelu.check.devices import resolve_device
from export_gelu.check.parity import skipped
from export_gelu.check.trt_runner import (
    DEVICE_ROUTE,
    local_engine_blocker,
    trt_unavailable_reason,
)
from export_gelu.errors import TargetUnmetError
from export_gelu.exporter.saving.weight_size import check_disk_for
from export_gelu.notes import tagged
from export_gelu.output_plan import export_output
from export_gelu.pipeline.stage import stage_io
from export_gelu.pipeline.state import ExportState, need
from export_gelu.report.report import not_tensorrt
from export_gelu.targets import TargetProfile


@stage_io(reads=("checked", "device", "model_path", "options", "output"),
          writes=("device", "output", "parity", "profile"))
def plan_export(state: ExportState) -> None:
    """options → output path, device choice; refuses (exit 2/3) what cannot be done here;
    the report says what is exported for which target."""
    o = state.options
    profile = state.profile = state.checked.profile
    planned = state.checked.outputs
    if planned is not None and planned.folder is not None:  # several graphs: into a folder
        state.output = planned.folder
    else:
        state.output = export_output(o, state.model_path)
    replaced = state.output.is_file()
    state.device = resolve_device(o.device) if o.verify or o.device else None
    why_not = trt_unavailable_reason()
    if wants_engine(state) and o.require_trt and why_not:
        raise TargetUnmetError(f"--require-trt: TensorRT engine build impossible here: "
                               f"{why_not}")
    rep = state.report
    rep.target, rep.target_note = profile.name, state.checked.target_note
    rep.precision, rep.gelu_form = need(o.precision, "precision"), o.gelu
    rep.device = state.device.to_json() if state.device else {}
    if replaced:  # said in one line, not silently
        rep.notes += tagged("output-replaced",
                            [f"{state.output} existed and was replaced by this export"])
    if not o.verify:
        state.parity = rep.parity = skipped("--no-verify")
    if not wants_engine(state):
        rep.trt = {"status": "skipped", "reason": not_tensorrt(profile.name)}
    elif why_not:
        rep.trt = {"status": "skipped", "engine_here": False,
                   "reason": local_engine_blocker_of(profile) or why_not,
                   "device": DEVICE_ROUTE}


@stage_io(reads=("loaded", "output"), writes=())
def check_disk(state: ExportState) -> None:
    """After load: the output's disk must hold the export (exit 2 before any export work)."""
    out = need(state.output, "output")
    check_disk_for(need(state.loaded, "loaded"),
                   out if out.parent.is_dir() else out.parent)  # -o DIR/ to make


def builds_engine(state: ExportState) -> bool:
    """An engine is wanted and the installed TensorRT can build one here."""
    return wants_engine(state) and trt_unavailable_reason() is None


def local_engine_blocker_of(profile: TargetProfile | None) -> str | None:
    """Why no engine of the target's own TensorRT version can be built here (None: it can,
    or the target is not TensorRT)."""
    if profile is None or profile.runtime != "trt":
        return None
    return local_engine_blocker(profile.trt_version)


def wants_engine(state: ExportState) -> bool:
    """A TensorRT engine is part of the run: a TensorRT target, --engine or --require-trt."""
    o = state.options
    return state.checked.profile.runtime == "trt" or bool(o.engine) or o.require_trt
