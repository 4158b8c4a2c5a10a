"""pipeline/engine.py's stage trt_build on a hand-built state: a TensorRT engine built from
a tiny graph with the installed TensorRT. Marked `trt` (`make test-gpu`); elsewhere skipped
with the reason."""

from __future__ import annotations

import shutil
from pathlib import Path

import onnx
import pytest

from export_gelu.check.trt_runner import installed_profile, trt_unavailable_reason
from export_gelu.pipeline.engine import trt_build
from tests.steps.step_inputs import export_state, onnx_model, with_loaded

WHY_NOT = trt_unavailable_reason()


@pytest.mark.trt
@pytest.mark.skipif(WHY_NOT is not None, reason=f"needs tensorrt and a CUDA GPU: {WHY_NOT}")
def test_trt_build_builds_and_saves_the_engine(tmp_path: Path) -> None:
    builder = installed_profile()
    assert builder is not None
    model = onnx_model(tmp_path)
    state = with_loaded(export_state(model, tmp_path, target=builder.name,
                                     engine=str(tmp_path / "m.plan")))
    state.output = tmp_path / "out.onnx"
    shutil.copyfile(model, state.output)
    state.graph = onnx.load(str(state.output))
    trt_build(state)
    assert state.engine is not None
    trt = state.report.trt
    assert trt["status"] == "built" and trt["engine"] == str(tmp_path / "m.plan")
    assert trt["tensorrt"] == builder.trt_version and trt["engine_here"] is True
    assert (tmp_path / "m.plan").stat().st_size > 0
