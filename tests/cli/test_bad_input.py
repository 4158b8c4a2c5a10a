"""Bad input matrix: each case exits 2, names the problem, and leaves no output file."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from examples.models import EXAMPLES
from tests.conftest import ROOT, run_cli


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def _truncated_zip(src: Path, dst: Path) -> Path:
    data = src.read_bytes()
    dst.write_bytes(data[: len(data) // 2])
    return dst


CASES = {
    "empty file": (lambda d, m: _write(d / "empty.pt", b""), [], "empty"),
    "random bytes": (lambda d, m: _write(d / "rand.pt", bytes(range(7, 256)) * 8), [],
                     "not a PyTorch or ONNX model"),
    "truncated zip": (lambda d, m: _truncated_zip(m("lstm", "exported"), d / "trunc.pt"), [],
                      "corrupt or truncated"),
    "pickle without --allow-pickle": (lambda d, m: m("lstm", "pickle"),
                                      ["--input", EXAMPLES["lstm"].input_spec], "--allow-pickle"),
    "state_dict without factory": (lambda d, m: m("lstm", "state_dict"),
                                   ["--input", EXAMPLES["lstm"].input_spec], "--model-factory"),
    "torchscript without --input": (lambda d, m: m("lstm", "torchscript"), [], "--input"),
    "bad --input spec": (lambda d, m: m("lstm", "torchscript"), ["--input", "x:4xQ"],
                         "shape"),
    "bad --input dtype": (lambda d, m: m("lstm", "torchscript"), ["--input", "x:4x10x8:float8"],
                          "dtype"),
    "zero dimension": (lambda d, m: m("lstm", "torchscript"), ["--input", "x:0x10x8"],
                       "positive"),
    "missing file": (lambda d, m: d / "nope.pt", [], "no such file"),
    "unknown zip": (lambda d, m: _plain_zip(d / "plain.pt"), [], "not one torch.save"),
}


def _plain_zip(path: Path) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("hello.txt", "hi")
    return path


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_input_exits_2_with_reason_and_no_output(case, saved_model, tmp_path):
    make, flags, needle = CASES[case]
    model = make(tmp_path, saved_model)
    out = tmp_path / "out" / "x.onnx"
    out.parent.mkdir()
    res = run_cli(model, "-o", out, "--report", tmp_path / "out" / "r.json", *flags)
    assert res.code == 2, (case, res.err)
    assert needle in res.err, res.err
    assert "Traceback" not in res.err
    assert list(out.parent.iterdir()) == []


def test_output_directory_that_does_not_exist(saved_model, tmp_path):
    res = run_cli(saved_model("lstm", "exported"), "-o", tmp_path / "missing" / "o.onnx")
    assert res.code == 2
    assert "does not exist" in res.err
    assert not (tmp_path / "missing").exists()


def test_never_overwrites_the_input(golden_run, tmp_path):
    src = golden_run("lstm", "exported", "--target", "onnx", "--no-verify").copy_to(tmp_path,
                                                                                     "m.onnx")
    before = src.read_bytes()
    res = run_cli(src, "-o", src)
    assert res.code == 2 and "overwrite the input" in res.err
    assert src.read_bytes() == before


def test_pickle_is_refused_then_accepted_with_flag(saved_model, tmp_path):
    model = saved_model("lstm", "pickle")
    spec = EXAMPLES["lstm"].input_spec
    refused = run_cli(model, "--input", spec, "-o", tmp_path / "a.onnx")
    assert refused.code == 2 and "arbitrary Python code" in refused.err
    accepted = run_cli(model, "--input", spec, "--allow-pickle", "-o", tmp_path / "a.onnx",
                       "--iterations", "2")
    assert accepted.code == 0, accepted.err


def test_plugin_on_a_target_without_it_exits_3_naming_takers(saved_model, tmp_path):
    res = run_cli(saved_model("lstm", "exported"), "--target", "trt11", "--gelu", "plugin",
                  "-o", tmp_path / "p.onnx")
    assert res.code == 3
    assert "trt8.4–trt10" in res.err and "trt11" in res.err


def test_console_script_prints_no_traceback(tmp_path):
    bad = tmp_path / "bad.pt"
    bad.write_bytes(b"\x00garbage")
    proc = subprocess.run([sys.executable, "-m", "export_gelu.cli", str(bad)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.startswith("export-gelu: error:")
    assert "Traceback" not in proc.stderr


def test_help_shows_examples():
    proc = subprocess.run([sys.executable, "-m", "export_gelu.cli", "--help"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0
    assert "export-gelu model.pt --target trt" in proc.stdout
    assert "exit codes" in proc.stdout
