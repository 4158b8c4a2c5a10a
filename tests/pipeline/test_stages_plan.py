"""pipeline/plan.py's stages on hand-built states: plan_export (output, device, profile and
the report it starts) and check_disk (the output's disk, before any work)."""

from __future__ import annotations

from pathlib import Path

import pytest

from export_gelu.check.trt_runner import DEVICE_ROUTE, trt_unavailable_reason
from export_gelu.pipeline.plan import check_disk, plan_export
from tests.steps.step_inputs import export_state, onnx_model, with_loaded


def test_plan_export_sets_profile_output_device_and_starts_the_report(tmp_path: Path) -> None:
    model = onnx_model(tmp_path)
    state = export_state(model, tmp_path, target="ort", gelu="tanh", threads=2)
    plan_export(state)
    assert state.profile.name == "ort" and state.profile is state.checked.profile
    assert state.output == tmp_path / "out.onnx"
    assert state.device is not None and state.device.device in ("cpu", "cuda")
    rep = state.report
    assert (rep.model, rep.target, rep.gelu_form, rep.threads) == (str(model), "ort", "tanh", 2)
    assert rep.device == state.device.to_json()
    assert rep.options["target"] == "ort"
    assert rep.trt == {"status": "skipped", "reason": "target ort is not TensorRT"}
    assert rep.parity.status == "skipped" and rep.parity.reason == "not run"
    assert rep.stage_seconds is state.clock.stages  # the one clock
    assert rep.notes == []


def test_plan_export_without_verify_has_no_device_and_says_an_output_is_replaced(
        tmp_path: Path) -> None:
    model = onnx_model(tmp_path)
    (tmp_path / "out.onnx").write_bytes(b"old")
    state = export_state(model, tmp_path, target="onnx", verify=False)
    plan_export(state)
    assert state.device is None and state.report.device == {}
    assert state.report.parity.status == "skipped"
    assert state.report.parity.reason == "--no-verify"
    codes = [n.code for n in state.report.notes]
    assert codes == ["output-replaced"]
    assert "out.onnx existed and was replaced by this export" in state.report.notes[0]


def test_plan_export_for_tensorrt_without_tensorrt_names_the_device_route(
        tmp_path: Path) -> None:
    why = trt_unavailable_reason()
    if why is None:
        pytest.skip("TensorRT can build engines here: the plan keeps report.trt as not run")
    state = export_state(onnx_model(tmp_path), tmp_path, target="trt8.6", verify=False)
    plan_export(state)
    assert state.profile.name == "trt8.6"
    trt = state.report.trt
    assert trt["status"] == "skipped" and trt["engine_here"] is False
    assert trt["device"] == DEVICE_ROUTE and trt["reason"]


def test_check_disk_passes_for_a_small_model_into_a_folder_not_yet_made(tmp_path: Path) -> None:
    state = with_loaded(export_state(onnx_model(tmp_path), tmp_path))
    state.output = tmp_path / "new" / "out.onnx"  # -o new/out.onnx: its folder made later
    check_disk(state)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hand.onnx"]  # nothing written
