"""Shared fixtures: real example models saved in every format, and a CLI runner."""

from __future__ import annotations

import contextlib
import io
import json
import os
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class CliResult:
    code: int
    out: str
    err: str

    def report(self, path: Path) -> dict:
        return json.loads(path.read_text())


def note_messages(report: dict) -> list[str]:
    """The words of a JSON report's notes (each note is {"code", "message"})."""
    return [n["message"] for n in report["notes"]]


def note_codes(report: dict) -> list[str]:
    """The codes of a JSON report's notes."""
    return [n["code"] for n in report["notes"]]


def run_cli(*argv: str | os.PathLike) -> CliResult:
    """Run `export-gelu` in-process (same code path as the console script)."""
    from export_gelu.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([str(a) for a in argv])
    return CliResult(code, out.getvalue(), err.getvalue())


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("models")


@pytest.fixture(scope="session")
def saved_model(model_dir: Path):
    """saved_model(example, format) → path of that example saved in that format (cached)."""
    from examples.save_model import save

    cache: dict[tuple[str, str], Path] = {}

    def get(example: str, fmt: str) -> Path:
        key = (example, fmt)
        if key not in cache:
            cache[key] = save(example, fmt, model_dir / f"{example}.{fmt}.pt")
        return cache[key]

    return get


@pytest.fixture(scope="session")
def saved_real(tmp_path_factory: pytest.TempPathFactory):
    """saved_real(name, fmt) → examples/real_models.py's `name` saved as 'exported' (keyword
    inputs, the library's output object) or 'torchscript' (cached for the session)."""
    from examples.real_models import save_exported, save_torchscript

    folder = tmp_path_factory.mktemp("real_models")
    cache: dict[tuple[str, str], Path] = {}

    def get(name: str, fmt: str) -> Path:
        if (name, fmt) not in cache:
            path = folder / f"{name}.{fmt}.pt"
            (save_exported if fmt == "exported" else save_torchscript)(name, str(path))
            cache[name, fmt] = path
        return cache[name, fmt]

    return get


@pytest.fixture(autouse=True)
def _cwd_repo_root(monkeypatch: pytest.MonkeyPatch) -> None:
    """Run from the repository root so `examples.models:…` factories import as users would."""
    monkeypatch.chdir(ROOT)
