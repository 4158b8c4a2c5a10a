"""The tiny model the step tests share, built once per test process."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.steps.step_inputs import tiny_onnx_of_module, tiny_program


@pytest.fixture(scope="session")
def program(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Tiny saved as an ExportedProgram."""
    return tiny_program(tmp_path_factory.mktemp("tiny-program"))


@pytest.fixture(scope="session")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Tiny as a program, and as the graph torch's TorchScript exporter makes of it."""
    folder = tmp_path_factory.mktemp("tiny")
    return tiny_program(folder), tiny_onnx_of_module(folder)
