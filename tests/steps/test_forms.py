"""steps/forms.py (`--compare-forms`, `--gelu auto`'s first part): forms_inputs (the feed
every form is measured on), form_request (a form's export over the loaded model), compare
(every form's graph, measured together)."""

from __future__ import annotations

from pathlib import Path

import pytest

from export_gelu.check.runners.devices import resolve_device
from export_gelu.errors import BadInputError
from export_gelu.exporter.capture.shared_capture import SharedCaptures
from export_gelu.exporter.loading.load import load_model
from export_gelu.options import ExportOptions, FormsOptions
from export_gelu.run import Run
from export_gelu.steps.forms import (
    auto_options,
    bundle_forms,
    compare,
    form_options,
    form_request,
    forms_inputs,
)
from export_gelu.steps.request import prepare
from export_gelu.targets import PROFILES
from tests.steps.step_inputs import TINY_SHAPE, onnx_model, source


def test_forms_inputs_is_the_models_example(program: Path) -> None:
    inputs = forms_inputs(source(program), prepare(FormsOptions(), program))
    assert list(inputs.feed) == ["x"] and inputs.feed["x"].shape == TINY_SHAPE
    assert inputs.generated == {} and inputs.real is False


def test_forms_inputs_refuses_an_onnx_model(tmp_path: Path) -> None:
    model = onnx_model(tmp_path)
    with pytest.raises(BadInputError, match="comparing GELU forms needs the PyTorch model"):
        forms_inputs(source(model), prepare(FormsOptions(), model))


def test_a_forms_export_copies_the_program_it_rewrites(program: Path, tmp_path: Path) -> None:
    loaded = load_model(program)
    options = form_options(FormsOptions(), "onnx", "tanh", tmp_path / "t.onnx")
    assert (options.gelu, options.verify, options.output) == ("tanh", False,
                                                              str(tmp_path / "t.onnx"))
    request = form_request(program, loaded, options)
    assert request.in_memory is not None and request.in_memory.exported is not loaded.exported
    assert auto_options(ExportOptions(target="trt8.6", gelu="auto")).targets == ("trt8.6",)
    assert bundle_forms(PROFILES["trt8.6"]) == ("keep", "erf", "tanh", "sigmoid", "plugin")


def test_compare_measures_each_form(program: Path, tmp_path: Path) -> None:
    """Two forms on one target: each graph's error against the model and its latency."""
    request = prepare(FormsOptions(targets=("onnx",), forms=("keep", "sigmoid"), iterations=2,
                                   warmup=0, workdir=str(tmp_path)), program)
    found = source(program)
    result = compare(request, found, forms_inputs(found, request), resolve_device("cpu"),
                     tmp_path, Run(), captures=SharedCaptures())
    rows = {r.form: r for r in result.rows}
    assert set(rows) == {"keep", "sigmoid"}
    assert rows["keep"].max_abs < 1e-5 < rows["sigmoid"].max_abs < 0.05
    assert all(r.latency is not None and r.ratio >= 1.0 for r in rows.values())
    assert sorted(p.name for p in tmp_path.glob("*.onnx")) == [
        "tiny.keep.onnx.onnx", "tiny.sigmoid.onnx.onnx"]
