"""pipeline/graphs.py's stage generation_check on a hand-built state (its decoding of real
with-past graphs runs in test_stages_export_command.py's slow row, where export_each_graph
calls it): what it says when it cannot decode."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from export_gelu.exporter.loading.load import load_model
from export_gelu.pipeline.graphs import checks_generation, generation_check
from tests.steps.step_inputs import export_state


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from examples.hf_folders import save_folder

    return save_folder("gpt2", tmp_path_factory.mktemp("hf") / "gpt2")


def test_a_with_past_folder_is_checked_by_decoding(gpt2: Path, tmp_path: Path) -> None:
    state = export_state(gpt2, tmp_path)
    state.loaded = load_model(gpt2)
    assert state.loaded.task == "text-generation-with-past"
    assert checks_generation(state)


def test_generation_check_after_the_model_was_freed_says_so(gpt2: Path, tmp_path: Path) -> None:
    state = export_state(gpt2, tmp_path)
    state.loaded = load_model(gpt2)
    state.loaded.generation = dataclasses.replace(state.loaded.generation, model=None)
    state.output = tmp_path / "decoder_with_past_model.onnx"  # never read: nothing to decode
    generation_check(state)
    assert state.report.generation["status"] == "skipped"
    assert state.report.generation["reason"] == "the model was freed"
    assert state.report.exit_code == 0
