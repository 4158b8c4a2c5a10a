"""steps/islands.py: which exports look for fp16 overflow sites (finds_islands), and the
rewrite that keeps them in fp32 (fix_overflow), said in a note when it cannot be done."""

from __future__ import annotations

import shutil
from pathlib import Path

from export_gelu.check.verdict.parity import ParityResult, skipped
from export_gelu.run import Run
from export_gelu.steps.islands import finds_islands, fix_overflow
from tests.steps.step_inputs import export_request, main_feed, onnx_model, saved_graph


def test_finds_islands_only_for_a_checked_fp16_graph_written_here(tmp_path: Path) -> None:
    model = onnx_model(tmp_path)
    shutil.copyfile(model, tmp_path / "out.onnx")
    saved = saved_graph(export_request(model, tmp_path), tmp_path / "out.onnx")
    passed = ParityResult("passed")
    assert finds_islands(saved, "fp16", passed, engine=None)
    assert not finds_islands(saved, "fp32", passed, engine=None)
    assert not finds_islands(saved, "fp16", skipped("--no-verify"), engine=None)
    assert not finds_islands(saved, "fp16", passed, engine=object())  # TensorRT checked it


def test_fix_overflow_of_an_fp32_graph_finds_nothing_to_fix(tmp_path: Path) -> None:
    model = onnx_model(tmp_path)
    run = Run()
    assert fix_overflow(model, main_feed(), run) is None
    assert run.notes == []
