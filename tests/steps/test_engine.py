"""steps/engine.py: a TensorRT engine built from a tiny graph with the installed TensorRT.
Marked `trt` (`make test-gpu`); elsewhere skipped with the reason."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from export_gelu.check.runners.trt_runner import installed_profile, trt_unavailable_reason
from export_gelu.run import Run
from export_gelu.steps.engine import build_engine
from tests.steps.step_inputs import export_inputs_of, export_request, onnx_model, saved_graph

WHY_NOT = trt_unavailable_reason()


@pytest.mark.trt
@pytest.mark.skipif(WHY_NOT is not None, reason=f"needs tensorrt and a CUDA GPU: {WHY_NOT}")
def test_build_engine_builds_and_saves_the_engine(tmp_path: Path) -> None:
    builder = installed_profile()
    assert builder is not None
    model = onnx_model(tmp_path)
    request = export_request(model, tmp_path, target=builder.name,
                             engine=str(tmp_path / "m.plan"))
    shutil.copyfile(model, tmp_path / "out.onnx")
    engine = build_engine(saved_graph(request, tmp_path / "out.onnx"),
                          export_inputs_of(request), request.options, Run())
    assert engine.engine is not None and engine.saved == tmp_path / "m.plan"
    assert engine.tensorrt == builder.trt_version and engine.engine_here is True
    assert (tmp_path / "m.plan").stat().st_size > 0
