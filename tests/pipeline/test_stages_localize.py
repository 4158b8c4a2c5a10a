"""pipeline/localize.py's stages on hand-built states: localize_stage (where the written or
deployed graph starts to differ from PyTorch) and localize_device (the same from the
module-boundary tensors a device handed back)."""

from __future__ import annotations

from pathlib import Path

import onnx

from export_gelu.check.deployed import open_deployed
from export_gelu.pipeline.localize import localize_device, localize_stage
from export_gelu.pipeline.state import RunState
from export_gelu.tolerances import resolve_tolerances
from tests.steps.step_inputs import (
    export_state,
    onnx_model,
    scaled_weights,
    verify_state,
    with_loaded,
)


def _export_state(program: Path, graph: Path, tmp_path: Path) -> RunState:
    state = with_loaded(export_state(program, tmp_path, localize=True))
    state.output = graph
    state.graph = onnx.load(str(graph))
    return state


def test_localize_names_the_module_whose_weights_are_wrong(tiny: tuple[Path, Path],
                                                           tmp_path: Path) -> None:
    program, graph = tiny
    wrong = scaled_weights(graph, tmp_path / "wrong.onnx", 1.3)  # fc's weight ×1.3
    state = _export_state(program, wrong, tmp_path)
    localize_stage(state)
    found = state.report.divergence
    assert found.method == "modules", found.reason
    assert found.first is not None and found.first.torch_module == "fc"
    assert found.first.op_type in ("MatMul", "Gemm", "Add") and found.first.max_abs > 0.01
    by_module = {m.module: m for m in found.modules}
    assert not by_module["fc"].passed and by_module["fc"].max_abs > 0.01


def test_localize_on_a_right_graph_finds_no_divergence(tiny: tuple[Path, Path],
                                                       tmp_path: Path) -> None:
    program, graph = tiny
    state = _export_state(program, graph, tmp_path)
    localize_stage(state)
    found = state.report.divergence
    assert found.method == "modules" and found.first is None
    assert {m.module for m in found.modules} == {"fc", "act"}
    assert all(m.passed for m in found.modules)


def test_localize_an_onnx_model_goes_node_by_node(tmp_path: Path) -> None:
    """An ONNX MODEL has no PyTorch modules: DEPLOYED is compared node by node with itself
    run in float64 (wrong weights compute the same there: no divergence)."""
    model = onnx_model(tmp_path)
    wrong = scaled_weights(model, tmp_path / "wrong.onnx", 1.3)
    state = with_loaded(verify_state(model, wrong, localize=True))
    state.deployed = open_deployed(wrong)
    state.tolerances = resolve_tolerances("fp32")
    localize_stage(state)
    found = state.report.divergence
    assert found.method == "nodes", found.reason
    assert found.first is None
    assert found.modules[0].module.startswith("MatMul") and found.modules[0].depth == 0
    assert all(m.passed for m in found.modules)


def test_localize_device_without_module_outputs_says_how_to_get_them(
        tiny: tuple[Path, Path], tmp_path: Path) -> None:
    program, graph = tiny
    state = with_loaded(verify_state(program, graph))
    state.deployed = open_deployed(graph)
    state.tolerances = resolve_tolerances("fp32")
    localize_device(state)
    found = state.report.divergence
    assert found.method == "none"
    assert "run `sh run_on_device.sh localize`" in found.reason
