"""pipeline/checking.py's stages on hand-built states: check (parity of the written graph
against the reference, through the one checker) and check_shapes (parity at every size of
the --dynamic ranges)."""

from __future__ import annotations

import shutil
from pathlib import Path

import onnx

from export_gelu.exporter.feeds.dynamic import plan_dynamic
from export_gelu.pipeline.checking import check, check_shapes
from export_gelu.pipeline.state import RunState
from tests.steps.step_inputs import export_state, onnx_model, scaled_weights, with_loaded


def _checked_state(tmp_path: Path, written: Path | None = None) -> RunState:
    """An ONNX input (its own reference) and the graph the export wrote (a copy of it, or
    `written`)."""
    model = onnx_model(tmp_path)
    state = with_loaded(export_state(model, tmp_path))
    state.output = tmp_path / "out.onnx"
    shutil.copyfile(written or model, state.output)
    state.graph = onnx.load(str(state.output))
    return state


def test_check_passes_the_same_graph_on_every_runner(tmp_path: Path) -> None:
    state = _checked_state(tmp_path)
    check(state)
    parity = state.report.parity
    assert parity.status == "passed", parity.reason
    assert parity.runners == ["input-onnx", "onnxruntime"]
    (out,) = parity.outputs.values()
    assert out.max_abs < 1e-6 and out.elements == 2 * 4 * 16
    assert (parity.atol, parity.rtol) == (1e-4, 1e-3)  # fp32's, no GELU form changed
    assert state.reference is not None and state.reference.name == "input-onnx"
    assert state.report.providers["onnxruntime"]["parity"] == "passed"
    assert set(state.report.latency) == {"input-onnx", "onnxruntime"}


def test_check_fails_a_wrong_graph_naming_the_output(tmp_path: Path) -> None:
    wrong = scaled_weights(onnx_model(tmp_path, name="src.onnx"), tmp_path / "wrong.onnx", 1.5)
    state = _checked_state(tmp_path, wrong)
    check(state)
    parity = state.report.parity
    assert parity.status == "failed"
    (name, out), = parity.outputs.items()
    assert not out.passed and out.max_abs > 0.1
    assert name in parity.reason
    assert state.report.exit_code == 1


def _symbolic_batch(src: Path, dst: Path) -> Path:
    model = onnx.load(str(src))
    for value in (*model.graph.input, *model.graph.output):
        value.type.tensor_type.shape.dim[0].dim_param = "batch"
    onnx.save(model, dst)
    return dst


def test_check_shapes_checks_each_size_of_the_range(tmp_path: Path) -> None:
    model = _symbolic_batch(onnx_model(tmp_path, name="fixed.onnx"), tmp_path / "dyn.onnx")
    state = with_loaded(export_state(model, tmp_path, dynamic=("batch=1:2:5",)))
    state.dynamic = plan_dynamic(state.loaded, state.checked.dynamic, [], None)[0]
    state.output = tmp_path / "out.onnx"
    shutil.copyfile(model, state.output)
    state.graph = onnx.load(str(state.output))
    state.report.parity.status = "passed"  # the main check ran
    check_shapes(state)
    shapes = state.report.dynamic["shapes"]
    sizes = sorted(s["sizes"]["batch"] for s in shapes)
    assert sizes[0] == 1 and sizes[-1] == 5 and 2 in sizes
    for entry in shapes:
        assert entry["inputs"]["x"] == [entry["sizes"]["batch"], 4, 16]
        assert entry["onnxruntime"]["status"] == "passed"
        assert entry["onnxruntime"]["max_abs"] < 1e-5
    assert state.report.dynamic["dims"][0]["name"] == "batch"
    assert state.report.parity.status == "passed"
