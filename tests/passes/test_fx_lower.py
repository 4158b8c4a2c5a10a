"""--gelu at the fx level: each form gives the right kinds, actions, error bounds and math."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import onnx
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from export_gelu.passes.fx import run_fx_passes
from export_gelu.passes.fx.canonicalize import GELU
from export_gelu.passes.sites import FORM_MAX_ERROR, added_max_error
from tests.conftest import run_cli
from tests.gelu_zoo import bloom_gelu, erf_python, quick_gelu, sample_input


class ThreeKinds(nn.Module):
    """An nn.GELU (exact), Bloom's hand-written tanh GELU and a QuickGELU, in a row."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.exact = nn.GELU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return quick_gelu(bloom_gelu(self.exact(self.fc(x))))


def _reference(model: ThreeKinds, x: torch.Tensor, exact: str, tanh: str) -> torch.Tensor:
    """The model with its exact site computing `exact` and its tanh site computing `tanh`."""
    forms = {"exact": F.gelu, "tanh": lambda v: F.gelu(v, approximate="tanh"),
             "sigmoid": quick_gelu}
    return quick_gelu(forms[tanh](forms[exact](model.fc(x))))


#: form → (what the exact site computes, what the tanh site computes) after lowering
EXPECTED = {"keep": ("exact", "tanh"), "plugin": ("exact", "tanh"), "erf": ("exact", "exact"),
            "tanh": ("tanh", "tanh"), "sigmoid": ("sigmoid", "sigmoid")}


def _lowered(form: str) -> tuple[ThreeKinds, torch.export.ExportedProgram, list]:
    torch.manual_seed(0)
    model = ThreeKinds().eval()
    with torch.no_grad():
        program = torch.export.export(model, (sample_input(),), strict=False)
    return model, program, run_fx_passes(program, form)


@pytest.mark.parametrize("form", sorted(EXPECTED))
def test_each_form_gives_the_right_kinds_actions_and_errors(form: str):
    model, program, sites = _lowered(form)
    by_kind = {s.kind: s for s in sites}
    assert sorted(by_kind) == ["exact", "quick", "tanh"]  # kinds name the source math

    quick = by_kind["quick"]
    assert quick.action.startswith("kept") and quick.added_max_error == 0.0
    for kind, now in zip(("exact", "tanh"), EXPECTED[form]):
        site = by_kind[kind]
        assert site.added_max_error == added_max_error(kind, now)
        if now == ("exact" if kind == "exact" else "tanh"):
            assert "changed" not in site.action  # unchanged math, no error added
        else:
            assert site.action.startswith(f"changed {kind} → ")
            assert "changes the math" in site.action

    x = sample_input(seed=1)
    with torch.no_grad():
        got = program.module()(x)
        want = _reference(model, x, *EXPECTED[form])
    torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("form", ["keep", "plugin"])
def test_keep_and_plugin_leave_the_kinds_to_the_onnx_level(form: str):
    _model, program, _sites = _lowered(form)
    gelus = [n for n in program.graph.nodes if n.target is GELU]
    assert sorted(n.kwargs.get("approximate", "none") for n in gelus) == ["none", "tanh"]


def test_sigmoid_form_leaves_no_aten_gelu():
    _model, program, _sites = _lowered("sigmoid")
    ops = Counter(str(n.target) for n in program.graph.nodes if n.op == "call_function")
    assert ops[str(GELU)] == 0 and ops["aten.sigmoid.default"] == 3


@pytest.mark.parametrize("a, b, stated", [("exact", "tanh", 4.73e-4),
                                          ("exact", "sigmoid", 2.03e-2),
                                          ("tanh", "sigmoid", 2.07e-2)])
def test_stated_worst_case_errors_are_the_measured_ones(a: str, b: str, stated: float):
    x = torch.linspace(-12, 12, 2_400_001, dtype=torch.float64)
    f = {"exact": F.gelu(x), "tanh": F.gelu(x, approximate="tanh"), "sigmoid": quick_gelu(x)}
    worst = float((f[a] - f[b]).abs().max())
    assert added_max_error(a, b) == stated == pytest.approx(worst, rel=5e-3)
    assert added_max_error(b, a) == stated and added_max_error(a, a) == 0.0
    assert FORM_MAX_ERROR["tanh"] == 4.73e-4 and FORM_MAX_ERROR["sigmoid"] == 2.03e-2


class Mlp(nn.Module):
    """Linear → GELU (hand-written erf formula) → Linear."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(16, 64), nn.Linear(64, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(erf_python(self.fc1(x)))


@pytest.fixture(scope="module")
def mlp_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("fx_lower") / "mlp.pt"
    with torch.no_grad():
        torch.export.save(torch.export.export(Mlp().eval(), (torch.randn(4, 16) * 3,),
                                              strict=False), str(path))
    return path


@pytest.mark.parametrize("form, stated, gelu_attr, sigmoids", [
    ("keep", 0.0, "none", 0), ("erf", 0.0, "none", 0), ("tanh", 4.73e-4, "tanh", 0),
    ("sigmoid", 2.03e-2, None, 1)])
def test_cli_states_the_added_error_next_to_the_measured_one(mlp_file, tmp_path, form, stated,
                                                             gelu_attr, sigmoids):
    out, rep = tmp_path / "m.onnx", tmp_path / "r.json"
    res = run_cli(mlp_file, "--target", "onnx", "--gelu", form, "-o", out, "--report", rep,
                  "--iterations", "2", "--warmup", "1")
    assert res.code == 0, res.err + res.out
    report = json.loads(rep.read_text())
    (site,) = report["gelu_sites"]
    assert site["kind"] == "exact" and site["level"] == "fx"
    assert site["added_max_error"] == stated
    assert report["parity"]["status"] == "passed"
    measured = max(o["max_abs"] for o in report["parity"]["outputs"].values())

    form_lines = [ln for ln in res.out.splitlines() if ln.startswith("GELU form")]
    if stated:
        (line,) = form_lines
        assert f"≤ {stated:.3g} abs" in line and f"max abs {measured:.3g}" in line
    else:
        assert form_lines == [] and measured < 1e-4

    nodes = onnx.load(str(out)).graph.node
    gelus = [{a.name: a.s.decode() for a in n.attribute}.get("approximate", "none")
             for n in nodes if n.op_type == "Gelu"]
    assert gelus == ([] if gelu_attr is None else [gelu_attr])
    assert sum(n.op_type == "Sigmoid" for n in nodes) == sigmoids
