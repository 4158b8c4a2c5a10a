"""The export command as stages, in the three parts other commands reuse: load the model and
its inputs, make the graph (what `--compare-forms` runs once per form), check it."""

from __future__ import annotations

from export_gelu.pipeline import (
    checking,
    finish,
    graphs,
    localize,
    onnx_stages,
    plan,
    sources,
    torch_export,
    write,
)
from export_gelu.pipeline.engine import trt_build
from export_gelu.pipeline.stage import Stage, stage_io
from export_gelu.pipeline.state import ExportState


def _torch(state: ExportState) -> bool:
    return state.is_torch


def _onnx(state: ExportState) -> bool:
    return state.is_onnx


def _captured(state: ExportState) -> bool:
    return state.is_torch and state.program is not None


def _verifies(state: ExportState) -> bool:
    return bool(state.options.verify)


def _bundles(state: ExportState) -> bool:
    return bool(state.options.bundle)


def _calibrates(state: ExportState) -> bool:
    return bool(state.options.inputs_npz) and state.is_torch


#: From a loaded model and its feed to the written graph: what `--compare-forms` runs once
#: per form on one loaded model.
MAKE_GRAPH: tuple[Stage[ExportState], ...] = (
    Stage("onnx_input", onnx_stages.onnx_input, applies=_onnx, timed_as="load"),
    Stage("capture", torch_export.capture, applies=_torch),
    Stage("fx_passes", torch_export.fx_passes, applies=_captured),
    Stage("export", torch_export.export, applies=_torch),
    Stage("onnx_passes", onnx_stages.onnx_passes),
    Stage("checks", onnx_stages.target_check),
    Stage("save", write.save),
)

#: From the written graph to its verdicts: engine, parity and latency, bundle, calibration.
CHECK_GRAPH: tuple[Stage[ExportState], ...] = (
    Stage("trt_build", trt_build, applies=plan.builds_engine),
    Stage("verify", checking.check, applies=_verifies),
    Stage("shapes", checking.check_shapes, applies=checking.checks_shapes, timed_as="verify"),
    Stage("localize", localize.localize_stage, applies=localize.localizes, timed_as="verify"),
    Stage("bundle", finish.bundle, applies=_bundles),
    Stage("calibration", finish.calibrate, applies=_calibrates),
)
REPORT: Stage[ExportState] = Stage("report", finish.write_report, timed_as=None)
PLAN = Stage("plan", plan.plan_export, timed_as=None)
LOAD: Stage[ExportState] = Stage("load", sources.load)
DISK = Stage("disk", plan.check_disk, timed_as="load")
INPUTS = Stage("inputs", sources.export_inputs, timed_as="load")

#: A with-past graph: greedy decoding in ONNX Runtime against transformers' generate.
GENERATION: Stage[ExportState] = Stage("generation", graphs.generation_check,
                                       applies=graphs.checks_generation, timed_as="verify")

#: One graph of a multi-graph export, on a state of its own (loaded: that graph).
GRAPH_STAGES: tuple[Stage[ExportState], ...] = (PLAN, DISK, INPUTS, *MAKE_GRAPH, *CHECK_GRAPH)


@stage_io(reads=("checked", "loaded", "model_path", "options", "output", "run_precision"),
          writes=("gelu_sites", "parity", "run_precision"))
def export_each_graph(state: ExportState) -> None:
    """A model that exports several graphs: each through GRAPH_STAGES on a state of its own."""
    graphs.export_graphs(state, GRAPH_STAGES)


def _for_one(stage: Stage[ExportState]) -> Stage[ExportState]:
    """`stage`, skipped when the model exports several graphs (each runs it on its own)."""
    return Stage(stage.name, stage.run, timed_as=stage.timed_as,
                 applies=lambda state: not graphs.is_many(state) and stage.applies(state))


EXPORT: tuple[Stage[ExportState], ...] = (PLAN, LOAD, DISK, _for_one(INPUTS),
          Stage("graphs", export_each_graph, applies=graphs.is_many, timed_as=None),
          *(_for_one(s) for s in (*MAKE_GRAPH, *CHECK_GRAPH, GENERATION)),
          REPORT)
