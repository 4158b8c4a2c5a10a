"""steps/plan.py: plan_export (where the export writes, the device, what becomes of the
engine) and check_disk (the output's disk, before any work)."""

from __future__ import annotations

from pathlib import Path

from export_gelu.check.runners.trt_runner import trt_unavailable_reason
from export_gelu.exporter.loading.load import load_model
from export_gelu.run import Run
from export_gelu.steps.plan import check_disk, plan_export
from tests.steps.step_inputs import export_request, onnx_model


def test_plan_export_says_where_and_on_which_device(tmp_path: Path) -> None:
    run = Run()
    plan = plan_export(export_request(onnx_model(tmp_path), tmp_path, target="ort"), run)
    assert plan.profile.name == "ort" and plan.output == tmp_path / "out.onnx"
    assert plan.device is not None and plan.device.device in ("cpu", "cuda")
    assert not plan.wants_engine and not plan.builds_engine
    assert run.notes == []


def test_plan_export_without_verify_has_no_device_and_says_an_output_is_replaced(
        tmp_path: Path) -> None:
    (tmp_path / "out.onnx").write_bytes(b"old")
    run = Run()
    plan = plan_export(export_request(onnx_model(tmp_path), tmp_path, target="onnx",
                                      verify=False), run)
    assert plan.device is None
    (note,) = run.notes
    assert note.code == "output-replaced" and "out.onnx existed and was replaced" in note


def test_plan_export_for_tensorrt_wants_an_engine(tmp_path: Path) -> None:
    plan = plan_export(export_request(onnx_model(tmp_path), tmp_path, target="trt8.6",
                                      verify=False), Run())
    assert plan.wants_engine and plan.profile.name == "trt8.6"
    assert plan.trt_missing == trt_unavailable_reason()
    assert plan.builds_engine is (trt_unavailable_reason() is None)


def test_check_disk_passes_for_a_small_model_into_a_folder_not_yet_made(tmp_path: Path) -> None:
    model = onnx_model(tmp_path)
    check_disk(load_model(model), tmp_path / "new" / "out.onnx")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hand.onnx"]  # nothing written


def test_local_engine_blocker_of_a_target() -> None:
    from export_gelu.steps.plan import local_engine_blocker_of
    from export_gelu.targets import PROFILES

    assert local_engine_blocker_of(PROFILES["onnx"]) is None  # not TensorRT: nothing to build
    blocker = local_engine_blocker_of(PROFILES["trt8.2"])
    assert blocker is not None and "TensorRT 8.5 and newer" in blocker  # polygraphy's floor
