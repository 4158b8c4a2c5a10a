"""flows/export.py, one_graph.py, graphs.py: the export as steps in order, timed under the
report's `stage_seconds` keys; a folder of several graphs exported graph by graph."""

from __future__ import annotations

from pathlib import Path

import pytest

from export_gelu import api
from export_gelu.errors import BadInputError
from export_gelu.flows.export import export
from export_gelu.options import ExportOptions
from export_gelu.report.build import build_report
from export_gelu.results.export import GraphExport
from export_gelu.run import Run
from export_gelu.steps.request import prepare
from tests.flows.step_log import StepLog
from tests.hf_exports import OUTPUT, folder_export, saved_folder
from tests.session_cache import SessionCache

GRAPHS = ["encoder_model.onnx", "decoder_model.onnx", "decoder_with_past_model.onnx"]


def test_an_onnx_input_is_timed_as_load_passes_checks_save(saved_model, tmp_path):
    src = tmp_path / "m.onnx"
    first = api.export(saved_model("vit", "exported"), target="onnx", output=src, verify=False)
    assert first.parity.status == "skipped"
    run = Run()
    result = export(prepare(ExportOptions(target="trt8.6", output=str(tmp_path / "o.onnx"),
                                          verify=False), src), run)
    assert isinstance(result, GraphExport) and result.verdict is None
    assert list(run.seconds) == ["load", "onnx_passes", "checks", "save"]
    assert set(build_report(result).stage_seconds) == {"load", "onnx_passes", "checks", "save"}


def test_a_torch_export_runs_its_steps_in_order(program, tmp_path):
    log = StepLog()
    run = Run(log)
    result = export(prepare(ExportOptions(target="ort", output=str(tmp_path / "o.onnx"),
                                          iterations=2, warmup=0), program), run)
    assert isinstance(result, GraphExport) and result.verdict is not None
    assert list(run.seconds) == ["load", "capture", "fx_passes", "export", "onnx_passes",
                                 "checks", "save", "verify"]
    said = [s.split(" ")[0] for s in log.steps]
    assert "capturing" not in said  # an ExportedProgram is used as loaded
    assert said.index("loading") < said.index("using") < said.index("exporting") \
        < said.index("writing") < said.index("checking")
    assert result.notes == tuple(run.notes) and result.verdict.parity.status == "passed"


@pytest.fixture(scope="module")
def bart(session_cache: SessionCache) -> Path:
    """The tiny BART folder, saved once per test run (read-only: nothing here writes to it)."""
    return saved_folder(session_cache, "bart")


def test_several_graphs_refuse_one_graphs_flags(bart: Path, tmp_path: Path) -> None:
    request = prepare(ExportOptions(target="ort", output=str(tmp_path / "out"),
                                    inputs=("input_ids:1x4:int64",)), bart)
    log = StepLog()
    with pytest.raises(BadInputError, match="exports 3 graphs, each with its own inputs and "
                                            "files; drop --input"):
        export(request, Run(log))
    assert not (tmp_path / "out").exists()
    assert log.loads() == 0  # refused from config.json, before the graphs are built


@pytest.mark.slow  # three dynamo exports and a greedy decode: ~20 s; the refusal above is fast
def test_several_graphs_are_each_exported_and_checked(session_cache: SessionCache) -> None:
    """The folder's export through flows/export.py's steps, shared with
    tests/exporter/test_hf_folders.py's bart-ort row (one export per test run,
    tests/hf_exports.py): what export() returned, and the report built from it."""
    shared = folder_export(session_cache, "bart", "ort")
    assert shared.result == "GraphsExport" and shared.parts == GRAPHS
    rep = shared.report()
    assert sorted(p.name for p in shared.out.glob("*.onnx")) == sorted(GRAPHS)
    assert list(rep.graphs or {}) == GRAPHS and rep.output == OUTPUT
    assert rep.task == "text2text-generation-with-past"
    assert rep.parity.status == "passed" and rep.parity.reason == "all 3 graphs passed"
    assert rep.gelu_sites and all(s.module.split(":")[0] in {g[:-5] for g in GRAPHS}
                                  for s in rep.gelu_sites)
    assert rep.generation is not None and rep.generation.status == "passed"
    assert rep.generation.reference == rep.generation.deployed
    # each graph went through the one-graph steps, timed under the same keys
    assert list(rep.stage_seconds) == ["load", "capture", "fx_passes", "export", "onnx_passes",
                                       "checks", "save", "verify"]
    assert all(seconds >= 0 for seconds in rep.stage_seconds.values())
    # each graph's report times that graph alone; the folder's sums them and adds its own
    # steps (loading the folder; the generation check, timed as verify)
    graphs = list((rep.graphs or {}).values())
    assert len({tuple(g.stage_seconds.values()) for g in graphs}) == len(graphs)
    for key in ("capture", "fx_passes", "export", "onnx_passes", "checks", "save"):
        assert rep.stage_seconds[key] == pytest.approx(
            sum(g.stage_seconds[key] for g in graphs), abs=1e-6), key
    for key in ("load", "verify"):
        assert rep.stage_seconds[key] > sum(g.stage_seconds[key] for g in graphs), key
