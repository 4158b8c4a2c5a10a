"""Where an export's graph lands: `-o DIR/` (a trailing slash, or an existing folder) writes
DIR/<default name>; default names carry the target and a `--dynamic` choice, so the README's
own tasks never replace each other; replacing an existing output is said in one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from export_gelu.options import ExportOptions
from export_gelu.output_plan import default_output, export_output
from tests.conftest import run_cli


def test_default_names_carry_target_and_dynamic_choice() -> None:
    model = Path("runs/bert.pt")
    static = export_output(ExportOptions(target="trt8.2"), model)
    dynamic = export_output(ExportOptions(target="trt8.2", dynamic=("batch=1:4:8",)), model)
    assert static == Path("runs/bert.trt8.2.onnx")
    assert dynamic == Path("runs/bert.trt8.2.dynamic.onnx")
    assert default_output(model, "ort") == Path("runs/bert.ort.onnx")
    assert len({static, dynamic, default_output(model, "trt")}) == 3


def test_readme_tasks_write_distinct_files() -> None:
    """Task 2's dynamic export of bert.pkl and task 3's static one of bert.pt for trt8.2 were
    both bert.trt8.2.onnx (the second replaced the first)."""
    task2 = export_output(ExportOptions(target="trt8.2", dynamic=("batch=1:4:8", "seq=8:16:64")),
                          Path("bert.pkl"))
    task3 = export_output(ExportOptions(target="trt8.2", bundle="jetson/"), Path("bert.pt"))
    assert task2 != task3


@pytest.mark.parametrize("spelling", ["out/", "out"])
def test_dash_o_folder_gets_the_default_name(tmp_path: Path, spelling: str) -> None:
    folder = tmp_path / "out"
    if spelling == "out":
        folder.mkdir()  # an existing folder, no slash
    given = f"{tmp_path}/{spelling}"
    assert export_output(ExportOptions(target="ort", output=given), tmp_path / "m.pt") == \
        folder / "m.ort.onnx"


def test_dash_o_file_is_kept_as_given(tmp_path: Path) -> None:
    out = tmp_path / "plain"  # no slash, no folder of that name: a file
    assert export_output(ExportOptions(target="ort", output=str(out)), tmp_path / "m.pt") == out


def test_cli_dash_o_new_folder_then_replacing_is_said(saved_model, tmp_path: Path) -> None:
    model = saved_model("lstm", "exported")
    folder = tmp_path / "outdir"
    first = run_cli(model, "--target", "ort", "-o", f"{folder}/", "--no-verify")
    assert first.code == 0, first.err
    written = folder / f"{model.stem}.ort.onnx"
    assert folder.is_dir() and written.is_file() and sorted(folder.iterdir()) == [written]
    assert f"Output: {written}" in first.out and "existed and was replaced" not in first.out
    again = run_cli(model, "--target", "ort", "-o", folder, "--no-verify")
    assert again.code == 0, again.err
    replaced = [line for line in again.out.splitlines() if "was replaced" in line]
    assert replaced == [f"Note: {written} existed and was replaced by this export"]


def test_cli_dash_o_folder_whose_parent_is_missing_is_refused(saved_model,
                                                              tmp_path: Path) -> None:
    res = run_cli(saved_model("lstm", "exported"), "--target", "ort", "-o",
                  f"{tmp_path}/no/such/", "--no-verify")
    assert res.code == 2 and "does not exist" in res.err, res.err
    assert not (tmp_path / "no").exists()


def test_written_names_the_markdown_plots(saved_model, tmp_path: Path) -> None:
    """`written` lists every file the run wrote: the PNGs beside --report-md too."""
    pytest.importorskip("matplotlib")
    out, js, md = tmp_path / "m.onnx", tmp_path / "r.json", tmp_path / "r.md"
    res = run_cli(saved_model("lstm", "exported"), "--target", "ort", "-o", out, "--report", js,
                  "--report-md", md, "--iterations", "0")
    assert res.code == 0, res.err
    written = json.loads(js.read_text())["written"]
    pngs = sorted(p.name for p in tmp_path.glob("*.png"))
    assert pngs == ["r.errors.png", "r.gelu-forms.png"]
    assert sorted(Path(p).name for p in written) == sorted(["m.onnx", "r.json", "r.md", *pngs])
