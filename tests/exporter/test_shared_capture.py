"""exporter/capture/shared_capture.py: the graphs of one comparison share one capture. The
first form captures; every later form that makes the same call loads its own program, with its
own fake mode and ShapeEnv (a deep copy would share them, and one form's export changed the
next one's graph)."""

from __future__ import annotations

from collections import Counter

import pytest
import torch

from export_gelu.exporter.capture.shared_capture import SharedCaptures


class _Scale(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2


def _fresh(x: torch.Tensor, calls: Counter[str]):
    def capture():
        calls["capture"] += 1
        return torch.export.export(_Scale(), (x,), strict=False), None
    return capture


def _shape_env(program: torch.export.ExportedProgram) -> object:
    val = next(n.meta["val"] for n in program.graph.nodes if n.op == "placeholder")
    return val.fake_mode.shape_env


def _loading(calls: Counter[str]):
    def loading() -> None:
        calls["loading"] += 1
    return loading


def test_the_same_call_loads_its_own_program() -> None:
    shared, calls, x = SharedCaptures(), Counter[str](), torch.arange(6.0).reshape(2, 3)
    first, _ = shared.capture((x,), "fp32", None, _fresh(x, calls), _loading(calls))
    assert calls == {"capture": 1}
    second, _ = shared.capture((x.clone(),), "fp32", None, _fresh(x, calls), _loading(calls))
    assert calls == {"capture": 1, "loading": 1}
    assert first is not None and second is not None and second is not first
    assert str(second.graph) == str(first.graph)
    assert _shape_env(second) is not _shape_env(first)  # (a deep copy's is the same one)


@pytest.mark.parametrize("other", ["values", "dtype", "precision"])
def test_another_call_captures_again(other: str) -> None:
    shared, calls, x = SharedCaptures(), Counter[str](), torch.arange(6.0).reshape(2, 3)
    shared.capture((x,), "fp32", None, _fresh(x, calls), _loading(calls))
    y = {"values": x + 1, "dtype": x.double(), "precision": x}[other]
    shared.capture((y,), "fp16" if other == "precision" else "fp32", None, _fresh(y, calls),
                   _loading(calls))
    assert calls == {"capture": 2}


def test_a_failed_capture_is_not_tried_again() -> None:
    shared, x = SharedCaptures(), torch.ones(2)
    nothing = _loading(Counter())
    assert shared.capture((x,), "fp32", None, lambda: (None, "why"), nothing) == (None, "why")
    assert shared.capture((x,), "fp32", None, lambda: pytest.fail("captured again"),
                          nothing) == (None, "why")


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """TS2EPConverter conversions and torch.export calls made while the test runs."""
    from torch._export.converter import TS2EPConverter

    counted: Counter[str] = Counter()
    export, convert = torch.export.export, TS2EPConverter.convert

    def counted_export(*args, **kwargs):
        counted["torch.export"] += 1
        return export(*args, **kwargs)

    def counted_convert(self):
        counted["TS2EPConverter"] += 1
        return convert(self)

    monkeypatch.setattr(torch.export, "export", counted_export)
    monkeypatch.setattr(TS2EPConverter, "convert", counted_convert)
    return counted


def test_a_torchscript_comparison_converts_and_captures_once(saved_model, tmp_path, calls,
                                                             monkeypatch, capsys) -> None:
    """TorchScript BERT, four forms for --target onnx: one TS2EPConverter conversion and one
    torch.export (each form made both before), and every graph exported as captured (a deep
    copy's shared ShapeEnv made the second form's dynamo export fail, and erf no longer gave
    keep's graph); the progress says which form captures and which load."""
    from export_gelu import compare_forms
    from export_gelu.exporter.capture.capture import CAPTURING, LOADING_SHARED
    from export_gelu.progress import QUIET_ENV, Progress

    monkeypatch.delenv(QUIET_ENV, raising=False)
    progress = Progress()  # (stderr is captured: one plain line per step)
    forms = compare_forms(saved_model("bert", "torchscript"), targets=["onnx"],
                          input=["x:2x16:int64:0,1000"], iterations=2, warmup=1,
                          workdir=str(tmp_path), progress=progress)
    assert calls == {"TS2EPConverter": 1, "torch.export": 1}
    steps = [line[2:line.rindex("  [")] for line in capsys.readouterr().err.splitlines()
             if line.startswith("… ")]  # (building the cached model may print first)
    said = [s for s in steps if s in (CAPTURING, LOADING_SHARED)]
    assert said == [CAPTURING] + [LOADING_SHARED] * 3, steps
    by = {r.form: r for r in forms.rows}
    assert by["keep"].same_as == ["erf"]  # BERT's GELU is the erf form
    assert [(r.exporter, r.error) for r in forms.rows] == [("dynamo", "")] * 3


class _LinearGelu(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.gelu(self.fc(x))


def test_gelu_auto_with_a_bundle_captures_a_torchscript_model_once(tmp_path, calls) -> None:
    """`--gelu auto --bundle` on TorchScript: the comparison's forms, the chosen form's export
    and every form of the device bundle share one conversion and one torch.export (the export
    and the bundle captured again, once per graph, before)."""
    from export_gelu import api

    model = tmp_path / "tiny.ts.pt"
    torch.jit.save(torch.jit.trace(_LinearGelu().eval(), torch.randn(2, 8)), str(model))
    rep = api.export_with_best_form(model, api.ExportOptions(
        target="trt8.6", output=str(tmp_path / "o.onnx"), gelu="auto", inputs=("x:2x8",),
        bundle=str(tmp_path / "B"), iterations=2, warmup=0))
    assert calls == {"TS2EPConverter": 1, "torch.export": 1}
    assert rep.parity.status == "passed" and (tmp_path / "o.onnx").is_file()
    manifest = (tmp_path / "B" / "manifest.json").read_text()
    assert all(f'"form": "{form}"' in manifest for form in ("keep", "sigmoid", "plugin"))


def test_a_program_over_the_limit_is_captured_per_form() -> None:
    """A program whose weights exceed the limit is not held as a saved copy: every form
    captures (a Linear(4, 4): 80 bytes of weights)."""
    module, x = torch.nn.Linear(4, 4), torch.ones(2, 4)
    calls: Counter[str] = Counter()

    def fresh():
        calls["capture"] += 1
        return torch.export.export(module, (x,), strict=False), None

    for limit, captures in ((80, 1), (79, 2)):
        calls.clear()
        shared = SharedCaptures(limit_bytes=limit)
        first, _ = shared.capture((x,), "fp32", None, fresh, _loading(calls))
        second, _ = shared.capture((x,), "fp32", None, fresh, _loading(calls))
        assert calls["capture"] == captures and first is not None and second is not None
        assert second is not first
