"""steps/torch_graph.py: capture (torch.export), fx_passes (the fx GELU sites) and export (the
ONNX graph, named as the model names its outputs); from_torch runs the three."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import torch

from export_gelu.run import Run
from export_gelu.steps.torch_graph import capture, export, from_torch, fx_passes
from tests.onnx_graphs import run_ort
from tests.steps.step_inputs import export_inputs_of, export_request, tiny_module


def test_capture_gives_the_program_and_the_module(program: Path, tmp_path: Path) -> None:
    run = Run()
    captured = capture(export_inputs_of(export_request(program, tmp_path)), "fp32", run)
    assert captured.program is not None and captured.big is False
    x = torch.randn(2, 4, 16)
    with torch.no_grad():
        torch.testing.assert_close(captured.module(x), tiny_module()(x))
    assert "fx-passes-skipped" not in [n.code for n in run.notes]


def test_fx_passes_find_the_tanh_gelu_of_module_act(program: Path, tmp_path: Path) -> None:
    inputs = export_inputs_of(export_request(program, tmp_path))
    captured = capture(inputs, "fp32", Run())
    (site,), opset = fx_passes(captured, inputs, "keep", 17, Run())
    assert (site.kind, site.module, site.level, site.action) == ("tanh", "act", "fx", "kept")
    assert opset == 17  # no ranged dims, not big: no detour through opset 18


def test_fx_passes_lower_the_form_asked(program: Path, tmp_path: Path) -> None:
    inputs = export_inputs_of(export_request(program, tmp_path))
    (site,), _ = fx_passes(capture(inputs, "fp32", Run()), inputs, "erf", 20, Run())
    assert site.kind == "tanh" and "erf" in site.action and site.added_max_error > 0


def test_export_writes_a_graph_that_matches_the_module(program: Path, tmp_path: Path) -> None:
    request = export_request(program, tmp_path, target="ort", output_names="y")
    inputs = export_inputs_of(request)
    captured = capture(inputs, "fp32", Run())
    exported = export(captured, inputs, request, opset=18, output=tmp_path / "o.onnx",
                      run=Run())
    assert exported.exporter == "dynamo" and exported.model.opset_import[0].version == 18
    assert [o.name for o in exported.model.graph.output] == ["y"]
    x = inputs.feed["x"]
    (got,) = run_ort(exported.model, {"x": x}, optimize=False)
    with torch.no_grad():
        want = tiny_module()(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(got, want, atol=1e-5)


def test_export_falls_back_to_torchscript_below_opset_18(program: Path, tmp_path: Path) -> None:
    """Without a captured program (capture failed), the TorchScript exporter exports the
    module at opset 17, said in a note."""
    request = export_request(program, tmp_path, target="ort")
    inputs = export_inputs_of(request)
    captured = dataclasses.replace(capture(inputs, "fp32", Run()), program=None)
    run = Run()
    exported = export(captured, inputs, request, opset=20, output=tmp_path / "o.onnx", run=run)
    assert exported.model.opset_import[0].version == 17
    assert "torchscript-exporter" in [n.code for n in run.notes]
    assert exported.exporter == "torchscript"
    assert {n.op_type for n in exported.model.graph.node} >= {"Tanh"}


def test_from_torch_times_capture_fx_passes_and_export(program: Path, tmp_path: Path) -> None:
    request = export_request(program, tmp_path, target="onnx")
    run = Run()
    made = from_torch(request, export_inputs_of(request), tmp_path / "o.onnx", run)
    assert list(run.seconds) == ["capture", "fx_passes", "export"]
    assert [s.module for s in made.fx_sites] == ["act"] and made.exporter == "dynamo"
