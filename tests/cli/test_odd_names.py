"""Any name the file system takes works, and a re-run replaces its outputs.

| case | expected |
|---|---|
| `-o` of 235 and of 255 bytes | exit 0, written whole (staging folder names are bounded) |
| `-o` of 256 bytes | exit 2 before the export: "at most 255 bytes" |
| `-o` of 255 bytes with external data | exit 2: the `.data` file's name would be 260 bytes |
| `-o` and `--report` not UTF-8 | exit 0; the files have exactly those bytes as names |
| an ONNX input not UTF-8, in a folder not UTF-8 (also `inspect`) | exit 0 |
| external data into a folder not UTF-8 | exit 0, the `.data` loads |
| `-o` not UTF-8 with external data | exit 2: ONNX stores the `.data` name as UTF-8 |
| names with spaces and a newline | exit 0; the message of a failure stays one line |
| external data, the same export twice | exit 0 twice, the second replaces the first |
| a stray `out.onnx.data` in the working directory | exit 0; the stray file untouched |
| `--bundle .` inside an earlier bundle, `--bundle ..` | exit 2 before the export, nothing written |

Every case checks the input is byte-identical and nothing else appears beside the outputs.
The CLI runs in the test's process, its arguments decoded as Python decodes a program's
(os.fsdecode); the non-UTF-8 `-o` and `--report` case runs it as a program (on a small ONNX
graph), so the bytes really pass through the command line.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

import onnx
import pytest

from export_gelu.exporter.saving.save import EXTERNAL_DATA_ENV
from tests.conftest import ROOT, CliResult, cli_command, run_cli
from tests.onnx_graphs import hand_graph

QUICK = ["--iterations", "1", "--warmup", "0"]


def _sha(path: Path | bytes) -> str:
    with open(path, "rb") as fh:
        return hashlib.sha256(fh.read()).hexdigest()


def _cli(*argv: object, env: dict | None = None, cwd: Path | bytes = ROOT) -> CliResult:
    return run_cli(*[a if isinstance(a, bytes) else str(a) for a in argv], env=env, cwd=cwd)


def _program(*argv: object) -> subprocess.CompletedProcess:
    """`export-gelu ARGV` as a program of its own (bytes arguments passed as bytes)."""
    return subprocess.run(cli_command(*argv), cwd=ROOT, capture_output=True, timeout=600)


def _err(proc: CliResult | subprocess.CompletedProcess) -> str:
    err = proc.stderr
    return err.decode("utf-8", "replace") if isinstance(err, bytes) else err


def _names(folder: Path | bytes) -> list[bytes]:
    return sorted(os.listdir(os.fsencode(folder)))


@pytest.fixture
def model(saved_model, tmp_path) -> Path:
    """A private copy of the example (its bytes are compared after each run)."""
    path = tmp_path / "model.pt"
    path.write_bytes(saved_model("lstm", "exported").read_bytes())
    return path


@pytest.mark.parametrize("length", [235, 255])
def test_long_output_names_work(model, tmp_path, length):
    before = _sha(model)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    out = out_dir / ("m" * (length - 5) + ".onnx")
    proc = _cli(model, "--target", "onnx", "-o", out, "--report", out_dir / "r.json", *QUICK)
    assert proc.returncode == 0, _err(proc)
    onnx.checker.check_model(str(out))
    assert _names(out_dir) == sorted([os.fsencode(out.name), b"r.json"])
    assert _sha(model) == before


def test_a_name_of_256_bytes_fails_before_the_export(model, tmp_path):
    out = tmp_path / ("m" * 251 + ".onnx")
    proc = _cli(model, "--target", "onnx", "-o", out)
    lines = _err(proc).strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, _err(proc)
    assert "is 256 bytes" in lines[0] and "at most 255 bytes" in lines[0]
    assert _names(tmp_path) == [b"model.pt"]


def test_external_data_name_too_long(model, tmp_path):
    out = tmp_path / ("m" * 250 + ".onnx")
    proc = _cli(model, "--target", "onnx", "-o", out, "--no-verify",
                env={EXTERNAL_DATA_ENV: "1000"})
    lines = _err(proc).strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, _err(proc)
    assert ".data file's name is 260 bytes" in lines[0]
    assert _names(tmp_path) == [b"model.pt"]


def test_non_utf8_output_names(tmp_path):
    """The bytes pass through a real command line, so a program of its own; its input is a
    small ONNX graph (a rewrite writes the output and the report as an export does; the
    export of a .pt to a non-UTF-8 name is the next test's first run, in this process)."""
    model = tmp_path / "model.onnx"
    onnx.save(hand_graph("tanh x*x*x"), str(model))
    before = _sha(model)
    folder = os.fsencode(tmp_path)
    out, report = folder + b"/out\xff\xfe.onnx", folder + b"/rep\xe9.json"
    proc = _program(model, "--target", "onnx", "-o", out, "--report", report, *QUICK)
    assert proc.returncode == 0, _err(proc)
    assert _names(tmp_path) == sorted([b"model.onnx", b"out\xff\xfe.onnx", b"rep\xe9.json"])
    with open(out, "rb") as fh:
        onnx.checker.check_model(onnx.load_model(fh))
    assert _sha(model) == before


def test_non_utf8_onnx_input_in_a_non_utf8_folder(saved_model, tmp_path):
    folder = os.fsencode(tmp_path) + b"/dir\xe9"
    os.mkdir(folder)
    src = folder + b"/in\xff.onnx"
    proc = _cli(saved_model("lstm", "exported"), "--target", "onnx", "-o", src, "--no-verify")
    assert proc.returncode == 0, _err(proc)
    before = _sha(src)
    proc = _cli(src, "--target", "trt8.6", *QUICK)
    assert proc.returncode == 0, _err(proc)
    assert b"in\xff.trt8.6.onnx" in _names(folder)
    proc = _cli("inspect", src)
    assert proc.returncode == 0, _err(proc)
    assert _sha(src) == before


def test_external_data_into_a_non_utf8_folder(model, tmp_path):
    folder = os.fsencode(tmp_path) + b"/w\xe9ights"
    os.mkdir(folder)
    proc = _cli(model, "--target", "onnx", "-o", folder + b"/m.onnx", *QUICK,
                env={EXTERNAL_DATA_ENV: "1000"})
    assert proc.returncode == 0, _err(proc)
    assert _names(folder) == [b"m.onnx", b"m.onnx.data"]
    from export_gelu.fspaths import utf8_alias  # onnx's C++ takes UTF-8 paths only

    model_path = os.path.join(utf8_alias(os.fsdecode(folder)), "m.onnx")
    onnx.checker.check_model(model_path, full_check=True)
    onnx.load(model_path, load_external_data=True)


def test_non_utf8_name_with_external_data_is_refused(model, tmp_path):
    out = os.fsencode(tmp_path) + b"/x\xff.onnx"
    proc = _cli(model, "--target", "onnx", "-o", out, "--no-verify",
                env={EXTERNAL_DATA_ENV: "1000"})
    lines = _err(proc).strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, _err(proc)
    assert "not UTF-8" in lines[0]
    assert _names(tmp_path) == [b"model.pt"]


def test_spaces_and_a_newline(model, tmp_path):
    out = tmp_path / "my model\nv2.onnx"
    proc = _cli(model, "--target", "onnx", "-o", out, *QUICK)
    assert proc.returncode == 0, _err(proc)
    onnx.checker.check_model(str(out))
    # a failure naming it is still one line
    proc = _cli(tmp_path / "no such\nmodel.pt", "-o", out)
    assert proc.returncode == 2 and len(_err(proc).strip().splitlines()) == 1, _err(proc)


def test_external_data_export_twice_replaces(model, tmp_path):
    env = {EXTERNAL_DATA_ENV: "1000"}
    out = tmp_path / "out" / "m.onnx"
    out.parent.mkdir()
    for _ in range(2):
        proc = _cli(model, "--target", "onnx", "-o", out, *QUICK, env=env)
        assert proc.returncode == 0, _err(proc)
        assert _names(out.parent) == [b"m.onnx", b"m.onnx.data"]
        onnx.checker.check_model(str(out), full_check=True)
        onnx.load(str(out), load_external_data=True)


def test_a_stray_data_file_in_the_working_directory(model, tmp_path):
    """onnx's own external-data writer checks `location` against the working directory;
    ours writes into the staging folder, whatever the working directory holds."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    stray = cwd / "m.onnx.data"
    stray.write_bytes(b"stray bytes")
    out = tmp_path / "out" / "m.onnx"
    out.parent.mkdir()
    proc = _cli(model, "--target", "onnx", "-o", out, *QUICK, env={
        EXTERNAL_DATA_ENV: "1000", "PYTHONPATH": str(ROOT)}, cwd=cwd)
    assert proc.returncode == 0, _err(proc)
    assert stray.read_bytes() == b"stray bytes"
    assert _names(out.parent) == [b"m.onnx", b"m.onnx.data"]
    # and the same export from inside the output's own folder, twice
    for _ in range(2):
        proc = _cli(model, "--target", "onnx", "-o", "m.onnx", *QUICK, env={
            EXTERNAL_DATA_ENV: "1000", "PYTHONPATH": str(ROOT)}, cwd=out.parent)
        assert proc.returncode == 0, _err(proc)
    onnx.load(str(out), load_external_data=True)


@pytest.mark.parametrize("where", [".", ".."])
def test_bundle_of_the_working_directory_is_refused_up_front(model, tmp_path, where):
    area = tmp_path / "area"  # holds only the earlier bundle (the model lies elsewhere)
    area.mkdir()
    bundle = area / "b"
    proc = _cli(model, "--target", "trt8.6", "-o", tmp_path / "first.onnx", "--bundle", bundle,
                *QUICK)
    assert proc.returncode == 0, _err(proc)
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    proc = _cli(model, "--target", "trt8.6", "-o", tmp_path / "second.onnx", "--bundle", where,
                *QUICK, env={"PYTHONPATH": str(ROOT)}, cwd=bundle)
    lines = _err(proc).strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, _err(proc)
    assert "working directory" in lines[0]
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before
