"""The tiny model the flow tests share, built once per test process."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.steps.step_inputs import tiny_program


@pytest.fixture(scope="session")
def program(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Tiny (Linear then a tanh GELU) saved as an ExportedProgram."""
    return tiny_program(tmp_path_factory.mktemp("tiny-program"))
