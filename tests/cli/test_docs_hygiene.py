"""The docs point somewhere real: every relative link resolves, every `.py` file a page names
exists (this repository's, or one of another project's named as such), every Python example
is a runnable block (run whole by tests/cli/test_docs_run.py), and no tracked file holds an
absolute path of the machine it was written on. `export-gelu --help` names the commands."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.docs_runner import MARKER, SLOW_MARKER

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_LINK = re.compile(r"\]\(([^)\s]+)\)")
_PY = re.compile(r"(?<![\w./-])([\w./-]*\w\.py)\b")
#: Other projects' source files the docs cite (the project and version are named beside them):
#: paths under these top folders, and these file names.
OTHER_PROJECTS = ("torch/", "onnx/", "onnxruntime/", "onnxscript/", "optimum/", "transformers/",
                  "polygraphy/", "src/", "models/", "rewriter/", "importers/", "exporters/",
                  "code/", ".../torch/")
OTHER_FILES = {"external_data_helper.py",  # onnx
               "cache_utils.py",  # transformers
               "base.py",  # onnxruntime-genai's model builder
               "__main__.py",  # optimum-onnx's exporter
               "fusion_biasgelu.py", "fusion_fastgelu.py", "fusion_quickgelu.py",  # onnxruntime
               "train.py",  # the user's own training script, in the examples of --import
               "model.py",  # the user's model source, as a first divergence or inspect names it
               "activations.py",  # transformers' GELU module, named by a node's source line
               # transformers' model files, named by a random op's or a tie's source line
               "modeling_vit_mae.py", "modeling_rt_detr.py"}
#: What an absolute path of a developer's machine looks like (the roots are spelled in
#: pieces so that this file does not itself read as one to a plain grep).
_ROOTS = (f"/{'work'}/", f"/{'home'}/[a-z]", f"/{'root'}/", "/Users/", r"[A-Z]:\\Users\\",
          "/tmp/pytest-of-")
_MACHINE_PATH = re.compile(r"(?<![\w.])(" + "|".join(_ROOTS) + ")")


def _tracked() -> list[str]:
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True)
    if out.returncode != 0:
        pytest.skip("not a git checkout")
    return out.stdout.split()


def _rel(page: Path) -> str:
    return page.relative_to(ROOT).as_posix()


@pytest.mark.parametrize("page", PAGES, ids=_rel)
def test_every_relative_link_resolves(page: Path) -> None:
    broken = []
    for target in _LINK.findall(page.read_text(encoding="utf-8")):
        if re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue  # a URL, or an anchor on the same page
        if not (page.parent / target.split("#")[0]).exists():
            broken.append(target)
    assert broken == [], f"{_rel(page)}: links to nothing: {broken}"


def _exists(name: str, tracked: list[str]) -> bool:
    if name in OTHER_FILES or name.startswith(OTHER_PROJECTS):
        return True
    return any(f == name or f.endswith("/" + name) for f in tracked)


@pytest.mark.parametrize("page", PAGES, ids=_rel)
def test_every_named_python_file_exists(page: Path) -> None:
    tracked = _tracked()
    missing = sorted({n for n in _PY.findall(page.read_text(encoding="utf-8"))
                      if not _exists(n, tracked)})
    assert missing == [], f"{_rel(page)} names files that do not exist: {missing}"


def test_the_python_file_check_catches_a_missing_name() -> None:
    tracked = _tracked()
    assert _exists("device/script.py", tracked) and _exists("export_gelu/api.py", tracked)
    assert not _exists("device_script.py", tracked) and not _exists("derive.py", tracked)


@pytest.mark.parametrize("page", PAGES, ids=_rel)
def test_every_python_example_is_run_whole(page: Path) -> None:
    """A ```python block is preceded by a run marker, so tests/cli/test_docs_run.py runs it as a
    script: no fragment that needs names from elsewhere."""
    lines = page.read_text(encoding="utf-8").splitlines()
    unrun = [i + 1 for i, line in enumerate(lines) if line.strip().startswith("```python")
             and (i == 0 or lines[i - 1].strip() not in (MARKER, SLOW_MARKER))]
    assert unrun == [], f"{_rel(page)}: Python blocks not run at lines {unrun}"


def test_no_tracked_file_holds_a_machine_path() -> None:
    found = []
    for name in _tracked():
        path = ROOT / name
        if path.suffix in (".onnx", ".png", ".pt", ".npz", ".plan") or not path.is_file():
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        if name == "tests/cli/test_docs_hygiene.py":
            continue  # its pattern and examples
        found += [f"{name}:{text.count(chr(10), 0, m.start()) + 1}: {m.group(0)}"
                  for m in _MACHINE_PATH.finditer(text)]
    assert found == [], "absolute paths of a machine in tracked files:\n" + "\n".join(found)


def test_the_machine_path_pattern_matches_what_it_must() -> None:
    work, home = "work", "home"
    for text in (f"see /{work}/main/x", f"/{home}/ana/repo", "C:\\Users\\ana",
                 "/tmp/pytest-of-root/"):
        assert _MACHINE_PATH.search(text), text
    for text in (f"docs/{work}/x", f"https://example.org/{work}/", "/tmp/x.onnx", "my-t5/"):
        assert not _MACHINE_PATH.search(text), text


def test_help_usage_names_the_commands() -> None:
    from export_gelu.cli import export_parser

    usage = export_parser().format_usage()
    assert "export-gelu verify" in usage and "export-gelu inspect" in usage
    assert "export-gelu MODEL" in usage or "export-gelu [" in usage
