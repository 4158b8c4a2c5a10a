"""No first-divergence line where nothing diverged: an output that is exactly zero in PyTorch
and in the graph is "not judged" (exit 1) and names no module; a nondeterministic model's
verdict (no graph can match it) names its random op at the model's own line and no module.
A divergence under a zero reference (the graph off by more than the atol) is still one."""

from __future__ import annotations

import inspect
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from export_gelu.check.localize.divergence import worth_localizing
from export_gelu.check.verdict.parity import ParityResult, diverged, errors_of, over_tolerance
from export_gelu.tolerances import JUDGED_ZERO
from tests.conftest import run_cli

ATOL, RTOL = 1e-4, 1e-3


class ZeroHead(nn.Module):
    """Linear → GELU → a head of zeros: the output is 0 whatever the input."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.fc1, self.act, self.head = nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 4)
        with torch.no_grad():
            self.head.weight.zero_()
            self.head.bias.zero_()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.act(self.fc1(x)))


class Drawing(nn.Module):
    """Adds noise drawn in forward, after a GELU."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.fc, self.act = nn.Linear(8, 8), nn.GELU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.fc(x)) + torch.rand_like(x)


def _save(model: nn.Module, path: Path) -> Path:
    torch.export.save(torch.export.export(model.eval(), (torch.randn(2, 8),)), str(path))
    return path


def _result(refs: list[np.ndarray], outs: list[np.ndarray]) -> ParityResult:
    stats, _ = errors_of(refs, outs, ATOL, RTOL)
    return ParityResult("passed" if stats.passed else "failed", "", ATOL, RTOL,
                        outputs={"y": stats})


# -- the rule, in check/verdict/parity.py and check/localize/divergence.py ---------------

def test_a_zero_matched_is_not_a_divergence():
    zero = [np.zeros((2, 4), np.float32)]
    result = _result(zero, zero)
    out = result.outputs["y"]
    assert out.judged == JUDGED_ZERO and not out.passed  # not judged: the verdict fails
    assert not over_tolerance(out, ATOL) and not diverged(result)
    assert not worth_localizing(result, asked=False)
    assert worth_localizing(result, asked=True)  # --localize: compare the modules anyway
    # the graph off by more than the atol where the reference is 0: a divergence
    off = _result(zero, [np.full((2, 4), 0.5, np.float32)])
    assert off.outputs["y"].judged == JUDGED_ZERO and diverged(off)
    assert worth_localizing(off, asked=False)
    # non-finite is never inside
    nan = _result(zero, [np.full((2, 4), np.nan, np.float32)])
    assert diverged(nan)


def test_nothing_localizes_a_nondeterministic_model():
    ref = [np.ones((2, 4), np.float32)]
    result = _result(ref, [ref[0] + 1.0])
    assert diverged(result) and worth_localizing(result, asked=False)
    result.nondeterministic = {"output": "y", "max_abs": 1.0, "random_ops": [], "way_out": ""}
    assert not diverged(result)
    assert not worth_localizing(result, asked=False) and not worth_localizing(result, asked=True)


# -- a model whose output is exactly zero ------------------------------------------------------

def _zero_reference_run(model: Path, tmp_path: Path, *extra: str) -> tuple[int, str, dict, str]:
    rep, md = tmp_path / "r.json", tmp_path / "r.md"
    res = run_cli(model, "--target", "ort", "-o", tmp_path / "z.onnx", "--iterations", "0",
                  "--report", rep, "--report-md", md, *extra)
    return res.code, res.out + res.err, json.loads(rep.read_text()), md.read_text()


def _assert_not_judged_and_no_divergence(code: int, out: str, report: dict, md: str) -> None:
    assert code == 1, out
    assert "not judged: the reference of" in out and "is 0 in every element" in out
    assert "first divergence" not in out  # was: first divergence: head — …, max abs 0 > 0.0001
    parity = report["parity"]
    assert "first_divergence" not in parity and "module_errors" not in parity
    assert "First divergence" not in md and "first divergence" not in md


def test_a_zero_output_prints_no_first_divergence(tmp_path):
    model = _save(ZeroHead(), tmp_path / "zero.pt2")
    _assert_not_judged_and_no_divergence(*_zero_reference_run(model, tmp_path))
    # asked for (--localize): every module is inside, the zero head included
    rep = tmp_path / "v.json"
    res = run_cli("verify", model, tmp_path / "z.onnx", "--localize", "--iterations", "0",
                  "--no-calibration", "--report", rep)
    assert res.code == 1, res.out
    assert "first divergence: none (" in res.out and "module outputs within tolerance" in res.out
    parity = json.loads(rep.read_text())["parity"]
    assert parity["first_divergence"] is None
    modules = {m["module"]: m for m in parity["module_errors"]}
    assert modules["head"]["max_abs"] == 0.0 and modules["head"]["passed"]
    assert all(m["passed"] for m in modules.values())


def _zero_head_vit(folder: Path) -> None:
    """A tiny ViT image classifier (transformers config, random weights) whose classifier
    is zero-initialised: its logits are exactly 0."""
    from transformers import ViTConfig, ViTForImageClassification

    torch.manual_seed(0)
    cfg = ViTConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                    intermediate_size=64, image_size=32, patch_size=8, num_labels=5)
    model = ViTForImageClassification(cfg).eval()
    with torch.no_grad():
        model.classifier.weight.zero_()
        model.classifier.bias.zero_()
    model.save_pretrained(folder)


@pytest.mark.slow  # the same rule as test_a_zero_output_prints_no_first_divergence
def test_a_zero_head_folder_prints_no_first_divergence(session_cache, tmp_path):
    folder = shutil.copytree(session_cache.folder("vit-zero-head", _zero_head_vit),
                             tmp_path / "vit")
    code, out, report, md = _zero_reference_run(folder, tmp_path)
    _assert_not_judged_and_no_divergence(code, out, report, md)
    # the dynamic sizes say the same: not judged, not a bare "failed"
    sizes = [line for line in out.splitlines() if line.startswith("  at ")]
    assert sizes and all("onnxruntime failed, not judged (max abs 0)" in s for s in sizes), out


# -- a nondeterministic model -------------------------------------------------------------------

def test_a_nondeterministic_verdict_prints_no_first_divergence(tmp_path):
    model = _save(Drawing(), tmp_path / "drawing.pt2")
    rep = tmp_path / "r.json"
    res = run_cli(model, "--target", "ort", "-o", tmp_path / "d.onnx", "--iterations", "0",
                  "--report", rep)
    assert res.code == 1, res.out
    assert "nondeterministic model:" in res.out and "so no graph can match it" in res.out
    assert "first divergence" not in res.out
    parity = json.loads(rep.read_text())["parity"]
    assert parity["nondeterministic"] and "first_divergence" not in parity
    # --localize does not compare modules with one draw of a random model either
    res = run_cli("verify", model, tmp_path / "d.onnx", "--localize", "--iterations", "0",
                  "--no-calibration")
    assert res.code == 1 and "first divergence" not in res.out


def _vit_mae(seed: int = 0) -> nn.Module:
    from transformers import ViTMAEConfig, ViTMAEModel

    torch.manual_seed(seed)
    cfg = ViTMAEConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                       intermediate_size=64, image_size=32, patch_size=8)
    return ViTMAEModel(cfg).eval()


def _rand_line() -> str:
    """modeling_vit_mae.py:LINE of the `torch.rand(` that draws ViTMAE's masking noise."""
    from transformers.models.vit_mae import modeling_vit_mae

    lines, start = inspect.getsourcelines(modeling_vit_mae.ViTMAEEmbeddings.random_masking)
    offset = next(i for i, text in enumerate(lines) if "torch.rand(" in text)
    return f"modeling_vit_mae.py:{start + offset}"


def test_the_random_op_points_at_the_models_line():
    """ViTMAE (transformers, in site-packages) draws its masking noise in forward: the op's
    line is modeling_vit_mae.py's, not the caller's (it was `export-gelu:8`, the console
    script, since every frame in site-packages was skipped)."""
    from export_gelu.check.runners.torch_runner import TorchRunner
    from export_gelu.check.verdict.nondeterminism import random_sites

    feed = {"pixel_values": np.random.default_rng(0).standard_normal(
        (1, 3, 32, 32)).astype(np.float32)}
    outputs = ["last_hidden_state", "mask", "ids_restore"]
    sites = random_sites(TorchRunner(_vit_mae(), feed, outputs), feed)
    assert [(s.op, s.module, s.source) for s in sites] == [
        ("aten.rand", "embeddings", _rand_line())]
    # a random op with no line of the model's own (torch's Dropout in train mode): no line,
    # never the caller's (this test file)
    dropout = nn.Sequential(nn.Linear(8, 8), nn.Dropout(0.5)).train()
    x = {"x": np.ones((2, 8), np.float32)}
    (site,) = random_sites(TorchRunner(dropout, x, ["y"]), x)
    assert site.module == "1" and site.source == ""


def _save_vit_mae(folder: Path) -> None:
    _vit_mae().save_pretrained(folder)


@pytest.mark.slow  # test_the_random_op_points_at_the_models_line and
# test_a_nondeterministic_verdict_prints_no_first_divergence pin the same behaviour
def test_vit_mae_folder_names_its_random_line_and_no_divergence(session_cache, tmp_path):
    folder = session_cache.folder("vit-mae", _save_vit_mae)
    rep = tmp_path / "r.json"
    res = run_cli(folder, "--target", "ort", "--static", "-o", tmp_path / "mae.onnx",
                  "--iterations", "0", "--report", rep)
    assert res.code == 1, res.out + res.err
    assert f"random op: aten.rand in model.embeddings ({_rand_line()})" in res.out
    assert "first divergence" not in res.out
    parity = json.loads(rep.read_text())["parity"]
    assert parity["nondeterministic"]["random_ops"][0]["source"] == _rand_line()
    assert "first_divergence" not in parity
