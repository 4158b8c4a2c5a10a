"""The export command as stages, in the three parts other commands reuse: load the model and
its inputs, make the graph (what `--compare-forms` runs once per form), check it."""

from __future__ import annotations

from export_gelu.pipeline import checking, finish, onnx_stages, plan, sources, torch_export, write
from export_gelu.pipeline.engine import trt_build
from export_gelu.pipeline.stage import Stage
from export_gelu.pipeline.state import RunState


def _torch(state: RunState) -> bool:
    return state.is_torch


def _onnx(state: RunState) -> bool:
    return state.is_onnx


def _captured(state: RunState) -> bool:
    return state.is_torch and state.program is not None


def _verifies(state: RunState) -> bool:
    return bool(state.options.verify)


def _bundles(state: RunState) -> bool:
    return bool(state.options.bundle)


def _calibrates(state: RunState) -> bool:
    return bool(state.options.inputs_npz) and state.is_torch


def _not_loaded(state: RunState) -> bool:
    return state.loaded is None


#: From a loaded model and its feed to the written graph: what `--compare-forms` runs once
#: per form on one loaded model.
MAKE_GRAPH = (
    Stage("onnx_input", onnx_stages.onnx_input, applies=_onnx, timed_as="load"),
    Stage("capture", torch_export.capture, applies=_torch),
    Stage("fx_passes", torch_export.fx_passes, applies=_captured),
    Stage("export", torch_export.export, applies=_torch),
    Stage("onnx_passes", onnx_stages.onnx_passes),
    Stage("checks", onnx_stages.target_check),
    Stage("save", write.save),
)

#: From the written graph to the report: engine, parity and latency, bundle, calibration.
CHECK_GRAPH = (
    Stage("trt_build", trt_build, applies=plan.builds_engine),
    Stage("verify", checking.check, applies=_verifies),
    Stage("shapes", checking.check_shapes, applies=checking.checks_shapes, timed_as="verify"),
    Stage("bundle", finish.bundle, applies=_bundles),
    Stage("calibration", finish.calibrate, applies=_calibrates),
    Stage("report", finish.write_report, timed_as=None),
)

#: Where the model and its inputs come from.
LOAD_EXPORT = (
    Stage("load", sources.load, applies=_not_loaded),
    Stage("disk", plan.check_disk, timed_as="load"),
    Stage("inputs", sources.export_inputs, timed_as="load"),
)

EXPORT = (Stage("plan", plan.plan_export, timed_as=None), *LOAD_EXPORT, *MAKE_GRAPH,
          *CHECK_GRAPH)
