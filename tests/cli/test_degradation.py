"""Graceful degradation: with onnxruntime, tensorrt or matplotlib missing, every command does
what it can, says what it skipped, and none crashes on import.

"Missing" is real here: each run is a subprocess whose `sitecustomize` (put first on
PYTHONPATH) replaces the import system's PathFinder with one that cannot see the named
top-level packages, so `import onnxruntime` raises ModuleNotFoundError and
`importlib.util.find_spec("onnxruntime")` returns None, exactly as when it is not installed.
Nothing of export-gelu is mocked.

| missing | command | result |
|---|---|---|
| any | `import` of every export_gelu module | imports |
| onnxruntime | export a .pt | exit 0, output written, parity skipped naming onnxruntime |
| onnxruntime | rewrite an .onnx | exit 0, output written, parity skipped |
| onnxruntime | inspect | exit 0 |
| onnxruntime | verify | exit 3, one line: needs onnxruntime |
| tensorrt | export --target trt8.6 | exit 0, TensorRT build skipped: tensorrt is not installed |
| tensorrt | export --require-trt | exit 3, one line naming tensorrt |
| matplotlib | export / verify with --report-md | exit 0, report says plots skipped |
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import onnx
import pytest

from tests.conftest import ROOT

SITECUSTOMIZE = '''\
"""Test harness: hide the packages named in EXPORT_GELU_BLOCK_IMPORTS, as if not installed."""
import os
import sys
from importlib.machinery import PathFinder

_BLOCKED = {m for m in os.environ.get("EXPORT_GELU_BLOCK_IMPORTS", "").split(",") if m}


class _HidingPathFinder(PathFinder):
    @classmethod
    def find_spec(cls, fullname, path=None, target=None):
        if fullname.split(".")[0] in _BLOCKED:
            return None
        return PathFinder.find_spec(fullname, path, target)


sys.meta_path[:] = [_HidingPathFinder if f is PathFinder else f for f in sys.meta_path]
'''

OPTIONAL = ("onnxruntime", "tensorrt", "matplotlib")


@pytest.fixture(scope="module")
def blocker(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("blocker")
    (folder / "sitecustomize.py").write_text(SITECUSTOMIZE)
    return folder


def run_without(blocker: Path, missing: str, *argv: object,
                code: str | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, EXPORT_GELU_BLOCK_IMPORTS=missing,
               PYTHONPATH=os.pathsep.join(filter(None, [str(blocker), str(ROOT),
                                                        os.environ.get("PYTHONPATH")])))
    cmd = [sys.executable, "-c", code] if code else \
        [sys.executable, "-m", "export_gelu.cli", *map(str, argv)]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def deployed(golden_run, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An ONNX file made with everything installed (for verify/inspect/rewrite runs): a
    golden run's."""
    run = golden_run("lstm", "exported", "--target", "onnx", "--no-verify")
    assert run.code == 0, run.err
    return run.copy_to(tmp_path_factory.mktemp("deployed"), "lstm.onnx")


def _no_traceback(proc: subprocess.CompletedProcess) -> None:
    assert "Traceback" not in proc.stderr and "Traceback" not in proc.stdout, proc.stderr


def _one_line_error(proc: subprocess.CompletedProcess, code: int, needle: str) -> None:
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == code, proc.stderr
    assert len(lines) == 1 and needle in lines[0], proc.stderr


@pytest.mark.parametrize("missing", OPTIONAL)
def test_the_blocker_hides_the_package(missing, blocker):
    proc = run_without(blocker, missing, code=(
        "import importlib.util, sys\n"
        f"assert importlib.util.find_spec({missing!r}) is None\n"
        f"try:\n    import {missing}\nexcept ModuleNotFoundError:\n    sys.exit(7)\n"))
    assert proc.returncode == 7, proc.stderr


def test_every_module_imports_with_all_optional_packages_missing(blocker):
    proc = run_without(blocker, ",".join(OPTIONAL), code=(
        "import importlib, pkgutil, export_gelu\n"
        "bad = []\n"
        "for m in pkgutil.walk_packages(export_gelu.__path__, 'export_gelu.'):\n"
        "    try:\n        importlib.import_module(m.name)\n"
        "    except Exception as e:\n        bad.append(f'{m.name}: {e!r}')\n"
        "print(len(list(pkgutil.walk_packages(export_gelu.__path__, 'export_gelu.'))))\n"
        "assert not bad, bad\n"))
    assert proc.returncode == 0, proc.stderr
    assert int(proc.stdout.split()[-1]) > 20  # it really walked the package


def test_export_without_onnxruntime_writes_and_says_parity_skipped(blocker, saved_model,
                                                                   tmp_path):
    out, rep = tmp_path / "m.onnx", tmp_path / "r.json"
    proc = run_without(blocker, "onnxruntime", saved_model("lstm", "exported"), "--target",
                       "onnx", "-o", out, "--report", rep)
    _no_traceback(proc)
    assert proc.returncode == 0, proc.stderr
    onnx.checker.check_model(str(out))
    report = json.loads(rep.read_text())
    assert report["parity"]["status"] == "skipped"
    assert "onnxruntime is not installed" in report["parity"]["reason"]
    assert "onnxruntime is not installed" in proc.stdout


def test_onnx_rewrite_and_inspect_without_onnxruntime(blocker, deployed, tmp_path):
    out = tmp_path / "r.onnx"
    proc = run_without(blocker, "onnxruntime", deployed, "--target", "trt8.6", "-o", out)
    _no_traceback(proc)
    assert proc.returncode == 0, proc.stderr
    assert "onnxruntime is not installed" in proc.stdout
    onnx.checker.check_model(str(out))
    proc = run_without(blocker, "onnxruntime", "inspect", deployed)
    _no_traceback(proc)
    assert proc.returncode == 0 and "trt8.6" in proc.stdout, proc.stderr


def test_verify_without_onnxruntime_says_it_needs_it(blocker, saved_model, deployed):
    proc = run_without(blocker, "onnxruntime", "verify", saved_model("lstm", "exported"),
                       deployed, "--iterations", "1")
    _no_traceback(proc)
    if proc.returncode == 3:
        _one_line_error(proc, 3, "onnxruntime")
    else:  # a verify that degrades further must still say what it skipped
        assert proc.returncode == 0 and "onnxruntime" in proc.stdout, proc.stderr


def test_export_without_tensorrt_skips_the_engine_and_says_why(blocker, deployed, tmp_path):
    """The engine step comes after the graph, whatever MODEL was: an ONNX file (a .pt's export
    without an optional package is `test_export_without_onnxruntime_...`'s)."""
    rep = tmp_path / "r.json"
    proc = run_without(blocker, "tensorrt", deployed, "--target", "trt8.6",
                       "-o", tmp_path / "m.onnx", "--report", rep, "--iterations", "1")
    _no_traceback(proc)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(rep.read_text())
    assert report["trt"]["status"] == "skipped"
    assert "tensorrt is not installed" in report["trt"]["reason"]
    assert report["parity"]["status"] == "passed"  # ONNX Runtime still checks the file
    proc = run_without(blocker, "tensorrt", deployed, "--target", "trt8.6",
                       "-o", tmp_path / "n.onnx", "--require-trt")
    _one_line_error(proc, 3, "tensorrt")


#: slow (make test only): "verify"; the same report writer is pinned fast by "export".
@pytest.mark.parametrize("command", ["export", pytest.param("verify", marks=pytest.mark.slow)])
def test_markdown_report_without_matplotlib_says_plots_skipped(command, blocker, saved_model,
                                                               deployed, tmp_path):
    md = tmp_path / "r.md"
    model = saved_model("lstm", "exported")
    # the export: of the ONNX file (the report is written the same after any export)
    argv = ["verify", model, deployed] if command == "verify" else \
        [deployed, "--target", "onnx", "-o", tmp_path / "m.onnx"]
    proc = run_without(blocker, "matplotlib", *argv, "--report-md", md, "--iterations", "1")
    _no_traceback(proc)
    assert proc.returncode == 0, proc.stderr
    text = md.read_text()
    assert "matplotlib is not installed" in text
    assert not list(tmp_path.glob("*.png"))
