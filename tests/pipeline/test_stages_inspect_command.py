"""pipeline/inspect_command.py's stages (`export-gelu inspect FILE.onnx`) on hand-built
states: require_onnx, census, target_verdicts, dry_run."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest

from export_gelu.errors import BadInputError
from export_gelu.exporter.loading.load import load_model
from export_gelu.options import InspectOptions
from export_gelu.pipeline.inspect_command import census, dry_run, require_onnx, target_verdicts
from export_gelu.pipeline.state import RunState
from tests.pipeline.stage_states import onnx_model, state_for, tiny_program


def _inspect_state(model: Path, **options: object) -> RunState:
    state = state_for(InspectOptions(**options), model, command="inspect")
    state.loaded = load_model(model)
    return state


def _with_graph(model: Path, **options: object) -> RunState:
    state = _inspect_state(model, **options)
    state.graph = onnx.load(str(model))
    state.inspection = {"model": str(model)}
    return state


def test_require_onnx_reads_the_graph(tmp_path: Path) -> None:
    model = onnx_model(tmp_path)
    state = _inspect_state(model)
    require_onnx(state)
    assert state.inspection == {"model": str(model)}
    assert [n.op_type for n in state.graph.graph.node][:2] == ["MatMul", "Add"]


def test_require_onnx_refuses_a_torch_model(tmp_path: Path) -> None:
    state = _inspect_state(tiny_program(tmp_path))
    with pytest.raises(BadInputError, match="inspect takes an ONNX file"):
        require_onnx(state)


def test_census_counts_ops_and_gelu_sites(tmp_path: Path) -> None:
    state = _with_graph(onnx_model(tmp_path, "erf commuted"))
    node = state.graph.graph.node[0].name
    state.options = InspectOptions(nodes=(node,))
    census(state)
    found = state.inspection
    assert found["opset"] == 17 and found["ir_version"] == state.graph.ir_version
    assert found["op_counts"]["Erf"] == 1 and found["op_counts"]["MatMul"] == 1
    assert [s["kind"] for s in found["gelu_sites"]] == ["exact"]
    assert [n["name"] for n in found["nodes"]] == [node]


def test_census_refuses_a_node_the_graph_lacks(tmp_path: Path) -> None:
    state = _with_graph(onnx_model(tmp_path), nodes=("no_such_node",))
    with pytest.raises(BadInputError, match="no node named 'no_such_node'"):
        census(state)


def test_target_verdicts_judge_each_target(tmp_path: Path) -> None:
    model = onnx_model(tmp_path)
    g20 = onnx.version_converter.convert_version(onnx.load(str(model)), 20)
    onnx.save(g20, tmp_path / "g20.onnx")
    state = _with_graph(tmp_path / "g20.onnx", targets=("ort", "trt8.2"))
    target_verdicts(state)
    compat = state.inspection["compatibility"]
    assert compat["ort"] == [] and compat["trt8.2"]  # opset 20 is beyond TensorRT 8.2
    assert set(state.inspection["engine_here"]) <= {"trt8.2"}


def test_dry_run_says_the_export_would_fit(tmp_path: Path) -> None:
    model = onnx_model(tmp_path)
    state = _with_graph(model, targets=("ort", "trt8.2"))
    dry_run(state)
    after = state.inspection["after_export"]
    assert set(after) == {"ort", "trt8.2"}
    for verdict in after.values():
        assert verdict["fits"] is True, verdict
