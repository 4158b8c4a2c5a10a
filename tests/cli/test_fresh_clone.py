"""The README's set-up block, followed literally in a fresh clone from a fresh shell (no
virtual environment active, nothing of this session on PATH or PYTHONPATH): what a new user
types first. After it, the shell's `python` and `export-gelu` are the clone's own, ready for
the first task. The first task's commands themselves (saving the examples, `export-gelu
bert.pt --target trt`) are README blocks that tests/cli/test_docs_run.py runs and compares
(`<!-- run slow -->`, in `make test`): here they would only repeat a BERT save and export
(about 20 CPU seconds) in a second environment holding the same packages and code.

The clone's `.venv` reuses the packages of the environment running the tests (a `.pth` line
pointing at its site-packages), so `make demo` finds torch and its dependencies and does not
download them again; everything else (`pip install -e .` of the clone, the demo, `export-gelu`
on PATH after `. .venv/bin/activate`) runs as it would for the user. The clone is of the
committed HEAD.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from tests.conftest import ROOT

README = (ROOT / "README.md").read_text(encoding="utf-8")


def setup_commands() -> list[str]:
    """The set-up block's commands up to the one that puts export-gelu on PATH (the rest run
    the test suite itself), comments dropped."""
    block = re.search(r"## Set up\n\n```\n(.*?)```", README, re.S)
    assert block, "README.md has no set-up block"
    commands = [line.split("#", 1)[0].strip() for line in block.group(1).splitlines()]
    commands = [c for c in commands if c]
    end = next(i for i, c in enumerate(commands) if "activate" in c)
    return commands[:end + 1]


def first_task_commands() -> list[str]:
    """The commands that save the examples, then task 1's first command, as the README has
    them."""
    blocks = re.findall(r"<!-- run slow -->\n```console\n(.*?)```", README, re.S)
    saving = [line[2:] for line in blocks[0].splitlines() if line.startswith("$ ")]
    task1 = next(line[2:] for line in blocks[1].splitlines() if line.startswith("$ "))
    return [*saving, task1]


def test_the_setup_block_activates_the_venv_after_make_demo() -> None:
    commands = setup_commands()
    assert commands[0] == "make demo" and commands[-1] == ". .venv/bin/activate", commands
    assert first_task_commands()[-1] == "export-gelu bert.pt --target trt"


def _reused_sites() -> list[str]:
    """The running environment's site-packages folders: its own, then those it reaches
    through a `.pth` line of its own (a worktree's venv that reuses another's packages), which
    a `.pth` line in the clone's venv would not follow."""
    own = sysconfig.get_paths()["purelib"]
    found = [p for p in sys.path if Path(p).name == "site-packages" and Path(p).is_dir()]
    return list(dict.fromkeys([own, *found]))


def _fresh_shell_env() -> dict[str, str]:
    """This environment less the active venv, this session's PYTHONPATH and quiet flag."""
    venv_bin = str(Path(sys.prefix) / "bin")
    env = {k: v for k, v in os.environ.items()
           if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "EXPORT_GELU_QUIET")}
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep)
                                  if p and Path(p) != Path(venv_bin))
    return env


@pytest.mark.slow
def test_readme_setup_in_a_fresh_clone_puts_its_export_gelu_on_path(tmp_path: Path) -> None:
    if sys.prefix == sys.base_prefix:
        pytest.skip("the tests run outside a virtual environment: nothing to reuse")
    if shutil.which("git") is None or shutil.which("make") is None:
        pytest.skip("needs git and make")
    clone = tmp_path / "export-gelu"
    cloned = subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], capture_output=True,
                            text=True)
    if cloned.returncode != 0:
        pytest.skip(f"cannot clone the repository: {cloned.stderr.strip()}")
    base = Path(sys.base_prefix) / "bin" / f"python{sys.version_info[0]}.{sys.version_info[1]}"
    made = subprocess.run([str(base if base.exists() else sys.executable), "-m", "venv",
                           str(clone / ".venv")], capture_output=True, text=True)
    assert made.returncode == 0, made.stderr
    site = next((clone / ".venv" / "lib").glob("python*/site-packages"))
    (site / "reused-test-venv.pth").write_text("".join(p + "\n" for p in _reused_sites()))

    # what the first task needs of the shell: the clone's console script and Python
    script = " && ".join(["set -x", *setup_commands(), "command -v export-gelu",
                          "export-gelu --version",
                          "python -c 'import export_gelu; print(export_gelu.__file__)'"])
    proc = subprocess.run(["bash", "--norc", "--noprofile", "-c", script], cwd=clone,
                          env=_fresh_shell_env(), capture_output=True, text=True, timeout=3000)
    out = proc.stdout
    assert proc.returncode == 0, (out[-3000:], proc.stderr[-3000:])
    # make demo: exported, verified, then told what to type next
    assert out.count("Parity: PASSED") == 1, out
    assert "next: put export-gelu on PATH" in out and ". .venv/bin/activate" in out
    # activate put the clone's own export-gelu first on PATH
    assert f"{clone}/.venv/bin/export-gelu" in out
    # and runs from there: the clone's package, not the tree the tests run from
    assert re.search(r"^export-gelu \d", out, re.M), out
    assert f"{clone}/export_gelu/__init__.py" in out, out
