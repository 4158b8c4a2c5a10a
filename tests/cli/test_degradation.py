"""Graceful degradation: with onnxruntime, tensorrt or matplotlib missing, every command does
what it can, says what it skipped, and none crashes on import.

"Missing" is real here: the runs are programs whose `sitecustomize` (put first on
PYTHONPATH) replaces the import system's PathFinder with one that cannot see the named
top-level packages, so `import onnxruntime` raises ModuleNotFoundError and
`importlib.util.find_spec("onnxruntime")` returns None, exactly as when it is not installed.
Nothing of export-gelu is mocked. One program per set of hidden packages runs that set's
cases one after another (tests/child_cases.py: each case its own stdout, stderr and exit
code), four programs in all instead of one per command.

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
from dataclasses import dataclass, field
from pathlib import Path

import onnx
import pytest

from tests.child_cases import Case, run_cases
from tests.conftest import ROOT, CliResult

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


def _env_without(blocker: Path, missing: str) -> dict[str, str]:
    return dict(os.environ, EXPORT_GELU_BLOCK_IMPORTS=missing,
                PYTHONPATH=os.pathsep.join(filter(None, [str(blocker), str(ROOT),
                                                         os.environ.get("PYTHONPATH")])))


def _hidden(missing: str) -> Case:
    """Exit 7: find_spec says the package is absent, and importing it fails as if it were."""
    return Case(f"hidden {missing}", code=(
        "import importlib.util, sys\n"
        f"assert importlib.util.find_spec({missing!r}) is None\n"
        f"try:\n    import {missing}\nexcept ModuleNotFoundError:\n    sys.exit(7)\n"))


@pytest.fixture(scope="module")
def deployed(golden_run, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An ONNX file made with everything installed (for verify/inspect/rewrite runs): a
    golden run's."""
    run = golden_run("lstm", "exported", "--target", "onnx", "--no-verify")
    assert run.code == 0, run.err
    return run.copy_to(tmp_path_factory.mktemp("deployed"), "lstm.onnx")


@dataclass
class Runs:
    """One program's cases (tests/child_cases.py) and the folder each case wrote into."""

    results: dict[str, CliResult]
    folders: dict[str, Path] = field(default_factory=dict)

    def __getitem__(self, case: str) -> CliResult:
        return self.results[case]


def _run(cases: list[tuple[Case, Path | None]], blocker: Path, missing: str) -> Runs:
    results = run_cases([c for c, _ in cases], env=_env_without(blocker, missing))
    return Runs(results, {c.name: f for c, f in cases if f is not None})


@pytest.fixture(scope="module")
def without_all(blocker) -> Runs:
    """One program with every optional package hidden: the whole package imports."""
    return _run([(Case("import every module", code=(
        "import importlib, pkgutil, export_gelu\n"
        "bad = []\n"
        "for m in pkgutil.walk_packages(export_gelu.__path__, 'export_gelu.'):\n"
        "    try:\n        importlib.import_module(m.name)\n"
        "    except Exception as e:\n        bad.append(f'{m.name}: {e!r}')\n"
        "print(len(list(pkgutil.walk_packages(export_gelu.__path__, 'export_gelu.'))))\n"
        "assert not bad, bad\n")), None)], blocker, ",".join(OPTIONAL))


@pytest.fixture(scope="module")
def without_onnxruntime(blocker, saved_model, deployed, tmp_path_factory) -> Runs:
    """One program with onnxruntime hidden, running each case in turn."""
    export, rewrite = tmp_path_factory.mktemp("export"), tmp_path_factory.mktemp("rewrite")
    model = saved_model("lstm", "exported")
    return _run([
        (_hidden("onnxruntime"), None),
        (Case("export", argv=[str(model), "--target", "onnx", "-o", str(export / "m.onnx"),
                              "--report", str(export / "r.json")]), export),
        (Case("rewrite", argv=[str(deployed), "--target", "trt8.6", "-o",
                               str(rewrite / "r.onnx")]), rewrite),
        (Case("inspect", argv=["inspect", str(deployed)]), None),
        (Case("verify", argv=["verify", str(model), str(deployed), "--iterations", "1"]), None),
    ], blocker, "onnxruntime")


@pytest.fixture(scope="module")
def without_tensorrt(blocker, deployed, tmp_path_factory) -> Runs:
    """One program with tensorrt hidden."""
    out = tmp_path_factory.mktemp("trt")
    return _run([
        (_hidden("tensorrt"), None),
        (Case("export", argv=[str(deployed), "--target", "trt8.6", "-o", str(out / "m.onnx"),
                              "--report", str(out / "r.json"), "--iterations", "1"]), out),
        (Case("--require-trt", argv=[str(deployed), "--target", "trt8.6", "-o",
                                     str(out / "n.onnx"), "--require-trt"]), None),
    ], blocker, "tensorrt")


@pytest.fixture(scope="module")
def without_matplotlib(blocker, saved_model, deployed, tmp_path_factory) -> Runs:
    """One program with matplotlib hidden: the Markdown report of an export (of the ONNX
    file: the report is written the same after any export) and of a verify."""
    cases: list[tuple[Case, Path | None]] = [(_hidden("matplotlib"), None)]
    for command in ("export", "verify"):
        out = tmp_path_factory.mktemp(command)
        argv = ["verify", str(saved_model("lstm", "exported")), str(deployed)] \
            if command == "verify" else [str(deployed), "--target", "onnx", "-o",
                                         str(out / "m.onnx")]
        cases.append((Case(command, argv=[*argv, "--report-md", str(out / "r.md"),
                                          "--iterations", "1"]), out))
    return _run(cases, blocker, "matplotlib")


def _no_traceback(proc: CliResult) -> None:
    assert "Traceback" not in proc.stderr and "Traceback" not in proc.stdout, proc.stderr


def _one_line_error(proc: CliResult, code: int, needle: str) -> None:
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == code, proc.stderr
    assert len(lines) == 1 and needle in lines[0], proc.stderr


@pytest.mark.parametrize("missing", OPTIONAL)
def test_the_blocker_hides_the_package(missing, without_onnxruntime, without_tensorrt,
                                       without_matplotlib):
    proc = {"onnxruntime": without_onnxruntime, "tensorrt": without_tensorrt,
            "matplotlib": without_matplotlib}[missing][f"hidden {missing}"]
    assert proc.returncode == 7, proc.stderr


def test_every_module_imports_with_all_optional_packages_missing(without_all):
    proc = without_all["import every module"]
    assert proc.returncode == 0, proc.stderr
    assert int(proc.stdout.split()[-1]) > 20  # it really walked the package


def test_export_without_onnxruntime_writes_and_says_parity_skipped(without_onnxruntime):
    proc, out = without_onnxruntime["export"], without_onnxruntime.folders["export"]
    _no_traceback(proc)
    assert proc.returncode == 0, proc.stderr
    onnx.checker.check_model(str(out / "m.onnx"))
    report = json.loads((out / "r.json").read_text())
    assert report["parity"]["status"] == "skipped"
    assert "onnxruntime is not installed" in report["parity"]["reason"]
    assert "onnxruntime is not installed" in proc.stdout


def test_onnx_rewrite_and_inspect_without_onnxruntime(without_onnxruntime):
    proc = without_onnxruntime["rewrite"]
    _no_traceback(proc)
    assert proc.returncode == 0, proc.stderr
    assert "onnxruntime is not installed" in proc.stdout
    onnx.checker.check_model(str(without_onnxruntime.folders["rewrite"] / "r.onnx"))
    proc = without_onnxruntime["inspect"]
    _no_traceback(proc)
    assert proc.returncode == 0 and "trt8.6" in proc.stdout, proc.stderr


def test_verify_without_onnxruntime_says_it_needs_it(without_onnxruntime):
    proc = without_onnxruntime["verify"]
    _no_traceback(proc)
    if proc.returncode == 3:
        _one_line_error(proc, 3, "onnxruntime")
    else:  # a verify that degrades further must still say what it skipped
        assert proc.returncode == 0 and "onnxruntime" in proc.stdout, proc.stderr


def test_export_without_tensorrt_skips_the_engine_and_says_why(without_tensorrt):
    """The engine step comes after the graph, whatever MODEL was: an ONNX file (a .pt's export
    without an optional package is `test_export_without_onnxruntime_...`'s)."""
    proc = without_tensorrt["export"]
    _no_traceback(proc)
    assert proc.returncode == 0, proc.stderr
    report = json.loads((without_tensorrt.folders["export"] / "r.json").read_text())
    assert report["trt"]["status"] == "skipped"
    assert "tensorrt is not installed" in report["trt"]["reason"]
    assert report["parity"]["status"] == "passed"  # ONNX Runtime still checks the file
    _one_line_error(without_tensorrt["--require-trt"], 3, "tensorrt")


#: slow (make test only): "verify"; the same report writer is pinned fast by "export".
@pytest.mark.parametrize("command", ["export", pytest.param("verify", marks=pytest.mark.slow)])
def test_markdown_report_without_matplotlib_says_plots_skipped(command, without_matplotlib):
    proc, out = without_matplotlib[command], without_matplotlib.folders[command]
    _no_traceback(proc)
    assert proc.returncode == 0, proc.stderr
    text = (out / "r.md").read_text()
    assert "matplotlib is not installed" in text
    assert not list(out.glob("*.png"))
