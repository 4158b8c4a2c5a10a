"""Calibration statistics: each GELU site's observed input range, recorded through fx."""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
import pytest
import torch
from torch import nn

from export_gelu.check.calibration import gelu_input_ranges, worst_form_error


class ThreeGelus(nn.Module):
    """x → nn.GELU, a hand-written tanh formula, and QuickGELU, each on a known scaling of x."""

    def __init__(self) -> None:
        super().__init__()
        self.act = nn.GELU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = self.act(x)
        t = 2 * x
        b = 0.5 * t * (1.0 + torch.tanh(0.7978845608028654 * (t + 0.044715 * torch.pow(t, 3.0))))
        q = 0.5 * x
        c = q * torch.sigmoid(1.702 * q)
        return a + b + c


@pytest.fixture(scope="module")
def three_gelus(tmp_path_factory):
    from export_gelu.exporter.loading.load import load_model

    path = tmp_path_factory.mktemp("cal") / "three.pt"
    example = (torch.zeros(1, 6),)
    with path.open("wb") as fh:
        torch.export.save(torch.export.export(ThreeGelus().eval(), example, strict=False), fh)
    return load_model(path)


def test_ranges_and_shares_are_exact_for_known_inputs(three_gelus):
    x = np.array([[-50.0, -7.0, 0.0, 3.0, 45.0, 100.0]], dtype=np.float32)
    y = np.array([[1.0, 2.0, 2.5, -1.0, 0.5, 0.0]], dtype=np.float32)
    cal = gelu_input_ranges(three_gelus, [OrderedDict(x=x), OrderedDict(x=y)], "test data")
    assert cal.inputs == "test data" and cal.reason == ""
    by_kind = {s.kind: s for s in cal.sites}
    assert set(by_kind) == {"exact", "tanh", "quick"}
    exact, tanh, quick = by_kind["exact"], by_kind["tanh"], by_kind["quick"]
    assert exact.count == tanh.count == quick.count == 12
    assert (exact.min, exact.max) == (-50.0, 100.0)
    assert exact.share_abs_gt_6 == pytest.approx(4 / 12)  # -50 -7 45 100
    assert exact.share_abs_gt_40 == pytest.approx(3 / 12)  # -50 45 100
    assert (tanh.min, tanh.max) == (-100.0, 200.0)  # the formula's input is 2x
    assert tanh.share_abs_gt_6 == pytest.approx(4 / 12)  # -100 -14 90 200 (2·3 = 6 is not > 6)
    assert (quick.min, quick.max) == (-25.0, 50.0)  # QuickGELU's x is 0.5x
    assert quick.share_abs_gt_40 == pytest.approx(1 / 12)
    assert exact.mean == pytest.approx(np.concatenate([x, y]).mean(), rel=1e-6)
    # over a range this wide, the approximations reach their known worst-case errors
    assert exact.tanh_max_error == pytest.approx(4.73e-4, rel=0.01)
    assert exact.sigmoid_max_error == pytest.approx(2.03e-2, rel=0.01)


def test_worst_form_error_matches_the_known_maxima():
    whole = worst_form_error(-10, 10, points=20001)
    assert whole["tanh"] == pytest.approx(4.73e-4, rel=0.005)
    assert whole["sigmoid"] == pytest.approx(2.03e-2, rel=0.005)
    near_zero = worst_form_error(-0.1, 0.1)
    assert near_zero["tanh"] < 1e-6 and near_zero["sigmoid"] < 1e-3


def test_calibration_leaves_the_reference_model_untouched(three_gelus):
    x = np.linspace(-3, 3, 6, dtype=np.float32).reshape(1, 6)
    before = three_gelus.reference_module()(torch.from_numpy(x))
    gelu_input_ranges(three_gelus, [OrderedDict(x=x)], "t")
    after = three_gelus.reference_module()(torch.from_numpy(x))
    torch.testing.assert_close(before, after, rtol=0, atol=0)
    ops = {str(n.target) for n in three_gelus.exported.graph.nodes if n.op == "call_function"}
    assert any("tanh" in op for op in ops)  # the hand-written formula is still there


def test_onnx_model_has_no_pytorch_graph_to_calibrate(tmp_path):
    """An ONNX file, GELU and all (a hand-built one: only its being ONNX matters), has no
    PyTorch graph to record ranges in."""
    import onnx

    from export_gelu.exporter.loading.load import load_model
    from tests.onnx_graphs import SHAPE, hand_graph

    path = tmp_path / "m.onnx"
    onnx.save(hand_graph("tanh x*x*x"), str(path))
    cal = gelu_input_ranges(load_model(path), [OrderedDict(x=np.zeros(SHAPE, np.float32))], "t")
    assert cal.sites == [] and "ONNX" in cal.reason


def test_export_with_real_inputs_records_ranges_in_the_report(saved_model, tmp_path):
    import json

    from tests.conftest import run_cli

    npz = tmp_path / "batch.npz"
    np.savez(npz, x=(np.random.default_rng(0).standard_normal((4, 10, 8)) * 5).astype(np.float32))
    rep = tmp_path / "r.json"
    res = run_cli(saved_model("lstm", "exported"), "--target", "onnx", "-o", tmp_path / "l.onnx",
                  "--inputs", npz, "--iterations", "0", "--report", rep)
    assert res.code == 0, res.err
    cal = json.loads(rep.read_text())["calibration"]
    assert cal["inputs"] == "real data from batch.npz"
    (site,) = cal["sites"]
    assert site["kind"] == "exact" and site["count"] == 4 * 64 and site["min"] < site["max"]
    assert "GELU input ranges (real data from batch.npz)" in res.out
