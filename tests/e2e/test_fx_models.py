"""Real architectures (transformers configs, random weights) through `export-gelu --target onnx`:
one ONNX `Gelu` per MLP GELU with the right `approximate`, none for CLIP's QuickGELU, ORT
parity with PyTorch; TorchScript inputs through TS2EPConverter, or the stated fallback."""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from torch import nn

from examples import models
from export_gelu.exporter.inputs.specs import make_inputs, parse_input_spec
from tests.conftest import note_messages, run_cli

ALL = {**models.EXAMPLES, **models.MORE_EXAMPLES}
ARCHITECTURES = ["bert", "gpt2", "vit", "clip", "bloom", "gemma"]
#: The activation module classes the MLPs of these architectures use, and their kind.
MLP_ACTIVATIONS = {"GELUActivation": "exact", "NewGELUActivation": "tanh",
                   "QuickGELUActivation": "quick", "BloomGelu": "tanh", "GELUTanh": "tanh"}


def _inputs(name: str) -> tuple[torch.Tensor, ...]:
    arrays = make_inputs([parse_input_spec(ALL[name].input_spec)])
    return tuple(torch.from_numpy(np.ascontiguousarray(a)) for a in arrays.values())


def _mlp_activations(model: nn.Module) -> list[str]:
    """The kind of every MLP activation module in the model, read off the model itself."""
    return [MLP_ACTIVATIONS[type(m).__name__] for m in model.modules()
            if type(m).__name__ in MLP_ACTIVATIONS]


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory):
    """exported(name) → (path of the saved ExportedProgram, the eager model)."""
    root = tmp_path_factory.mktemp("fx_models")
    cache: dict[str, tuple[Path, nn.Module]] = {}

    def get(name: str) -> tuple[Path, nn.Module]:
        if name not in cache:
            model = getattr(models, name)()
            path = root / f"{name}.pt"
            with torch.no_grad():
                torch.export.save(torch.export.export(model, _inputs(name), strict=False),
                                  str(path))
            cache[name] = (path, model)
        return cache[name]

    return get


def _ort_vs_eager(model: nn.Module, name: str, onnx_path: Path) -> float:
    """Max abs error of ONNX Runtime on the produced file vs eager PyTorch, scaled."""
    import onnxruntime as ort

    args = _inputs(name)
    with torch.no_grad():
        ref = model(*args).numpy()
    sess = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    out = sess.run(None, {i.name: a.numpy() for i, a in zip(sess.get_inputs(), args)})[0]
    return float(np.abs(out - ref).max() / max(1.0, np.abs(ref).max()))


def _gelu_nodes(path: Path) -> tuple[list[str], Counter]:
    nodes = onnx.load(str(path)).graph.node
    approx = [{a.name: a.s.decode() for a in n.attribute}.get("approximate", "none")
              for n in nodes if n.op_type == "Gelu"]
    return approx, Counter(n.op_type for n in nodes)


@pytest.mark.parametrize("name", ARCHITECTURES)
def test_one_onnx_gelu_per_mlp_gelu_and_ort_parity(name: str, exported, tmp_path):
    path, model = exported(name)
    activations = _mlp_activations(model)
    assert len(activations) == ALL[name].gelu_sites and set(activations) == {ALL[name].gelu_kind}

    out, rep = tmp_path / f"{name}.onnx", tmp_path / "r.json"
    res = run_cli(path, "--target", "onnx", "-o", out, "--report", rep, "--iterations", "2",
                  "--warmup", "1")
    assert res.code == 0, res.err + res.out
    report = json.loads(rep.read_text())
    assert report["parity"]["status"] == "passed"
    assert _ort_vs_eager(model, name, out) < 1e-4

    approx, ops = _gelu_nodes(out)
    gelus = [k for k in activations if k != "quick"]
    assert approx == ["tanh" if k == "tanh" else "none" for k in gelus]
    sites = report["gelu_sites"]
    assert sorted(s["kind"] for s in sites) == sorted(activations)
    assert all(s["level"] == "fx" and s["module"] for s in sites)
    if name == "clip":  # QuickGELU stays x*sigmoid(1.702x): no Gelu, one Sigmoid per MLP
        assert ops["Sigmoid"] == len(activations)
        assert all(s["action"].startswith("kept") for s in sites)
    if name in ("gpt2", "bloom"):  # hand-written tanh formulas: nothing of them left
        assert ops["Pow"] == 0 and ops["Tanh"] == 0
        assert all(s["action"].startswith("canonicalized to aten.gelu(approximate=tanh)")
                   for s in sites)


def test_gpt2_torchscript_goes_through_ts2ep_and_the_fx_passes(saved_model, tmp_path):
    out, rep = tmp_path / "g.onnx", tmp_path / "r.json"
    res = run_cli(saved_model("gpt2", "torchscript"), "--target", "onnx", "-o", out,
                  "--report", rep, "--input", models.EXAMPLES["gpt2"].input_spec,
                  "--iterations", "2", "--warmup", "1")
    assert res.code == 0, res.err + res.out
    report = json.loads(rep.read_text())
    assert report["model_format"] == "TorchScript"
    assert any("TS2EPConverter" in n for n in note_messages(report))
    assert [s["kind"] for s in report["gelu_sites"]] == ["tanh", "tanh"]
    assert all(s["level"] == "fx" for s in report["gelu_sites"])
    approx, ops = _gelu_nodes(out)
    assert approx == ["tanh", "tanh"] and ops["Pow"] == 0 and ops["Tanh"] == 0
    assert report["parity"]["status"] == "passed"


class DataDependentLoop(nn.Module):
    """A scripted module TS2EPConverter rejects (prim::Loop), with a gelu_new formula."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc(x)
        for i in range(int(h.shape[0])):
            if bool(h[i].sum() > 100.0):
                h = h * 0.5
        return 0.5 * h * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi)
                                           * (h + 0.044715 * torch.pow(h, 3.0))))


def test_torchscript_the_converter_rejects_says_fx_passes_were_skipped(tmp_path):
    torch.manual_seed(0)
    model = tmp_path / "loop.pt"
    torch.jit.save(torch.jit.script(DataDependentLoop().eval()), str(model))
    rep = tmp_path / "r.json"
    res = run_cli(model, "--target", "onnx", "--input", "x:4x8", "-o", tmp_path / "l.onnx",
                  "--report", rep, "--iterations", "2", "--warmup", "1")
    assert res.code == 0, res.err + res.out
    report = json.loads(rep.read_text())
    skipped = [n for n in note_messages(report) if n.startswith("fx GELU passes skipped")]
    assert len(skipped) == 1 and "TS2EPConverter" in skipped[0]
    assert "fx GELU passes skipped" in res.out
    assert all(s["level"] == "onnx" for s in report["gelu_sites"])
    assert report["parity"]["status"] == "passed"
