"""The command line starts light and answers a signal at any moment with one line.

Behaviour, not timing (the CPU time of `--help`/`--version` is measured by
benchmarks/cli_startup.py): importing the CLI imports neither torch nor onnx nor
onnxruntime; `--version` and `--help` answer without them. Signals go to a real export in a
subprocess, at three moments found from outside the process: while it imports torch (its
shared library has just been mapped), while it reads the model (the file is open), and while
it exports (the file was closed again). Each ends with exit 130 (SIGINT) or 143 (SIGTERM),
exactly one stderr line, nothing in the output folder, and the model byte-identical; a burst
of Ctrl-C gives the same single line.
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from torch import nn

from export_gelu import __version__
from tests.conftest import ROOT, default_signals

HEAVY = ("torch", "onnx", "onnxruntime", "onnxscript", "transformers")


def _python(code: str) -> str:
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


@pytest.mark.parametrize("module", ["export_gelu", "export_gelu.cli"])
def test_importing_the_cli_imports_no_heavy_library(module):
    loaded = _python(f"import sys, {module}; print(sorted(m for m in {HEAVY!r} "
                     "if m in sys.modules))")
    assert loaded == "[]"


def test_version_and_help_run_without_heavy_libraries():
    out = _python("import sys, contextlib, io\n"
                  "from export_gelu.cli import main\n"
                  "buf = io.StringIO()\n"
                  "with contextlib.redirect_stdout(buf):\n"
                  "    codes = [main(['--version']), main(['--help']), main(['verify', '--help']),"
                  " main(['inspect', '--help'])]\n"
                  f"print(codes, sorted(m for m in {HEAVY!r} if m in sys.modules))\n"
                  "print(buf.getvalue())")
    first, *rest = out.splitlines()
    assert first == "[0, 0, 0, 0] []"
    text = "\n".join(rest)
    assert f"export-gelu {__version__}" in text
    assert "--allow-pickle, --trust-model" in text and "__setstate__" in text


def test_version_console_script():
    proc = subprocess.run([sys.executable, "-m", "export_gelu.cli", "--version"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout == f"export-gelu {__version__}\n"


def test_the_public_names_import_on_first_use():
    out = _python("import export_gelu, sys\n"
                  "before = 'torch' in sys.modules\n"
                  "from export_gelu import export, verify, compare_forms, inspect_model\n"
                  "print(before, callable(export), 'torch' in sys.modules)")
    assert out == "False True True"


# ---------------------------------------------------------------- signals


@pytest.fixture(scope="module")
def slow_model(session_cache) -> Path:
    """An ExportedProgram with 64 MiB of weights: reading and exporting it take a while.
    Built once (session_cache); the tests only read it."""

    def build(path: Path) -> None:
        torch.manual_seed(0)
        layers: list[nn.Module] = []
        for _ in range(16):
            layers += [nn.Linear(1024, 1024), nn.GELU()]
        with path.open("wb") as fh:
            torch.export.save(torch.export.export(nn.Sequential(*layers).eval(),
                                                  (torch.randn(2, 1024),)), fh)

    return session_cache.file("slow-model.pt", build)


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _start(model: Path, out_dir: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "export_gelu.cli", str(model), "--target",
                             "onnx", "-o", str(out_dir / "m.onnx"), "--report",
                             str(out_dir / "r.json")], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=default_signals)


def _wait(proc: subprocess.Popen, ready: Callable[[], bool], timeout: float = 240) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        if ready():
            return True
        time.sleep(0.002)
    return False


def _maps_torch(pid: int) -> bool:
    try:
        return "libtorch" in Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return False


def _has_open(pid: int, path: Path) -> bool:
    try:
        return any(os.readlink(fd) == str(path) for fd in Path(f"/proc/{pid}/fd").iterdir())
    except OSError:
        return False


def _loaded(proc: subprocess.Popen, model: Path) -> Callable[[], bool]:
    seen = []

    def ready() -> bool:
        is_open = _has_open(proc.pid, model.resolve())
        if seen and not is_open:
            return True
        if is_open:
            seen.append(True)
        return False

    return ready


MOMENTS = {
    "importing torch": lambda proc, model: lambda: _maps_torch(proc.pid),
    "reading the model": lambda proc, model: lambda: _has_open(proc.pid, model.resolve()),
    "exporting": _loaded,
}


#: slow (make test only): SIGINT while reading the model or exporting. The same moments are
#: pinned fast with SIGTERM, SIGINT's handling by "importing torch-SIGINT" and, while
#: exporting, by test_a_burst_of_ctrl_c_is_one_line.
SLOW_SIGNALS = {("reading the model", signal.SIGINT), ("exporting", signal.SIGINT)}


@pytest.mark.skipif(not Path("/proc/self/maps").is_file(), reason="needs /proc to see the moment")
@pytest.mark.parametrize("moment, sig", [
    pytest.param(m, s, marks=[pytest.mark.slow] if (m, s) in SLOW_SIGNALS else [],
                 id=f"{m}-{s.name}")
    for m in MOMENTS for s in (signal.SIGINT, signal.SIGTERM)])
def test_a_signal_at_any_moment_is_one_line(moment, sig, slow_model, tmp_path):
    before = _sha(slow_model)
    proc = _start(slow_model, tmp_path)
    assert _wait(proc, MOMENTS[moment](proc, slow_model)), proc.communicate()[1]
    proc.send_signal(sig)
    _out, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + sig, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0] == (f"export-gelu: interrupted ({signal.Signals(sig).name}); no output "
                        "was left half-written")
    assert list(tmp_path.iterdir()) == []
    assert _sha(slow_model) == before


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc to see the moment")
def test_a_burst_of_ctrl_c_is_one_line(slow_model, tmp_path):
    proc = _start(slow_model, tmp_path)
    assert _wait(proc, _loaded(proc, slow_model)), proc.communicate()[1]
    for _ in range(5):
        proc.send_signal(signal.SIGINT)
        time.sleep(0.02)
    _out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert len(err.strip().splitlines()) == 1, err
    assert list(tmp_path.iterdir()) == []
