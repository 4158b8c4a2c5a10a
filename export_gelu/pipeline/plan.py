"""Before any work: where the run writes, which device checks it, and whether the engine it
was asked for can be built here. Nothing is written and nothing loaded."""

from __future__ import annotations

from pathlib import Path

from export_gelu.check.devices import resolve_device
from export_gelu.check.parity import skipped
from export_gelu.check.trt_runner import local_engine_blocker, trt_unavailable_reason
from export_gelu.device.bundle import check_bundle_request
from export_gelu.errors import TargetUnmetError
from export_gelu.exporter.save import check_distinct_outputs, check_output_path
from export_gelu.exporter.weight_size import check_disk_for
from export_gelu.pipeline.state import RunState
from export_gelu.report.report import Report


def default_output(model: Path, target: str) -> Path:
    """`model.pt` → `model.<target>.onnx` beside it."""
    return model.with_name(f"{model.stem}.{target}.onnx")


def _export_outputs(state: RunState) -> list[tuple[str, Path]]:
    o = state.options
    return [(flag, Path(p)) for flag, p in (("--output", state.output), ("--report", o.report),
                                            ("--report-md", o.report_md),
                                            ("--engine", o.engine)) if p]


def plan_export(state: RunState) -> None:
    """options → output path, device choice; refuses (exit 2/3) what cannot be done here."""
    o = state.options
    state.profile = state.checked.profile
    state.output = Path(o.output) if o.output else default_output(state.model_path, o.target)
    outputs = _export_outputs(state)
    check_distinct_outputs(outputs)
    for _flag, path in outputs:
        check_output_path(path, [state.model_path])
    state.device = resolve_device(o.device) if o.verify or o.device else None
    if o.bundle:
        check_bundle_request(o.bundle, state.profile)
    why_not = trt_unavailable_reason()
    if wants_engine(state) and o.require_trt and why_not:
        raise TargetUnmetError(f"--require-trt: TensorRT engine build impossible here: "
                               f"{why_not}")
    state.report = Report(model=str(state.model_path), target=state.profile.name,
                          target_note=state.checked.target_note, precision=o.precision,
                          gelu_form=o.gelu, threads=o.threads, options=o.to_json(),
                          device=state.device.to_json() if state.device else {})
    state.report.stage_seconds = state.clock.stages
    if not o.verify:
        state.report.parity = skipped("--no-verify")
    if not wants_engine(state):
        state.report.trt = {"status": "skipped",
                            "reason": f"target {state.profile.name} is not TensorRT"}
    elif why_not:
        state.report.trt = {"status": "skipped", "engine_here": False,
                            "reason": local_engine_blocker_of(state.profile) or why_not}


def check_against_model(state: RunState) -> None:
    """After load: no output may be one of the model's own files, and the disk must hold
    the export (exit 2 before any export work)."""
    for _flag, path in _export_outputs(state):
        check_output_path(path, [state.model_path, *state.loaded.data_files])
    check_disk_for(state.loaded, state.output)


def builds_engine(state: RunState) -> bool:
    """An engine is wanted and the installed TensorRT can build one here."""
    return wants_engine(state) and trt_unavailable_reason() is None


def local_engine_blocker_of(profile: object) -> str | None:
    """Why no engine of the target's own TensorRT version can be built here (None: it can,
    or the target is not TensorRT)."""
    if getattr(profile, "runtime", "") != "trt":
        return None
    return local_engine_blocker(profile.trt_version)  # type: ignore[attr-defined]


def wants_engine(state: RunState) -> bool:
    """A TensorRT engine is part of the run: a TensorRT target, --engine or --require-trt."""
    o = state.options
    return state.checked.profile.runtime == "trt" or bool(o.engine) or o.require_trt
