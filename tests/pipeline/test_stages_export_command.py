"""pipeline/export_command.py's stage export_each_graph (a model that exports several
graphs: each through the export stages on a state of its own) on hand-built states, with a
tiny random BART folder (examples/hf_folders.py): encoder, decoder and decoder-with-past."""

from __future__ import annotations

from pathlib import Path

import pytest

from export_gelu.errors import BadInputError
from export_gelu.exporter.loading.load import load_model
from export_gelu.pipeline.export_command import export_each_graph
from export_gelu.pipeline.state import RunState
from tests.steps.step_inputs import export_state

GRAPHS = ["encoder_model.onnx", "decoder_model.onnx", "decoder_with_past_model.onnx"]


@pytest.fixture(scope="module")
def bart(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from examples.hf_folders import save_folder

    return save_folder("bart", tmp_path_factory.mktemp("hf") / "bart")


def _state(folder: Path, tmp_path: Path, **options: object) -> RunState:
    state = export_state(folder, tmp_path, output=str(tmp_path / "out"), **options)
    state.loaded = load_model(folder)
    state.output = tmp_path / "out"
    return state


def test_export_each_graph_refuses_one_graphs_flags(bart: Path, tmp_path: Path) -> None:
    state = _state(bart, tmp_path, inputs=("input_ids:1x4:int64",))
    assert [g.file_name for g in state.loaded.graphs] == GRAPHS
    with pytest.raises(BadInputError, match="exports 3 graphs, each with its own inputs and "
                                            "files; drop --input"):
        export_each_graph(state)
    assert not (tmp_path / "out").exists()


@pytest.mark.slow  # three dynamo exports and a greedy decode: ~20 s; the refusal above is fast
def test_export_each_graph_exports_and_checks_every_graph(bart: Path, tmp_path: Path) -> None:
    state = _state(bart, tmp_path)
    export_each_graph(state)
    rep = state.report
    assert sorted(p.name for p in (tmp_path / "out").glob("*.onnx")) == sorted(GRAPHS)
    assert list(rep.graphs) == GRAPHS and rep.output == str(tmp_path / "out")
    assert rep.task == "text2text-generation-with-past"
    assert rep.parity.status == "passed" and rep.parity.reason == "all 3 graphs passed"
    assert rep.gelu_sites and all(s.module.split(":")[0] in {g[:-5] for g in GRAPHS}
                                  for s in rep.gelu_sites)
    assert rep.generation["status"] == "passed"
    assert rep.generation["generate"] == rep.generation["onnxruntime"]
    assert state.run_precision == "fp32"
