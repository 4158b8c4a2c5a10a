"""steps/inspect.py (`export-gelu inspect FILE.onnx`), each step called with its arguments:
require_onnx, census, target_verdicts, dry_run."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest

from export_gelu.errors import BadInputError
from export_gelu.exporter.loading.load import load_model
from export_gelu.results.request import source_of
from export_gelu.steps.inspect import census, dry_run, require_onnx, target_verdicts
from export_gelu.targets import PROFILES
from tests.steps.step_inputs import onnx_model, tiny_program


def test_require_onnx_reads_the_graph(tmp_path: Path) -> None:
    model = onnx_model(tmp_path)
    graph = require_onnx(source_of(load_model(model)), model)
    assert [n.op_type for n in graph.graph.node][:2] == ["MatMul", "Add"]


def test_require_onnx_refuses_a_torch_model(tmp_path: Path) -> None:
    model = tiny_program(tmp_path)
    with pytest.raises(BadInputError, match="inspect takes an ONNX file"):
        require_onnx(source_of(load_model(model)), model)


def test_census_counts_ops_and_gelu_sites(tmp_path: Path) -> None:
    model = onnx_model(tmp_path, "erf commuted")
    graph = onnx.load(str(model))
    node = graph.graph.node[0].name
    found = census(graph, model, (node,))
    assert found.opset == 17 and found.ir_version == graph.ir_version
    assert found.op_counts["Erf"] == 1 and found.op_counts["MatMul"] == 1
    assert [s["kind"] for s in found.gelu_sites] == ["exact"]
    assert [n["name"] for n in found.nodes] == [node]


def test_census_refuses_a_node_the_graph_lacks(tmp_path: Path) -> None:
    model = onnx_model(tmp_path)
    with pytest.raises(BadInputError, match="no node named 'no_such_node'"):
        census(onnx.load(str(model)), model, ("no_such_node",))


def test_target_verdicts_judge_each_target(tmp_path: Path) -> None:
    model = onnx_model(tmp_path)
    g20 = onnx.version_converter.convert_version(onnx.load(str(model)), 20)
    verdicts = target_verdicts(g20, (PROFILES["ort"], PROFILES["trt8.2"]))
    assert verdicts.compatibility["ort"] == [] and verdicts.compatibility["trt8.2"]
    assert set(verdicts.engine_here) <= {"trt8.2"}  # opset 20 is beyond TensorRT 8.2


def test_dry_run_says_the_export_would_fit(tmp_path: Path) -> None:
    graph = onnx.load(str(onnx_model(tmp_path)))
    after = dry_run(graph, (PROFILES["ort"], PROFILES["trt8.2"]))
    assert set(after) == {"ort", "trt8.2"}
    for verdict in after.values():
        assert verdict["fits"] is True, verdict
