"""Files saved by one torch, opened under another (export_gelu/exporter/model_files/
archive_versions.py, torch_reader.py, exporter/torch_compat.py; docs/torch-versions.md).

The archive layout torch.export.save wrote up to torch 2.7 is built here as that code wrote
it (the program JSON, state dict, constants and example inputs that torch's own `serialize`
makes, at the archive's root beside `version`), so the running torch reads a real one; the
writer's torch version is the one its JSON records. The other direction (a pt2 archive under
torch 2.6) is run by the floor lane (`make test-min`, docs/testing.md)."""

from __future__ import annotations

import json
import re
import zipfile
from pathlib import Path

import pytest
import torch

from export_gelu.errors import BadInputError
from export_gelu.exporter.model_files import archive_versions as av
from export_gelu.exporter.model_files.detect import ModelFormat, detect_format
from tests.conftest import run_cli


class _Tiny(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.gelu(self.fc(x))


def _legacy_archive(path: Path, torch_version: str, schema: str | None = None) -> Path:
    """An ExportedProgram in the layout of torch 2.7 and older, saying `torch_version`."""
    from torch._export.serde.schema import SCHEMA_VERSION
    from torch._export.serde.serialize import serialize

    program = torch.export.export(_Tiny().eval(), (torch.randn(2, 8),))
    art = serialize(program)
    doc = json.loads(art.exported_program)
    doc["torch_version"] = torch_version
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("version", schema or ".".join(map(str, SCHEMA_VERSION)))
        zf.writestr("serialized_exported_program.json", json.dumps(doc))
        zf.writestr("serialized_state_dict.pt", art.state_dict)
        zf.writestr("serialized_constants.pt", art.constants)
        zf.writestr("serialized_example_inputs.pt", art.example_inputs)
    return path


def test_the_layout_of_torch_2_7_and_older_is_an_exported_program_and_exports(
        tmp_path: Path) -> None:
    model = _legacy_archive(tmp_path / "old.pt2", "2.6.0+cu124")
    assert detect_format(model).format is ModelFormat.EXPORTED_PROGRAM
    info = av.program_archive(model)
    assert (info.layout, info.torch_version) == (av.LEGACY_LAYOUT, "2.6.0+cu124")
    res = run_cli(model, "--target", "ort", "-o", tmp_path / "old.onnx", "--iterations", "2",
                  "--warmup", "0")
    assert res.code == 0, res.err
    assert "Parity: PASSED" in res.out


def test_a_schema_this_torch_cannot_read_names_both_torches_and_the_way_out(
        tmp_path: Path) -> None:
    model = _legacy_archive(tmp_path / "future.pt2", "9.1.0", schema="99.0")
    res = run_cli(model, "--target", "ort", "-o", tmp_path / "f.onnx")
    assert res.code == 2
    line = res.err.strip().splitlines()[-1]
    assert "saved by torch 9.1.0" in line and f"torch {torch.__version__} here" in line
    assert "install torch 9.1.0 or newer" in line, line


def test_a_failed_load_of_another_torch_s_file_names_both_versions(tmp_path: Path) -> None:
    model = _legacy_archive(tmp_path / "older.pt2", "2.0.1")  # older than any torch supported
    older = av.ProgramArchive(av.LEGACY_LAYOUT, "2.0.1", "8.2")
    err = av.program_load_failure(model, older, KeyError("no item named 'x'"))
    assert isinstance(err, BadInputError)
    text = str(err)
    assert "saved by torch 2.0.1" in text and f"torch {torch.__version__} here" in text
    assert f"save the model again with torch.export.save under torch {torch.__version__}" in text
    same = av.ProgramArchive(av.PT2_LAYOUT, torch.__version__, None)
    assert str(av.program_load_failure(model, same, ValueError("bad"))).startswith(
        f"{model}: corrupt ExportedProgram archive")


def test_the_archive_reader_sizes_members_without_get_record_size(tmp_path: Path) -> None:
    """torch 2.6's reader has no get_record_size: sizes then come from the zip directory."""
    from export_gelu.exporter.model_files.torch_reader import ArchiveReader

    path = tmp_path / "ts.pt"
    torch.jit.save(torch.jit.trace(_Tiny().eval(), (torch.randn(2, 8),)), str(path))

    class Without:  # the real reader, less the one method torch 2.6 lacks
        def __init__(self, reader: object) -> None:
            self.get_all_records = reader.get_all_records  # type: ignore[attr-defined]
            self.get_record = reader.get_record  # type: ignore[attr-defined]

    with path.open("rb") as fh:
        real = torch._C.PyTorchFileReader(fh)
        names = real.get_all_records()
        old = ArchiveReader(path, Without(real))
        assert [old.get_record_size(n) for n in names] == \
            [len(bytes(real.get_record(n))) for n in names]


def test_torchscript_format_version_is_read_and_named_in_a_failure(tmp_path: Path) -> None:
    path = tmp_path / "ts.pt"
    torch.jit.save(torch.jit.trace(_Tiny().eval(), (torch.randn(2, 8),)), str(path))
    fmt = av.script_format(path)
    assert fmt is not None and fmt.isdigit()
    text = str(av.script_load_failure(path, RuntimeError("boom")))
    assert re.search(rf"torch {re.escape(torch.__version__)} here cannot read \(format "
                     rf"version {fmt}, RuntimeError: boom\)", text), text


def test_tree_children_is_the_spec_s_children() -> None:
    from torch.utils import _pytree as pytree

    from export_gelu.exporter.torch_compat import tree_children

    _leaves, spec = pytree.tree_flatten(((1, 2), {"a": 3}))
    assert [c.num_leaves for c in tree_children(spec)] == [2, 1]


@pytest.mark.parametrize("option", ["optimize"])
def test_the_dynamo_exporter_is_asked_to_optimize_on_every_torch(option: str) -> None:
    """torch 2.6 defaults to optimize=False (SplitToSequence left in the graph)."""
    from export_gelu.exporter.torch_compat import dynamo_export_options

    assert dynamo_export_options() == {option: True}
