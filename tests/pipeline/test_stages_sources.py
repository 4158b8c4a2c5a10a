"""pipeline/sources.py's stages on hand-built states: load (the model file and what the
report learns of it) and export_inputs (dynamic plan, feed, call plan, reference module,
precision)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from export_gelu.errors import BadInputError
from export_gelu.options import ExportOptions
from export_gelu.pipeline.sources import export_inputs, load
from tests.steps.step_inputs import (
    TINY_SHAPE,
    export_state,
    onnx_model,
    state_for,
    verify_state,
)


def test_load_reads_an_onnx_file_and_tells_the_report_its_format(tmp_path: Path) -> None:
    model = onnx_model(tmp_path)
    state = export_state(model, tmp_path)
    load(state)
    assert state.loaded.is_onnx and state.is_onnx and not state.is_torch
    assert state.loaded.path == model
    assert state.report.model_format == state.loaded.format.value == "ONNX"
    assert state.report.task is None


def test_load_reads_an_exported_program_with_its_example_inputs(program: Path,
                                                                tmp_path: Path) -> None:
    state = export_state(program, tmp_path)
    load(state)
    assert state.is_torch and state.loaded.exported is not None
    assert state.report.model_format == "ExportedProgram"
    (example,) = state.loaded.example_inputs
    assert tuple(example.shape) == TINY_SHAPE


def test_load_keeps_a_model_already_loaded(program: Path, tmp_path: Path) -> None:
    state = export_state(program, tmp_path)
    load(state)
    first = state.loaded
    load(state)  # --gelu auto and compare-forms load once for several runs
    assert state.loaded is first


def test_load_refuses_a_multi_graph_task_outside_export(tmp_path: Path) -> None:
    """A folder task with several graphs (a BART with past: encoder, decoder, decoder with
    past) is export's only: the stage says so (exit 2)."""
    from examples.hf_folders import save_folder

    folder = save_folder("bart", tmp_path / "bart")
    state = verify_state(folder, onnx_model(tmp_path, name="dep.onnx"))
    with pytest.raises(BadInputError, match="task text2text-generation-with-past exports 3 "
                                            "graphs; verify and --compare-forms take a "
                                            "one-graph task"):
        load(state)


def test_export_inputs_makes_the_feed_at_the_input_shape_in_forward_order(
        tmp_path: Path) -> None:
    state = export_state(onnx_model(tmp_path), tmp_path, inputs=("x:2x4x16:float32:-1,1",))
    load(state)
    export_inputs(state)
    assert list(state.feed) == ["x"] and state.feed["x"].shape == (2, 4, 16)
    assert -1 <= state.feed["x"].min() and state.feed["x"].max() <= 1
    assert state.feed["x"].dtype == np.float32
    assert state.call_plan.positional == ("x",) and not state.call_plan.uses_keywords
    assert not state.dynamic.dims and state.cast is None and state.real_inputs is False
    assert state.reference_module is None  # an ONNX input is its own reference
    assert state.run_precision == "fp32"
    assert list(state.report.generated_inputs) == ["x"]


def test_export_inputs_of_a_program_uses_its_example_and_module(program: Path,
                                                                 tmp_path: Path) -> None:
    state = export_state(program, tmp_path)
    load(state)
    export_inputs(state)
    assert state.feed["x"].shape == TINY_SHAPE
    assert state.report.generated_inputs == {}  # the model's own example, not made up
    assert isinstance(state.reference_module, torch.nn.Module)
    assert state.run_precision == "fp32"


def test_export_inputs_from_an_npz_is_real_data(tmp_path: Path) -> None:
    data = np.full(TINY_SHAPE, 0.5, np.float32)
    np.savez(tmp_path / "in.npz", x=data)
    opts = ExportOptions(target="ort", output=str(tmp_path / "out.onnx"),
                         inputs_npz=str(tmp_path / "in.npz"))
    state = state_for(opts, onnx_model(tmp_path))
    load(state)
    export_inputs(state)
    assert state.real_inputs is True and state.report.generated_inputs == {}
    np.testing.assert_array_equal(state.feed["x"], data)
