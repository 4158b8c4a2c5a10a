"""A float64 model cast down on request (`--cast-down`, or `--precision fp16`): the graph is
float32 (fp16), parity is measured against the float64 model, and the report states the
measured error; without the request a float64 model stays float64 (tests/e2e/test_real_models.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from torch import nn

from tests.conftest import note_messages, run_cli

ort = pytest.importorskip("onnxruntime")

NO_TIMING = ("--iterations", "0")


def _double_mlp(path: Path, dtype: torch.dtype = torch.float64) -> Path:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 8)).to(dtype).eval()
    torch.save(model, path)
    return path


def _elem_types(model: onnx.ModelProto) -> set[int]:
    """Every element type the graph states: inputs, outputs, value infos, initializers."""
    infos = [*model.graph.input, *model.graph.output, *model.graph.value_info]
    return {v.type.tensor_type.elem_type for v in infos} | {
        t.data_type for t in model.graph.initializer if t.data_type in
        (onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE, onnx.TensorProto.FLOAT16)}


def _measured(report: dict) -> tuple[float, str]:
    worst = max(o["max_abs"] for o in report["parity"]["outputs"].values())
    (note,) = [n for n in note_messages(report) if n.startswith("cast-down error measured")]
    return worst, note


@pytest.mark.parametrize("target", ["ort", "trt8.2"])
def test_cast_down_exports_float32_and_measures_against_float64(tmp_path: Path, target: str):
    model = _double_mlp(tmp_path / "mlp64.pt")
    x = np.random.default_rng(0).standard_normal((4, 16)) * 3  # float64 in the npz
    np.savez(tmp_path / "x.npz", input_0=x)
    out, rep = tmp_path / "mlp.onnx", tmp_path / "mlp.json"
    res = run_cli(model, "--allow-pickle", "--inputs", tmp_path / "x.npz", "--target", target,
                  "--cast-down", "-o", out, "--report", rep, *NO_TIMING)
    assert res.code == 0, res.err
    graph = onnx.load(str(out))
    assert _elem_types(graph) == {onnx.TensorProto.FLOAT}
    report = json.loads(rep.read_text())
    assert report["parity"]["status"] == "passed"
    assert (report["parity"]["atol"], report["parity"]["rtol"]) == (1e-4, 1e-3)  # fp32's
    assert any("cast down to float32 on request (--cast-down)" in n for n in note_messages(report))
    worst, note = _measured(report)
    assert f"max abs {worst:.3g}," in note
    # the reference is the float64 model: recompute both sides independently
    sess = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    (y32,) = sess.run(None, {sess.get_inputs()[0].name: x.astype(np.float32)})
    with torch.no_grad():
        ref64 = torch.load(model, weights_only=False)(torch.from_numpy(
            x.astype(np.float32).astype(np.float64))).numpy()
    assert worst == pytest.approx(float(np.abs(y32 - ref64).max()), rel=1e-3)
    assert 0 < worst < 1e-5  # a float32 rounding error, measured, not zero


def test_cast_down_of_an_exported_program_with_its_own_inputs(saved_real, tmp_path: Path):
    """The float64 ExportedProgram (keyword input, dict output): its float64 example inputs
    are cast with it; a typed float64 --input is cast as well."""
    model = saved_real("float64_mlp", "exported")
    for extra in ((), ("--input", "x:2x16:float64")):
        out, rep = tmp_path / "e.onnx", tmp_path / "e.json"
        res = run_cli(model, "--target", "onnx", "--cast-down", "-o", out, "--report", rep,
                      *extra, *NO_TIMING)
        assert res.code == 0, res.err
        assert _elem_types(onnx.load(str(out))) == {onnx.TensorProto.FLOAT}
        report = json.loads(rep.read_text())
        assert [o.name for o in onnx.load(str(out)).graph.output] == ["features", "logits"]
        assert report["parity"]["status"] == "passed" and report["parity"]["atol"] == 1e-4
        worst, note = _measured(report)
        assert 0 < worst < 1e-5 and f"max abs {worst:.3g}," in note


def test_fp16_on_a_float64_model_is_a_cast_with_its_error_stated(tmp_path: Path):
    model = _double_mlp(tmp_path / "mlp64.pt")
    out, rep = tmp_path / "h.onnx", tmp_path / "h.json"
    res = run_cli(model, "--allow-pickle", "--input", "x:2x16", "--target", "ort",
                  "--precision", "fp16", "-o", out, "--report", rep, *NO_TIMING)
    assert res.code == 0, res.err
    assert onnx.load(str(out)).graph.input[0].type.tensor_type.elem_type == \
        onnx.TensorProto.FLOAT16
    report = json.loads(rep.read_text())
    assert any("cast down to float16 on request (--precision fp16)" in n
               for n in note_messages(report))
    worst, note = _measured(report)
    assert 1e-5 < worst < 2e-2 and f"max abs {worst:.3g}," in note


def test_cast_down_on_a_float32_model_changes_nothing_and_says_so(tmp_path: Path):
    model = _double_mlp(tmp_path / "mlp32.pt", torch.float32)
    out, rep = tmp_path / "f.onnx", tmp_path / "f.json"
    res = run_cli(model, "--allow-pickle", "--input", "x:2x16", "--target", "onnx",
                  "--cast-down", "-o", out, "--report", rep, *NO_TIMING)
    assert res.code == 0, res.err
    notes = note_messages(json.loads(rep.read_text()))
    assert "--cast-down: nothing cast (the model does not compute in float64)" in notes
    assert not any(n.startswith("cast-down error") for n in notes)


def test_cast_down_refuses_the_form_comparison(tmp_path: Path):
    model = _double_mlp(tmp_path / "mlp64.pt")
    res = run_cli(model, "--allow-pickle", "--cast-down", "--compare-forms")
    assert res.code == 2
    assert "--cast-down applies to one export: drop --compare-forms / --gelu auto" in res.err
