"""torch's own archive reader (the one torch.jit.load and torch.export.load use), the same on
every torch export-gelu supports.

The containment checks read a TorchScript or ExportedProgram archive through it, so the bytes
checked are the bytes the loader reads: its member lookup ignores case, and its zip parsing
may differ from Python's. torch 2.6's reader has no `get_record_size`; there a member's size
comes from the archive's directory as Python's zipfile reads it (both read the central
directory), so no member is read before its size is known, on every torch.
"""

from __future__ import annotations

import contextlib
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from export_gelu.errors import BadInputError, one_line


def _strip_root(name: str) -> str:
    """A member's name without the archive's top-level folder (torch's reader drops it)."""
    return name.split("/", 1)[1] if "/" in name else name


class ArchiveReader:
    """`get_all_records`, `get_record` and `get_record_size` of torch's reader, on any torch."""

    def __init__(self, path: Path, reader: Any) -> None:
        self._path = path
        self._reader = reader
        self._sizes: dict[str, int] | None = None

    def get_all_records(self) -> list[str]:
        return list(self._reader.get_all_records())

    def get_record(self, name: str) -> Any:
        return self._reader.get_record(name)

    def get_record_size(self, name: str) -> int:
        if hasattr(self._reader, "get_record_size"):
            return int(self._reader.get_record_size(name))
        if self._sizes is None:
            with zipfile.ZipFile(self._path) as zf:
                self._sizes = {_strip_root(i.filename).lower(): i.file_size
                               for i in zf.infolist()}
        size = self._sizes.get(name.lower())
        # a member only torch's parser sees: its length (the archive's sizes were checked)
        return size if size is not None else len(bytes(self._reader.get_record(name)))


@contextlib.contextmanager
def torch_reader(path: Path) -> Iterator[ArchiveReader]:
    """The archive opened with torch's reader; exit 2 naming the file when it cannot be."""
    import torch

    try:
        with path.open("rb") as fh:
            yield ArchiveReader(path, torch._C.PyTorchFileReader(fh))
    except BadInputError:
        raise
    except Exception as exc:  # noqa: BLE001 - miniz errors come as RuntimeError
        raise BadInputError(f"{path}: corrupt or truncated archive "
                            f"({type(exc).__name__}: {one_line(exc, 200)})") from exc
