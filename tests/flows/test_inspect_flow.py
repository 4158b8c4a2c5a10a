"""flows/inspect.py: `inspect` loads the file as every command does, once, then judges it per
target; the dry run is a step of its own, skipped without `--dry-run`."""

from __future__ import annotations

from export_gelu import api
from export_gelu.flows.inspect import inspect
from export_gelu.options import InspectOptions
from export_gelu.run import Run
from export_gelu.steps.request import prepare
from tests.flows.step_log import StepLog


def test_inspect_loads_once_and_judges_each_target(saved_model, tmp_path):
    src = tmp_path / "m.onnx"
    api.export(saved_model("vit", "exported"), target="onnx", output=src, verify=False)
    log = StepLog()
    info = api.inspect_model(src, ["trt8.6", "trt7.1"], progress=log)
    assert log.loads() == 1 and "dry run of the ONNX passes per target" in log.steps
    assert list(info["compatibility"]) == ["trt8.6", "trt7.1"]
    assert info["after_export"]["trt8.6"]["fits"] and info["gelu_sites"]
    quick = api.inspect_model(src, ["trt8.6"], dry_run=False, progress=(log := StepLog()))
    assert "after_export" not in quick and log.loads() == 1 and len(log.steps) == 1


def test_inspect_times_its_steps(saved_model, tmp_path):
    src = tmp_path / "m.onnx"
    api.export(saved_model("lstm", "exported"), target="onnx", output=src, verify=False)
    run = Run()
    found = inspect(prepare(InspectOptions(targets=("ort",)), src), run)
    assert list(run.seconds) == ["load", "census", "targets", "dry_run"]
    assert found.to_json()["model"] == str(src) and found.after_export is not None
