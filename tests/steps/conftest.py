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


@pytest.fixture(scope="session")
def tiny_int8(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Tiny as a program, and its INT8 Q/DQ graph for trt8.6 as `--precision int8` writes it."""
    import export_gelu

    folder = tmp_path_factory.mktemp("tiny-int8")
    program = tiny_program(folder)
    out = folder / "tiny-int8.onnx"
    report = export_gelu.export(str(program), target="trt8.6", precision="int8",
                                output=str(out), iterations=0)
    assert report.exit_code == 0, report.summary()
    return program, out
