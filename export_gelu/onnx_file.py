"""One parse of an ONNX file's structure per run: `read_structure(path)` is the file's graph
without its external weights, parsed the first time the run asks for it and handed out again
while the file on disk is unchanged (same inode, size and modification time).

Detection, the output plan, the external-data check, input planning, vocabulary reading and
the weights loader all read the same input file; before the run kept one parse they parsed it
ten times in one `--no-verify` export of an ONNX input. The parses belong to one run, not to
the process: a run's request carries its `ParsedFiles` (results/request.py), the command
holds it open while it runs (`parsing_once`), and it goes with the run. Outside a run each
read parses the file. The proto returned is shared: callers read it and never change it
(`copy_structure` gives one to change).
"""

from __future__ import annotations

import contextlib
import contextvars
import os
from collections.abc import Iterator
from pathlib import Path

import onnx

#: A file's identity: its resolved path, device, inode, size and modification time.
Identity = tuple[str, int, int, int, int]


def _identity(path: Path) -> Identity:
    stat = os.stat(path)
    return (os.fspath(path.resolve()), stat.st_dev, stat.st_ino, stat.st_size,
            stat.st_mtime_ns)


def _parse(identity: Identity) -> onnx.ModelProto:
    with open(identity[0], "rb") as fh:
        return onnx.load_model(fh, load_external_data=False)


class ParsedFiles:
    """The ONNX files one run has parsed, by identity (a changed file is parsed again)."""

    def __init__(self) -> None:
        self._parsed: dict[Identity, onnx.ModelProto] = {}

    def read(self, path: Path) -> onnx.ModelProto:
        identity = _identity(path)
        found = self._parsed.get(identity)
        if found is None:
            found = self._parsed[identity] = _parse(identity)
        return found

    def __len__(self) -> int:
        return len(self._parsed)


_RUN_FILES: contextvars.ContextVar[ParsedFiles | None] = contextvars.ContextVar(
    "export_gelu_parsed_onnx_files", default=None)


@contextlib.contextmanager
def parsing_once(files: ParsedFiles) -> Iterator[ParsedFiles]:
    """While the block runs, `read_structure` answers from `files` (each file parsed once);
    a block inside keeps the outer run's files."""
    if _RUN_FILES.get() is not None:
        yield files
        return
    token = _RUN_FILES.set(files)
    try:
        yield files
    finally:
        _RUN_FILES.reset(token)


def read_structure(path: str | os.PathLike[str]) -> onnx.ModelProto:
    """`path` parsed without its external data: within a run, the run's one parse (shared,
    read-only). Raises what `onnx.load_model` raises on a file that does not parse (and
    OSError on one that cannot be read)."""
    files = _RUN_FILES.get()
    if files is None:
        return _parse(_identity(Path(path)))
    return files.read(Path(path))


def copy_structure(path: str | os.PathLike[str]) -> onnx.ModelProto:
    """`read_structure(path)` as a copy the caller may change."""
    model = onnx.ModelProto()
    model.CopyFrom(read_structure(path))
    return model
