"""Which torch wrote an ExportedProgram or TorchScript archive, and can the torch here read it?

A model saved by one torch is often opened under another (a training box and an export box,
a pinned JetPack container). torch's own failures then read as corruption (`KeyError: no item
named 'version'`, `Serialized version … does not match`), so the loaders ask here first and
again when a load fails, and say which torch wrote the file, which runs here, and the way out.

What the archives record (read with Python's zipfile, nothing run):
- ExportedProgram, the layout torch.export.save wrote up to torch 2.7: `version` (the
  serialization schema, `8.2`) and `serialized_exported_program.json`, whose `torch_version`
  names the writer. torch 2.8 and newer still read it.
- ExportedProgram, the pt2 archive (torch 2.8 and newer): `<name>/archive_format` (`pt2`) and
  `<name>/models/<model>.json`, with `schema_version` and `torch_version`. torch before 2.8
  cannot read it at all (its torch.export.load looks for the root `version`).
- TorchScript: `<name>/.data/version`, the file format version (no torch version is
  recorded); torch 2.6 and 2.13 read each other's files (checked both ways).
"""

from __future__ import annotations

import importlib.util
import re
import zipfile
from dataclasses import dataclass
from pathlib import Path

from export_gelu.errors import BadInputError, one_line
from export_gelu.exporter.model_files.detect import LEGACY_PROGRAM

#: `"torch_version": "2.6.0+cu124"` in a serialized program (read from the bytes, so a
#: program of any size is not parsed for one field).
_TORCH_VERSION = re.compile(rb'"torch_version"\s*:\s*"([0-9][0-9A-Za-z.+_-]{0,40})"')
#: The serialized program's JSON is searched this far for its torch_version.
_SCAN_BYTES = 256 << 20
PT2_LAYOUT, LEGACY_LAYOUT = "pt2 archive", "torch.export.save layout of torch 2.7 and older"


@dataclass(frozen=True)
class ProgramArchive:
    """What an ExportedProgram archive says about the torch that wrote it."""

    layout: str  # PT2_LAYOUT | LEGACY_LAYOUT
    torch_version: str | None  # the writer's torch, when recorded
    schema: str | None  # the serialization schema, "8.2"


def torch_here() -> str:
    import torch

    return str(torch.__version__)


def _release(version: str) -> tuple[int, ...]:
    """'2.6.0+cu124' → (2, 6, 0)."""
    return tuple(int(p) for p in re.findall(r"\d+", version.split("+")[0])[:3])


def program_archive(path: Path) -> ProgramArchive:
    """The layout, writer's torch and schema of an ExportedProgram archive (detect found one)."""
    with zipfile.ZipFile(path) as zf:
        infos = {i.filename: i for i in zf.infolist()}
        legacy = LEGACY_PROGRAM in infos
        program = LEGACY_PROGRAM if legacy else next(
            (n for n in infos if re.fullmatch(r"[^/]+/models/[^/]+\.json|models/[^/]+\.json", n)),
            None)
        torch_version = schema = None
        if program is not None:
            with zf.open(infos[program]) as fh:
                found = _TORCH_VERSION.search(fh.read(_SCAN_BYTES))
            torch_version = found.group(1).decode() if found else None
        if legacy and "version" in infos and infos["version"].file_size < 64:
            schema = zf.read("version").decode("ascii", "replace").strip()
    return ProgramArchive(PT2_LAYOUT if not legacy else LEGACY_LAYOUT, torch_version, schema)


def _schema_here() -> tuple[int, int] | None:
    try:
        from torch._export.serde.schema import SCHEMA_VERSION
    except ImportError:
        return None
    return int(SCHEMA_VERSION[0]), int(SCHEMA_VERSION[1])


def _reads_pt2() -> bool:
    """Whether this torch's torch.export.load reads the pt2 archive (torch 2.8 and newer)."""
    return importlib.util.find_spec("torch.export.pt2_archive") is not None


def _written_by(archive: ProgramArchive) -> str:
    return f"torch {archive.torch_version}" if archive.torch_version else "another torch"


def _way_out(archive: ProgramArchive, here: str) -> str:
    """What to do: run the torch that wrote it (or newer), or save the model again here."""
    writer = archive.torch_version
    if writer and _release(writer) > _release(here):
        return (f"install torch {writer.split('+')[0]} or newer to read it, or save the model "
                f"again with torch.export.save under torch {here}")
    return (f"save the model again with torch.export.save under torch {here}, or export it to "
            f"ONNX under {_written_by(archive)} and pass the .onnx file")


def refuse_unreadable(path: Path) -> ProgramArchive:
    """Exit 2 before loading when the torch here cannot read this archive's layout or schema,
    naming the torch that wrote it, the one here, and the way out; else what the archive says."""
    archive = program_archive(path)
    here = torch_here()
    why = None
    if archive.layout == PT2_LAYOUT and not _reads_pt2():
        why = f"torch {here} here reads only the {LEGACY_LAYOUT}, not the {PT2_LAYOUT}"
    schema_here = _schema_here()
    if why is None and archive.schema and schema_here is not None:
        major = archive.schema.split(".")[0]
        if major.isdigit() and int(major) != schema_here[0]:
            why = (f"its serialization schema {archive.schema} is not the "
                   f"{schema_here[0]}.x that torch {here} here reads")
    if why is not None:
        raise BadInputError(f"{path}: an ExportedProgram saved by {_written_by(archive)} in the "
                            f"{archive.layout}; {why}; {_way_out(archive, here)}")
    return archive


def program_load_failure(path: Path, archive: ProgramArchive, exc: BaseException) -> BadInputError:
    """The exit-2 error for torch.export.load failing: a file of another torch names both
    versions and the way out; one of this torch is said corrupt."""
    here = torch_here()
    cause = f"{type(exc).__name__}: {one_line(exc, 200)}"
    if archive.torch_version and _release(archive.torch_version) != _release(here):
        return BadInputError(f"{path}: an ExportedProgram saved by torch {archive.torch_version}, "
                             f"which torch {here} here cannot load ({cause}); "
                             f"{_way_out(archive, here)}")
    return BadInputError(f"{path}: corrupt ExportedProgram archive ({cause})")


def script_format(path: Path) -> str | None:
    """A TorchScript archive's file format version (`<name>/.data/version`, or
    `<name>/version`), if readable."""
    try:
        with zipfile.ZipFile(path) as zf:
            for info in zf.infolist():
                root, _, rest = info.filename.partition("/")
                if rest in ("version", ".data/version") and info.file_size < 32:
                    return zf.read(info).decode("ascii", "replace").strip() or None
    except (zipfile.BadZipFile, OSError, ValueError):
        return None
    return None


def script_load_failure(path: Path, exc: BaseException) -> BadInputError:
    """The exit-2 error for torch.jit.load failing, naming the torch here and the file's format
    version (a TorchScript archive does not record the torch that wrote it)."""
    fmt = script_format(path)
    shown = f"format version {fmt}, " if fmt else ""
    return BadInputError(
        f"{path}: corrupt TorchScript archive, or one torch {torch_here()} here cannot read "
        f"({shown}{type(exc).__name__}: {one_line(exc, 200)}); if another torch saved it, "
        "load it there and save it with torch.export.save, or run export-gelu under that torch")
