"""pipeline/forms.py's stages (`--compare-forms`, `--gelu auto`'s first part) on hand-built
states: plan_forms, forms_inputs, compare_forms_stage, calibrate_forms."""

from __future__ import annotations

from pathlib import Path

import pytest

from export_gelu.check.devices import resolve_device
from export_gelu.check.input_resolver import EXAMPLES
from export_gelu.errors import BadInputError
from export_gelu.exporter.loading.load import load_model
from export_gelu.options import FormsOptions
from export_gelu.pipeline.commands import new_state
from export_gelu.pipeline.forms import (
    calibrate_forms,
    compare_forms_stage,
    forms_inputs,
    plan_forms,
)
from export_gelu.pipeline.state import RunState
from tests.steps.step_inputs import (
    TINY_SHAPE,
    main_feed,
    onnx_model,
    state_for,
)


def _forms_state(model: Path, **options: object) -> RunState:
    state = state_for(FormsOptions(**options), model, command="compare-forms")
    state.loaded = load_model(model)
    return state


def test_plan_forms_starts_the_comparison_report(program: Path, tmp_path: Path) -> None:
    state = _forms_state(program, targets=("onnx", "trt8.6"), device="cpu")
    plan_forms(state)
    assert state.device.device == "cpu"
    rep = state.report
    assert (rep.command, rep.target) == ("compare-forms", "onnx, trt8.6")
    assert rep.stage_seconds is state.clock.stages


def test_new_state_refuses_a_forms_workdir_that_is_a_file(program: Path,
                                                         tmp_path: Path) -> None:
    """The workdir is checked with the options (options.validate), before any stage runs."""
    (tmp_path / "f").write_text("")
    with pytest.raises(BadInputError) as info:
        new_state(FormsOptions(workdir=str(tmp_path / "f")), program)
    assert str(info.value) == f"{tmp_path / 'f'}: not a directory"
    assert info.value.exit_code == 2


def test_forms_inputs_is_the_models_example(program: Path) -> None:
    state = _forms_state(program)
    forms_inputs(state)
    assert list(state.feed) == ["x"] and state.feed["x"].shape == TINY_SHAPE
    assert state.report.generated_inputs == {}


def test_forms_inputs_refuses_an_onnx_model(tmp_path: Path) -> None:
    state = _forms_state(onnx_model(tmp_path))
    with pytest.raises(BadInputError, match="comparing GELU forms needs the PyTorch model"):
        forms_inputs(state)


def test_compare_forms_stage_measures_each_form(program: Path, tmp_path: Path) -> None:
    """Two forms on one target: each graph's error against the model and its latency."""
    state = _forms_state(program, targets=("onnx",), forms=("keep", "sigmoid"), iterations=2,
                         warmup=0, workdir=str(tmp_path))
    state.device = resolve_device("cpu")
    state.feeds = [main_feed()]
    compare_forms_stage(state)
    result = state.report.forms
    rows = {r.form: r for r in result.rows}
    assert set(rows) == {"keep", "sigmoid"}
    assert rows["keep"].max_abs < 1e-5 < rows["sigmoid"].max_abs < 0.05
    assert all(r.latency is not None and r.ratio >= 1.0 for r in rows.values())
    assert sorted(p.name for p in tmp_path.glob("*.onnx")) == [
        "tiny.keep.onnx.onnx", "tiny.sigmoid.onnx.onnx"]


def test_calibrate_forms_on_the_compared_feed(program: Path) -> None:
    state = _forms_state(program)
    state.feeds = [main_feed()]
    state.inputs_label, state.real_inputs = EXAMPLES, False  # as forms_inputs leaves them
    calibrate_forms(state)
    calibration = state.report.calibration
    assert calibration.inputs == ("the model's own example inputs; not real data, ranges are "
                                  "indicative")
    assert state.report.inputs == ""  # forms_inputs says where the feed came from, not this
    (site,) = calibration.sites
    assert site.module == "act"
