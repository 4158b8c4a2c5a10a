"""Progress in a pipe (CI, a `make` log): one plain line per step as it starts, on stderr, no
carriage returns or escape codes; `--quiet` (or EXPORT_GELU_QUIET=1) says nothing.

The CLI runs in this process with stderr a pipe-like stream (not a terminal) and the
tests' EXPORT_GELU_QUIET unset; on a terminal: tests/check/test_verify.py's pty test."""

from __future__ import annotations

from pathlib import Path

from export_gelu.exporter.capture.capture import CAPTURING, USING_PROGRAM
from export_gelu.progress import QUIET_ENV
from tests.conftest import CliResult, run_cli


def _cli(*argv: object, quiet_env: bool = False) -> CliResult:
    return run_cli(*map(str, argv), env={QUIET_ENV: "1" if quiet_env else None})


def test_each_stage_prints_one_plain_line_in_a_pipe(saved_model, tmp_path: Path) -> None:
    out = tmp_path / "lstm.onnx"
    proc = _cli(saved_model("lstm", "exported"), "--target", "ort", "-o", out, "--no-verify")
    assert proc.returncode == 0, proc.stderr
    assert "\r" not in proc.stderr and "\x1b" not in proc.stderr
    lines = proc.stderr.splitlines()
    assert lines and all(line.startswith("… ") and line.endswith("s]") for line in lines), lines
    steps = [line[2:line.rindex("  [")] for line in lines]
    assert steps[0].startswith("loading ") and f"writing {out}" in steps, steps
    assert USING_PROGRAM in steps and CAPTURING not in steps  # a program is not captured again
    assert len(steps) == len(set(steps)), "a step announced twice"
    assert "… " not in proc.stdout and "Output:" in proc.stdout


def test_quiet_flag_and_environment_silence_progress(saved_model, tmp_path: Path) -> None:
    model = saved_model("lstm", "exported")
    flag = _cli(model, "--target", "ort", "-o", tmp_path / "a.onnx", "--no-verify", "--quiet")
    env = _cli(model, "--target", "ort", "-o", tmp_path / "b.onnx", "--no-verify",
               quiet_env=True)
    for proc in (flag, env):
        assert proc.returncode == 0 and proc.stderr == "", proc.stderr
        assert "Output:" in proc.stdout


def test_a_refusal_after_progress_is_still_one_error_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.pt"
    bad.write_bytes(b"not a model at all")
    proc = _cli(bad, "--target", "ort", "-o", tmp_path / "bad.onnx")
    assert proc.returncode == 2, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if not line.startswith("… ")]
    assert len(errors) == 1 and errors[0].startswith("export-gelu: error:"), proc.stderr
    assert "Traceback" not in proc.stderr and not (tmp_path / "bad.onnx").exists()


def test_inspect_takes_quiet_too(tmp_path: Path, saved_model) -> None:
    out = tmp_path / "lstm.onnx"
    assert _cli(saved_model("lstm", "exported"), "--target", "ort", "-o", out, "--no-verify",
                quiet_env=True).returncode == 0
    loud = _cli("inspect", out, "--target", "ort", "--no-dry-run")
    quiet = _cli("inspect", out, "--target", "ort", "--no-dry-run", "-q")
    assert loud.returncode == quiet.returncode == 0, loud.stderr + quiet.stderr
    assert loud.stderr.startswith("… ") and quiet.stderr == ""
    assert loud.stdout == quiet.stdout
