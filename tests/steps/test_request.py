"""steps/request.py: `prepare` checks the options (exit 2/3 before any work), bounds
`--threads` to the machine (said in a note) and checks every file the run writes."""

from __future__ import annotations

from pathlib import Path

import pytest

from export_gelu.errors import BadInputError, TargetUnmetError
from export_gelu.exporter.loading.in_memory import from_memory
from export_gelu.options import ExportOptions, FormsOptions, machine_cpus
from export_gelu.steps.request import prepare
from tests.steps.step_inputs import tiny_module


def test_prepare_checks_the_options_and_resolves_the_target(program: Path,
                                                            tmp_path: Path) -> None:
    request = prepare(ExportOptions(target="trt8.6", output=str(tmp_path / "o.onnx")), program)
    assert request.profile.name == "trt8.6" and request.model == program
    assert request.checked.outputs is not None and request.in_memory is None
    with pytest.raises(TargetUnmetError, match="--opset 99 is above trt8.2's ceiling"):
        prepare(ExportOptions(target="trt8.2", opset=99), program)


def test_prepare_bounds_threads_to_the_machine_with_a_note(program: Path,
                                                           tmp_path: Path) -> None:
    too_many = machine_cpus() + 7
    request = prepare(ExportOptions(target="ort", output=str(tmp_path / "o.onnx"),
                                    threads=too_many), program)
    assert request.options.threads == machine_cpus()
    (note,) = request.checked.notes
    assert note.code == "threads-clamped" and f"--threads {too_many}" in note


def test_prepare_refuses_a_forms_workdir_that_is_a_file(program: Path, tmp_path: Path) -> None:
    (tmp_path / "f").write_text("")
    with pytest.raises(BadInputError) as info:
        prepare(FormsOptions(workdir=str(tmp_path / "f")), program)
    assert str(info.value) == f"{tmp_path / 'f'}: not a directory"
    assert info.value.exit_code == 2


def test_prepare_refuses_what_a_model_in_memory_cannot_do(tmp_path: Path) -> None:
    import torch

    loaded = from_memory(tiny_module(), (torch.randn(2, 4, 16),), None)
    with pytest.raises(BadInputError, match="has no file to name the output after"):
        prepare(ExportOptions(target="ort"), loaded.path, loaded=loaded)
    request = prepare(ExportOptions(target="ort", output=str(tmp_path / "o.onnx")),
                      loaded.path, loaded=loaded)
    assert request.in_memory is loaded
