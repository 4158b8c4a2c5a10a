"""pipeline/torch_export.py's stages on hand-built states: capture (torch.export), fx_passes
(the fx GELU sites) and export (the ONNX graph, named as the model names its outputs)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from export_gelu.pipeline.state import RunState
from export_gelu.pipeline.torch_export import capture, export, fx_passes
from tests.onnx_graphs import run_ort
from tests.steps.step_inputs import export_state, tiny_module, with_loaded


def _state(program: Path, tmp_path: Path, **options: object) -> RunState:
    return with_loaded(export_state(program, tmp_path, **options))


def test_capture_gives_the_program_and_the_module_at_the_target_opset(program: Path,
                                                                      tmp_path: Path) -> None:
    state = _state(program, tmp_path, target="onnx")
    capture(state)
    assert state.opset == state.profile.opset == 20
    assert state.program is not None and state.module is not None
    assert state.big is False
    x = torch.from_numpy(state.feed["x"])
    with torch.no_grad():
        torch.testing.assert_close(state.module(x), tiny_module()(x))
    assert not [n for n in state.report.notes if n.code == "fx-passes-skipped"]


def test_capture_at_the_opset_asked(program: Path, tmp_path: Path) -> None:
    state = _state(program, tmp_path, target="ort", opset=18)
    capture(state)
    assert state.opset == 18


def test_fx_passes_find_the_tanh_gelu_of_module_act(program: Path, tmp_path: Path) -> None:
    state = _state(program, tmp_path, target="ort")
    capture(state)
    fx_passes(state)
    (site,) = state.fx_sites
    assert (site.kind, site.module, site.level, site.action) == ("tanh", "act", "fx", "kept")
    assert state.opset == state.profile.opset  # no ranged dims, not big: no detour


def test_fx_passes_lower_the_form_asked(program: Path, tmp_path: Path) -> None:
    state = _state(program, tmp_path, target="onnx", gelu="erf")
    capture(state)
    fx_passes(state)
    (site,) = state.fx_sites
    assert site.kind == "tanh" and "erf" in site.action and site.added_max_error > 0


def test_export_writes_a_graph_that_matches_the_module(program: Path, tmp_path: Path) -> None:
    state = _state(program, tmp_path, target="ort", output_names="y")
    capture(state)
    fx_passes(state)
    export(state)
    assert state.report.exporter == "dynamo"
    assert state.graph.opset_import[0].version == state.opset
    assert [o.name for o in state.graph.graph.output] == ["y"]
    x = state.feed["x"]
    (got,) = run_ort(state.graph, {"x": x}, optimize=False)
    with torch.no_grad():
        want = tiny_module()(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(got, want, atol=1e-5)


def test_export_falls_back_to_torchscript_below_opset_18(program: Path, tmp_path: Path) -> None:
    """Without a captured program (capture failed), the TorchScript exporter exports the
    module at opset 17, said in a note."""
    state = _state(program, tmp_path, target="ort")
    capture(state)
    state.program = None  # as when torch.export could not capture the model
    fx_passes_skipped = state.opset
    export(state)
    assert fx_passes_skipped >= 18 and state.opset == 17
    assert "torchscript-exporter" in [n.code for n in state.report.notes]
    assert state.report.exporter == "torchscript"
    assert {n.op_type for n in state.graph.graph.node} >= {"Tanh"}
