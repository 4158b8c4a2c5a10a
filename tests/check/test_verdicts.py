"""Verdicts that mean something: a near-zero or all-zero reference is judged at its own scale
(an all-zero graph never passes), and a model that draws random numbers in forward is named
nondeterministic with the random op, its module and the way out."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from torch import nn

from export_gelu.check.verdict.parity import errors_of
from export_gelu.tolerances import (
    JUDGED_ATOL,
    JUDGED_CONSTANT,
    JUDGED_OWN_SCALE,
    JUDGED_ZERO,
)
from tests.conftest import run_cli


class Tiny(nn.Module):
    """Linear → GELU → Linear whose outputs are ~`scale` (1e-12: far below any atol)."""

    def __init__(self, scale: float) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.fc1, self.act, self.fc2 = nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 4)
        with torch.no_grad():
            self.fc2.weight.mul_(scale)
            self.fc2.bias.mul_(scale)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(x)))


class Masking(nn.Module):
    """Adds noise drawn in forward (as ViTMAE's random masking does)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x) + torch.rand_like(x)


class Noisy(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.masking, self.act = Masking(), nn.GELU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.masking(x))


def _save(model: nn.Module, path: Path) -> Path:
    ep = torch.export.export(model.eval(), (torch.randn(2, 8),))
    torch.export.save(ep, str(path))
    return path


def _zero_graph(src: Path, dst: Path) -> None:
    """The graph of `src` with every output multiplied by 0 (onnx-graphsurgeon)."""
    import onnx_graphsurgeon as gs

    graph = gs.import_onnx(onnx.load(str(src)))
    for i, out in enumerate(list(graph.outputs)):
        zero = gs.Constant(f"zero_{i}", np.zeros((), dtype=np.float32))
        raw = gs.Variable(f"before_zero_{i}", dtype=out.dtype)
        producer = out.inputs[0]
        producer.outputs[producer.outputs.index(out)] = raw
        graph.nodes.append(gs.Node("Mul", f"times_zero_{i}", inputs=[raw, zero], outputs=[out]))
    graph.toposort()
    onnx.save(gs.export_onnx(graph), str(dst))


@pytest.fixture(scope="module")
def tiny_files(tmp_path_factory) -> tuple[Path, Path, Path]:
    """(a .pt2 with ~1e-12 outputs, its correct ONNX, the same ONNX giving all zeros)."""
    d = tmp_path_factory.mktemp("verdicts")
    model = _save(Tiny(1e-12), d / "tiny.pt2")
    good, zero = d / "tiny.onnx", d / "tiny.zero.onnx"
    res = run_cli(model, "--target", "onnx", "-o", good, "--no-verify")
    assert res.code == 0, res.err
    _zero_graph(good, zero)
    return model, good, zero


def test_an_all_zero_graph_does_not_pass_a_near_zero_reference(tiny_files, tmp_path):
    model, good, zero = tiny_files
    rep_path = tmp_path / "r.json"
    res = run_cli("verify", model, zero, "--iterations", "0", "--report", rep_path)
    assert res.code == 1, res.out + res.err
    assert "Parity: FAILED" in res.out and "judged at the reference's own scale" in res.out
    out = next(iter(json.loads(rep_path.read_text())["parity"]["outputs"].values()))
    assert out["judged"] == JUDGED_OWN_SCALE and not out["passed"]
    assert 1e-13 < out["ref_scale"] < 1e-10 and out["max_abs"] == pytest.approx(out["ref_scale"])
    assert out["judged_atol"] == pytest.approx(1e-3 * out["ref_scale"])
    # the right graph passes at the same scale: its error is relative, as in fp32
    res = run_cli("verify", model, good, "--iterations", "0", "--report", rep_path)
    assert res.code == 0, res.out
    out = next(iter(json.loads(rep_path.read_text())["parity"]["outputs"].values()))
    assert out["passed"] and out["judged"] == JUDGED_OWN_SCALE
    assert "judged at the reference's own scale" in res.out


def test_an_exactly_zero_reference_is_not_judged(tmp_path):
    model = Tiny(0.0)  # the last layer is all zeros: the output is 0 whatever the input
    path = _save(model, tmp_path / "zero.pt2")
    res = run_cli(path, "--target", "onnx", "-o", tmp_path / "z.onnx", "--iterations", "0",
                  "--report", tmp_path / "r.json")
    assert res.code == 1, res.out + res.err
    assert "not judged: the reference of" in res.out and "is 0 in every element" in res.out
    out = next(iter(json.loads((tmp_path / "r.json").read_text())["parity"]["outputs"].values()))
    assert out["judged"] == JUDGED_ZERO and not out["passed"] and out["max_abs"] == 0.0


def test_the_rule_in_one_place():
    ref = [np.full((3,), 2e-12, np.float32)]
    stats, _ = errors_of(ref, [np.zeros(3, np.float32)], 1e-4, 1e-3)
    assert stats.judged == JUDGED_OWN_SCALE and not stats.passed
    stats, _ = errors_of(ref, [ref[0] * (1 + 1e-5)], 1e-4, 1e-3)
    assert stats.judged == JUDGED_OWN_SCALE and stats.passed
    stats, _ = errors_of([np.ones(3, np.float32)], [np.ones(3, np.float32)], 1e-4, 1e-3)
    assert stats.judged == JUDGED_ATOL and stats.passed
    # the same reference for two different inputs: nothing learned from matching it
    same = [np.ones(3, np.float32), np.ones(3, np.float32)]
    stats, _ = errors_of(same, same, 1e-4, 1e-3, inputs_differ=True)
    assert stats.judged == JUDGED_CONSTANT and not stats.passed
    stats, _ = errors_of(same, same, 1e-4, 1e-3, inputs_differ=False)
    assert stats.passed
    # integer outputs (ids, masks) are never judged by scale
    ints = [np.zeros(3, np.int64)]
    assert errors_of(ints, ints, 1e-4, 1e-3)[0].passed


def test_a_model_drawing_random_numbers_is_named_nondeterministic(tmp_path):
    model = _save(Noisy(), tmp_path / "noisy.pt2")
    rep_path = tmp_path / "r.json"
    res = run_cli(model, "--target", "onnx", "-o", tmp_path / "n.onnx", "--iterations", "0",
                  "--report", rep_path)
    assert res.code == 1, res.out + res.err
    assert "nondeterministic model: two runs of pytorch on the same inputs differ" in res.out
    assert "aten.rand_like in masking" in res.out and "`noise`" in res.out
    block = json.loads(rep_path.read_text())["parity"]["nondeterministic"]
    assert block["random_ops"][0]["op"] == "aten.rand_like"
    assert block["random_ops"][0]["module"] == "masking"
    assert block["random_ops"][0]["source"].startswith("test_verdicts.py:")
    assert 0 < block["max_abs"] <= 1.0


def test_random_ops_of_an_eager_module_are_found_by_running_it():
    from export_gelu.check.runners.torch_runner import TorchRunner
    from export_gelu.check.verdict.nondeterminism import random_sites

    feed = {"x": np.random.default_rng(0).standard_normal((2, 8)).astype(np.float32)}
    sites = random_sites(TorchRunner(Noisy().eval(), feed, ["y"]), feed)
    assert [(s.op, s.module) for s in sites] == [("aten.rand_like", "masking")]
    assert sites[0].source.startswith("test_verdicts.py:")
    dropout = nn.Sequential(nn.Linear(8, 8), nn.Dropout(0.5))
    assert random_sites(TorchRunner(dropout.eval(), feed, ["y"]), feed) == []
    found = random_sites(TorchRunner(dropout.train(), feed, ["y"]), feed)
    assert found and found[0].module == "1"


def test_a_deterministic_model_is_not_flagged(tiny_files, tmp_path):
    model, good, _zero = tiny_files
    rep_path = tmp_path / "r.json"
    assert run_cli("verify", model, good, "--iterations", "0", "--report", rep_path).code == 0
    assert json.loads(rep_path.read_text())["parity"]["nondeterministic"] is None
