"""steps/load.py: the model loaded as every command loads it, by content; its kind (module,
program, ONNX, several graphs) and the loader's notes."""

from __future__ import annotations

from pathlib import Path

import pytest

from export_gelu.errors import BadInputError
from export_gelu.results.request import GraphsSource, OnnxSource, ProgramSource
from export_gelu.run import Run
from export_gelu.steps.load import load, load_one_graph, several_graphs
from tests.flows.step_log import StepLog
from tests.hf_exports import saved_folder
from tests.session_cache import SessionCache
from tests.steps.step_inputs import TINY_SHAPE, export_request, onnx_model, verify_request


def test_load_reads_an_onnx_file(tmp_path: Path) -> None:
    model = onnx_model(tmp_path)
    found = load(export_request(model, tmp_path), Run())
    assert isinstance(found, OnnxSource) and found.kind == "onnx"
    assert found.loaded.path == model and found.loaded.format.value == "ONNX"


def test_load_reads_an_exported_program_with_its_example_inputs(program: Path,
                                                                tmp_path: Path) -> None:
    run = Run()
    found = load(export_request(program, tmp_path), run)
    assert isinstance(found, ProgramSource) and found.loaded.format.value == "ExportedProgram"
    (example,) = found.loaded.example_inputs
    assert tuple(example.shape) == TINY_SHAPE
    assert run.notes == found.loaded.notes  # the loader's notes, said through the run


def test_load_takes_a_model_handed_over(program: Path, tmp_path: Path) -> None:
    import dataclasses

    first = load(export_request(program, tmp_path), Run())
    request = dataclasses.replace(export_request(program, tmp_path), in_memory=first.loaded)
    assert load(request, Run()).loaded is first.loaded  # loaded once for several runs


def test_a_folder_of_several_graphs_is_one_source_and_refused_outside_export(
        session_cache: SessionCache, tmp_path: Path) -> None:
    """A folder task with several graphs (a BART with past: encoder, decoder, decoder with
    past) is export's only (exit 2 for verify and --compare-forms), refused from config.json
    before anything is loaded."""
    folder = saved_folder(session_cache, "bart")  # read-only: nothing here writes to it
    assert several_graphs(export_request(folder, tmp_path)) == (
        "text2text-generation-with-past", 3)
    assert several_graphs(export_request(folder, tmp_path, task="text2text-generation")) == (
        "text2text-generation", 2)
    assert several_graphs(export_request(folder, tmp_path, task="feature-extraction")) is None
    log = StepLog()
    with pytest.raises(BadInputError, match="task text2text-generation-with-past exports 3 "
                                            "graphs; verify and --compare-forms take a "
                                            "one-graph task"):
        load_one_graph(verify_request(folder, onnx_model(tmp_path, name="dep.onnx")), Run(log))
    assert log.steps == []  # said before "loading": no graph was built
    found = load(export_request(folder, tmp_path, output=str(tmp_path / "out")), Run())
    assert isinstance(found, GraphsSource) and len(found.graphs) == 3
    assert [g.file_name for g in found.graphs] == ["encoder_model.onnx", "decoder_model.onnx",
                                                  "decoder_with_past_model.onnx"]


def test_several_graphs_is_none_for_a_file_or_a_model_handed_over(program: Path,
                                                                  tmp_path: Path) -> None:
    import dataclasses

    assert several_graphs(export_request(program, tmp_path)) is None
    request = export_request(onnx_model(tmp_path), tmp_path)
    assert several_graphs(request) is None
    handed = dataclasses.replace(request, in_memory=load(request, Run()).loaded)
    assert several_graphs(handed) is None
