"""The Python API's keywords are the flags' names by one rule, checked against the parsers
`--help` prints: dashes as underscores, `--no-X` as `X=False`, a Python keyword (`--import`)
with an `s`. A wrong keyword names the right one; verify() takes a module in memory."""

from __future__ import annotations

import inspect
import keyword
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

import export_gelu
from export_gelu.api import KeywordError
from export_gelu.cli import export_parser, verify_parser

#: Flags with no keyword, and why: what argparse prints and exits on (every other flag,
#: `--quiet`, `--debug` and `--compare-forms` included, is a keyword).
NOT_KEYWORDS = {"help", "version"}


def keyword_of(flag: str) -> str:
    """The rule: `--report-md` → report_md, `--no-verify` → verify, `--import` → imports."""
    name = flag.lstrip("-").replace("-", "_")
    name = name[3:] if name.startswith("no_") else name
    return name + "s" if keyword.iskeyword(name) else name


def _flags(parser) -> list[str]:
    return [o for a in parser._actions for o in a.option_strings if o.startswith("--")]


@pytest.mark.parametrize("parser,func", [(export_parser, export_gelu.export),
                                         (verify_parser, export_gelu.verify)],
                         ids=["export", "verify"])
def test_every_flag_is_a_keyword_by_the_rule(parser, func) -> None:
    params = inspect.signature(func).parameters
    missing = [f for f in _flags(parser())
               if keyword_of(f) not in NOT_KEYWORDS and keyword_of(f) not in params]
    assert missing == [], f"{func.__name__}() lacks the keywords of {missing}"
    assert keyword_of("--import") == "imports" and keyword_of("--no-verify") == "verify"


def test_the_rule_maps_the_confusing_pairs() -> None:
    assert keyword_of("--input") == "input" and keyword_of("--inputs") == "inputs"
    assert keyword_of("--trust-model") == "trust_model"
    assert keyword_of("--no-calibration") == "calibration"


@pytest.mark.parametrize("wrong,right", [("no_verify", "verify=False"),
                                         ("inputs_file", "inputs='FILE.npz'"),
                                         ("import_", "imports=[...]"),
                                         ("tagret", "use target"),
                                         ("report_markdown", "use report_md")])
def test_a_wrong_keyword_names_the_right_one(wrong: str, right: str) -> None:
    with pytest.raises(KeywordError) as caught:
        export_gelu.export("never-read.pt", **{wrong: True})
    assert f"no keyword {wrong!r}" in str(caught.value) and right in str(caught.value)
    assert isinstance(caught.value, TypeError)  # as Python says it, with the fix
    assert isinstance(caught.value, export_gelu.BadInputError)


def _module() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A small module saved as an ExportedProgram, and its ONNX export for ONNX Runtime."""
    folder = tmp_path_factory.mktemp("kw")
    model = _module().eval()
    pt = folder / "mlp.pt"
    torch.export.save(torch.export.export(model, (torch.randn(2, 8),)), str(pt))
    rep = export_gelu.export(pt, target="ort", output=folder / "mlp.onnx", iterations=0)
    assert rep.exit_code == 0, rep.summary()
    return pt, folder / "mlp.onnx"


def test_inputs_is_the_npz_file_and_input_the_specs(exported, tmp_path: Path) -> None:
    pt, _ = exported
    npz = tmp_path / "real.npz"
    np.savez(npz, input=np.random.default_rng(0).standard_normal((2, 8)).astype(np.float32))
    rep = export_gelu.export(pt, target="ort", output=tmp_path / "a.onnx", inputs=str(npz),
                             iterations=0)
    assert rep.exit_code == 0 and rep.options["inputs_npz"] == str(npz), rep.summary()
    rep = export_gelu.export(pt, target="ort", output=tmp_path / "b.onnx",
                             input=["input:2x8"], iterations=0)
    assert rep.exit_code == 0 and rep.options["inputs"] == ["input:2x8"], rep.summary()


def test_old_keywords_still_work_with_a_deprecation_warning(exported, tmp_path: Path) -> None:
    pt, _ = exported
    npz = tmp_path / "real.npz"
    np.savez(npz, input=np.ones((2, 8), np.float32))
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        old_specs = export_gelu.export(pt, target="ort", output=tmp_path / "a.onnx",
                                       inputs=["input:2x8"], iterations=0)
        old_file = export_gelu.export(pt, target="ort", output=tmp_path / "b.onnx",
                                      inputs_npz=npz, iterations=0)
    assert old_specs.options["inputs"] == ["input:2x8"]
    assert old_file.options["inputs_npz"] == str(npz)
    messages = [str(w.message) for w in seen if w.category is DeprecationWarning]
    assert any("input=[specs] now" in m for m in messages), messages
    assert any("inputs_npz= is inputs= now" in m for m in messages), messages


def test_verify_takes_a_module_in_memory_with_args(exported) -> None:
    _, onnx_file = exported
    x = torch.randn(2, 8)
    rep = export_gelu.verify(_module().eval(), onnx_file, args=(x,), iterations=0)
    assert rep.exit_code == 0 and rep.parity.status == "passed", rep.summary()
    other = _module()
    with torch.no_grad():
        other[2].bias += 1.0  # another model: every output off by one
    rep = export_gelu.verify(other, onnx_file, args=(x,), iterations=0)
    assert rep.exit_code == 1 and rep.parity.status == "failed", rep.summary()
    assert other.training, "verify() restores the module's training mode"


def test_verify_in_memory_refuses_what_needs_a_file(exported, tmp_path: Path) -> None:
    _, onnx_file = exported
    with pytest.raises(export_gelu.BadInputError, match="torch.export.save"):
        export_gelu.verify(_module(), onnx_file, args=(torch.randn(2, 8),),
                           bundle=str(tmp_path / "b"))
    with pytest.raises(export_gelu.BadInputError, match="example inputs of an in-memory"):
        export_gelu.verify(str(onnx_file), onnx_file, args=(torch.randn(2, 8),))


def test_in_memory_export_needs_a_file_name_not_a_folder(tmp_path: Path) -> None:
    with pytest.raises(export_gelu.BadInputError, match="no file to name the output after"):
        export_gelu.export(_module(), args=(torch.randn(2, 8),), target="ort",
                           output=f"{tmp_path}/")
    assert list(tmp_path.iterdir()) == []
