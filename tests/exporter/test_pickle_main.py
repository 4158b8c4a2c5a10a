"""A module pickled from a script (`torch.save(model)` in `python train.py`): its class is
`__main__.Net`. With --allow-pickle it loads when the class is importable from the working
directory, or the script is named with --import (a module name or a path) or --model-factory;
each refusal names the one thing that works for that file.

No program is started: the saving scripts run in this process as `__main__` (runpy, which
makes them `sys.modules["__main__"]` while they run, so the pickle names `__main__.Net` as
after `python train.py`; each fixture checks the pickle says so), and so do the exports
(`run_cli`), each forgetting after it what it imported from the user's folders, as a program
that ends would: a later run imports them afresh, or cannot."""

from __future__ import annotations

import os
import runpy
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

from tests.cli_runs import forgetting_imports
from tests.conftest import CliResult, run_cli

NET = '''
import torch


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.fc = torch.nn.Linear(8, 8)
        self.act = torch.nn.GELU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.fc(x))
'''

SAVE = '''
if __name__ == "__main__":
    torch.save(Net(), "net.pt")
'''


def _run_script(script: Path) -> None:
    """`python SCRIPT` from its folder, in this process: runpy runs it as `__main__` (what
    `sys.modules["__main__"]` is while it runs, as in a program of its own, so its classes
    are pickled as `__main__.Name`), its folder first on sys.path; what it imported from
    there is forgotten after."""
    here = os.getcwd()
    os.chdir(script.parent)
    try:
        with forgetting_imports(script.parent):
            sys.path.insert(0, str(script.parent))
            runpy.run_path(str(script), run_name="__main__")
    finally:
        os.chdir(here)


def _pickled_globals(path: Path) -> bytes:
    """The pickle inside a torch.save zip file (its `data.pkl`)."""
    with zipfile.ZipFile(path) as z:
        return z.read(next(n for n in z.namelist() if n.endswith("/data.pkl")))


def _cli(*argv: object, cwd: Path) -> CliResult:
    """`export-gelu ARGV` run from `cwd` in this process; what it imported from the user's
    folders is forgotten after (the next run imports them afresh, as a new program would)."""
    folders = {cwd, *(Path(a).parent for a in argv if isinstance(a, Path))}
    with forgetting_imports(*folders):
        return run_cli(*argv, "--target", "ort", "--input", "x:2x8", "--iterations", "0",
                       cwd=cwd)


@pytest.fixture(scope="module")
def script_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """train.py defines Net and pickles it from `__main__` into net.pt."""
    folder = tmp_path_factory.mktemp("script")
    (folder / "train.py").write_text(textwrap.dedent(NET + SAVE))
    _run_script(folder / "train.py")
    assert b"__main__" in _pickled_globals(folder / "net.pt"), "not pickled from __main__"
    return folder


def _one_error(proc: CliResult) -> str:
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert lines[0].startswith("export-gelu: error:") and "Traceback" not in proc.stderr
    return lines[0]


def test_refused_without_allow_pickle_naming_what_works(script_dir: Path) -> None:
    line = _one_error(_cli("net.pt", "-o", "a.onnx", cwd=script_dir))
    assert "__main__.Net" in line and "defined in the script that saved it" in line
    assert "--allow-pickle --import SCRIPT.py" in line and "torch.export.save" in line
    assert not (script_dir / "a.onnx").exists()


def test_allow_pickle_alone_names_the_import_of_the_script(script_dir: Path) -> None:
    line = _one_error(_cli("net.pt", "--allow-pickle", "-o", "b.onnx", cwd=script_dir))
    assert "__main__.Net" in line and "--import SCRIPT.py" in line
    assert "run from the directory" not in line  # the advice that could not help
    assert not (script_dir / "b.onnx").exists()


#: slow (make test only) but the script case: loading the class named by --import is pinned
#: fast by it; the module-name and factory spellings reach the same lookup.
@pytest.mark.parametrize("how", [
    pytest.param(["--import", "train"], marks=pytest.mark.slow),
    ["--import", "train.py"],
    pytest.param(["--model-factory", "train:Net"], marks=pytest.mark.slow)],
    ids=["module", "script", "factory"])
def test_loads_with_the_script_named(script_dir: Path, how: list[str], tmp_path: Path) -> None:
    out = tmp_path / "net.onnx"
    proc = _cli("net.pt", "--allow-pickle", *how, "-o", out, cwd=script_dir)
    assert proc.returncode == 0, proc.stderr
    assert "Parity: PASSED" in proc.stdout and "GELU sites: 1" in proc.stdout
    assert out.is_file()


@pytest.mark.slow  # the lookup is pinned fast by test_loads_with_the_script_named[script]
def test_script_by_path_from_another_folder(script_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "net.onnx"
    proc = _cli(script_dir / "net.pt", "--allow-pickle", "--import", script_dir / "train.py",
                "-o", out, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "Parity: PASSED" in proc.stdout


@pytest.mark.slow  # two exports; the refusal wording is its own fast test
def test_class_in_a_module_of_the_working_directory(tmp_path: Path) -> None:
    """`from mymodels import Net` in the saving script: the pickle names mymodels.Net, which
    loads from the folder holding mymodels.py, and elsewhere says to run from there."""
    (tmp_path / "mymodels.py").write_text(textwrap.dedent(NET))
    (tmp_path / "save.py").write_text("import torch\nfrom mymodels import Net\n"
                                      "torch.save(Net(), 'net.pt')\n")
    _run_script(tmp_path / "save.py")
    assert b"mymodels" in _pickled_globals(tmp_path / "net.pt")
    here = _cli("net.pt", "--allow-pickle", "-o", "net.onnx", cwd=tmp_path)
    assert here.returncode == 0 and "Parity: PASSED" in here.stdout, here.stderr
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    line = _one_error(_cli(tmp_path / "net.pt", "--allow-pickle", "-o", "x.onnx",
                           cwd=elsewhere))
    assert "needs module 'mymodels'" in line and "run from the folder that holds mymodels" in line


def test_import_of_a_missing_script_is_one_line(script_dir: Path) -> None:
    line = _one_error(_cli("net.pt", "--allow-pickle", "--import", "nope.py", "-o", "c.onnx",
                           cwd=script_dir))
    assert "--import nope.py: cannot import it" in line
