"""The Python API's sequence keywords (issue 40, defect 5): a string where a sequence is
expected is one item, never its characters. `imports='os'` imported the modules `o` and `s`
from the working directory, running their code; `dynamic='batch=…'`, `targets='trt8.2'` and
`nodes='name'` were taken apart the same way. Bytes, a mapping, or an item that is not a
string is a TypeError naming the keyword (flag_table.record_fields and the options records'
types); an in-memory model's `args=` given a string is a TypeError too."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest
import torch

import export_gelu
from export_gelu import flag_table

pytest.importorskip("onnxruntime")

QUICK = {"target": "ort", "iterations": 0}


def _module() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(),
                               torch.nn.Linear(16, 4)).eval()


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A small module saved as an ExportedProgram, and its ONNX export."""
    folder = tmp_path_factory.mktemp("seq")
    pt = folder / "mlp.pt"
    torch.export.save(torch.export.export(_module(), (torch.randn(2, 8),)), str(pt))
    rep = export_gelu.export(pt, output=folder / "mlp.onnx", **QUICK)
    assert rep.exit_code == 0, rep.summary()
    return pt, folder / "mlp.onnx"


@pytest.fixture()
def booby_trapped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working directory holding o.py and s.py, each writing a marker when imported."""
    for name in ("o", "s"):
        (tmp_path / f"{name}.py").write_text(
            f"from pathlib import Path\nPath({str(tmp_path / f'ran-{name}')!r}).write_text('x')\n")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_imports_os_imports_os_not_o_and_s(exported, booby_trapped):
    pt, onnx_path = exported
    rep = export_gelu.export(pt, output=booby_trapped / "a.onnx", imports="os", **QUICK)
    assert rep.exit_code == 0 and rep.options["imports"] == ["os"]
    rep = export_gelu.verify(pt, onnx_path, imports="os", iterations=0)
    assert rep.exit_code == 0
    assert not list(booby_trapped.glob("ran-*")), "a module of the working directory ran"


@pytest.mark.parametrize("value", [b"os", {"os": 1}, ["os", 3], 7])
def test_imports_of_another_type_is_a_type_error(exported, booby_trapped, value):
    pt, _ = exported
    with pytest.raises(TypeError, match="imports"):
        export_gelu.export(pt, output=booby_trapped / "a.onnx", imports=value, **QUICK)
    with pytest.raises(TypeError, match="imports"):
        export_gelu.verify(pt, booby_trapped / "x.onnx", imports=value)
    assert not list(booby_trapped.glob("ran-*")) and not (booby_trapped / "a.onnx").exists()


def test_dynamic_input_and_output_names_as_one_string(tmp_path):
    """`dynamic='x:0=1:4:8'` is one range, `input='x:4x16'` one spec, `output_names=` one
    name (an ONNX graph whose batch axis is symbolic)."""
    from tests.check.test_trt import dynamic_batch_model

    src = tmp_path / "dyn.onnx"
    dynamic_batch_model(src)
    rep = export_gelu.export(src, output=tmp_path / "d.onnx", input="x:4x16",
                             dynamic="x:0=1:4:8", **QUICK)
    assert rep.exit_code == 0, rep.summary()
    assert rep.options["dynamic"] == ["x:0=1:4:8"] and rep.options["inputs"] == ["x:4x16"]
    assert [(d["min"], d["opt"], d["max"]) for d in rep.dynamic["dims"]] == [(1, 4, 8)]
    rep = export_gelu.export(_module(), args=(torch.randn(2, 8),), output=tmp_path / "n.onnx",
                             output_names="logits", **QUICK)
    assert rep.exit_code == 0, rep.summary()
    assert [o.name for o in onnx.load(str(tmp_path / "n.onnx")).graph.output] == ["logits"]


def test_inspect_targets_and_nodes_as_one_string(exported):
    _pt, onnx_path = exported
    node = onnx.load(str(onnx_path)).graph.node[0].name
    info = export_gelu.inspect_model(onnx_path, targets="trt8.2", nodes=node, dry_run=False)
    assert list(info["compatibility"]) == ["trt8.2"]
    assert [n["name"] for n in info["nodes"]] == [node]


def test_compare_forms_targets_as_one_string_and_in_memory_arguments(exported):
    values = flag_table.api_values("compare_forms", {"targets": "trt8.2", "forms": "tanh"})
    options = flag_table.forms_options(values)
    assert options.targets == ("trt8.2",) and options.forms == ("tanh",)
    with pytest.raises(TypeError, match="args"):
        export_gelu.export(_module(), args="x", output="never.onnx", **QUICK)
    with pytest.raises(TypeError, match="kwargs"):
        export_gelu.export(_module(), args=(torch.randn(2, 8),), kwargs=[1], output="n.onnx",
                           **QUICK)
