"""The run's state: made with its report, typed per command, and decisions read from its typed
results (parity, GELU sites, streamed weights), never from the report."""

from __future__ import annotations

from pathlib import Path

import pytest

from export_gelu.check.parity import ParityResult, skipped
from export_gelu.errors import failure_outcome
from export_gelu.onnx_weights import WrittenWeights
from export_gelu.options import ExportOptions, FormsOptions, RunOptions, VerifyOptions
from export_gelu.passes.sites import GeluSite
from export_gelu.pipeline.checking import export_tolerances
from export_gelu.pipeline.commands import new_state
from export_gelu.pipeline.islands import finds_islands
from export_gelu.pipeline.localize import localizes
from export_gelu.pipeline.state import ExportState, need, sub_state
from export_gelu.report.report import Report
from export_gelu.tolerances import resolve_tolerances


@pytest.fixture
def model(tmp_path: Path) -> Path:
    path = tmp_path / "model.pt"
    path.write_bytes(b"not read: no stage runs here")
    return path


def _export_state(model: Path, **options: object) -> ExportState:
    return new_state(ExportOptions(target="ort", output=str(model.with_suffix(".onnx")),
                                   **options), model)


@pytest.mark.parametrize("options", [ExportOptions(target="ort", threads=1),
                                     VerifyOptions(threads=1), FormsOptions(threads=1)],
                         ids=["export", "verify", "compare-forms"])
def test_every_command_starts_with_its_report(model: Path, options: RunOptions,
                                              tmp_path: Path) -> None:
    deployed = tmp_path / "deployed.onnx"
    deployed.write_bytes(b"")
    verify = isinstance(options, VerifyOptions)
    state = new_state(options, model, deployed=deployed if verify else None)
    assert isinstance(state.report, Report)
    assert state.report.model == str(model)
    assert state.report.options == options.to_json()
    assert state.report.stage_seconds is state.clock.stages  # the one clock
    assert state.parity is None and state.gelu_sites == [] and state.weights is None


def test_a_sub_state_has_its_own_report_on_the_parents_channels(model: Path) -> None:
    parent = _export_state(model)
    options = ExportOptions(target="ort", gelu="tanh", output=str(model.with_name("f.onnx")))
    sub = sub_state(parent, options, parent.checked, loaded=None, clock=parent.clock)
    assert sub.options is options and sub.model_path == parent.model_path
    assert sub.progress is parent.progress and sub.clock is parent.clock
    assert sub.report is not parent.report and sub.report.options == options.to_json()


def test_localize_applies_on_the_verdict_not_on_the_report(model: Path) -> None:
    state = _export_state(model)
    state.report.parity = ParityResult("failed", "written, but not what decides")
    assert not localizes(state)  # no check ran: no verdict
    state.parity = ParityResult("failed", "max abs 1e-2 > atol")
    state.report.parity = ParityResult("passed")
    assert localizes(state)
    state.parity = ParityResult("passed")
    assert not localizes(state)
    assert localizes(_export_state(model, localize=True)) is False  # --localize: a verdict first
    asked = _export_state(model, localize=True)
    asked.parity = ParityResult("passed")
    assert localizes(asked)


def test_tolerances_widen_by_the_graphs_sites_not_the_reports(model: Path) -> None:
    state = _export_state(model)
    plain = export_tolerances(state)
    assert plain == resolve_tolerances("fp32")
    state.report.gelu_sites = [GeluSite("r", "exact", "nn.GELU", added_max_error=1.0)]
    assert export_tolerances(state) == plain
    state.gelu_sites = [GeluSite("g", "exact", "nn.GELU", "tanh", added_max_error=4.73e-4)]
    assert export_tolerances(state) == resolve_tolerances("fp32", added_error=4.73e-4)
    assert export_tolerances(state).atol > plain.atol


def test_fp16_islands_are_looked_for_by_the_results(model: Path) -> None:
    state = _export_state(model, precision="fp16")
    state.output = model  # a file written here
    state.run_precision = "fp16"
    assert not finds_islands(state)  # not checked yet
    state.parity = ParityResult("passed")
    assert finds_islands(state)
    state.report.weights = {"bytes": 1}  # the report's copy decides nothing
    assert finds_islands(state)
    state.weights = WrittenWeights(tensors=1, bytes=1)  # streamed: a big graph, none looked for
    assert not finds_islands(state)
    state.weights, state.parity = None, skipped("bf16")
    assert not finds_islands(state)


def test_a_field_missing_where_a_stage_needs_it_is_one_internal_error_line() -> None:
    assert need(3, "opset") == 3
    with pytest.raises(RuntimeError) as caught:
        need(None, "graph")
    outcome = failure_outcome(caught.value)
    assert outcome.code == 4
    assert "\n" not in outcome.line
    assert "graph is missing where a stage needs it" in outcome.line
