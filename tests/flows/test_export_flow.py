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
from export_gelu.results.export import GraphExport, GraphsExport
from export_gelu.run import Run
from export_gelu.steps.request import prepare
from tests.flows.step_log import StepLog

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
    assert said.index("loading") < said.index("capturing") < said.index("exporting") \
        < said.index("writing") < said.index("checking")
    assert result.notes == tuple(run.notes) and result.verdict.parity.status == "passed"


@pytest.fixture(scope="module")
def bart(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from examples.hf_folders import save_folder

    return save_folder("bart", tmp_path_factory.mktemp("hf") / "bart")


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
def test_several_graphs_are_each_exported_and_checked(bart: Path, tmp_path: Path) -> None:
    result = export(prepare(ExportOptions(target="ort", output=str(tmp_path / "out")), bart),
                    Run())
    assert isinstance(result, GraphsExport) and list(result.parts) == GRAPHS
    rep = build_report(result)
    assert sorted(p.name for p in (tmp_path / "out").glob("*.onnx")) == sorted(GRAPHS)
    assert list(rep.graphs or {}) == GRAPHS and rep.output == str(tmp_path / "out")
    assert rep.task == "text2text-generation-with-past"
    assert rep.parity.status == "passed" and rep.parity.reason == "all 3 graphs passed"
    assert rep.gelu_sites and all(s.module.split(":")[0] in {g[:-5] for g in GRAPHS}
                                  for s in rep.gelu_sites)
    assert rep.generation is not None and rep.generation.status == "passed"
    assert rep.generation.reference == rep.generation.deployed
